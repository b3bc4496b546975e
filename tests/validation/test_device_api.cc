// The host entry points of NCCL 2.28's device API (nccl_device/*.h), the rows
// the bad-input table cannot hold: teams are arithmetic and work for real
// (and give sentinels for a NULL or destroyed communicator); the
// requirement calls fill their structs by NCCL's formulas, through the
// exported symbols, and refuse bad input.  (Device communicators and
// symmetric windows: tests/mp/test_device_comm.cc.)
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>

#include "harness.h"

using namespace mp;

extern "C" {
struct ncclTeam {
  int nRanks, rank, stride;
};
// NCCL 2.28.9's layouts (nccl_device/impl/*__types.h, core.h).
struct Handle {  // ncclLsaBarrierHandle {bufHandle, nBarriers}, ncclGinBarrierHandle {signal0, bufHandle},
  uint32_t a, b;  // ncclLLA2AHandle {bufHandle, nSlots}
};
struct ResourceRequirements {  // ncclDevResourceRequirements
  ResourceRequirements* next;
  size_t bufferSize, bufferAlign;
  uint32_t* outBufferHandle;
  int ginSignalCount, ginCounterCount;
  uint32_t *outGinSignalStart, *outGinCounterStart;
};
ncclTeam ncclTeamWorld(ncclComm_t comm);
ncclTeam ncclTeamLsa(ncclComm_t comm);
ncclTeam ncclTeamRail(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam team, int rank);
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* out);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* devComm);
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam team, int nBarriers, void* handle, void* req);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam team, int nBarriers, void* handle, void* req);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void* handle, void* req);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
void ncclResetDebugInitInternal(void);
}

namespace {

bool same(ncclTeam a, ncclTeam b) { return a.nRanks == b.nRanks && a.rank == b.rank && a.stride == b.stride; }

}  // namespace

TEST_CASE("device API host entry points: teams and requirements work",
          "[validation][device]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          ncclTeam world = ncclTeamWorld(comm);
          if (!same(world, {2, rank, 1})) f.fail("ncclTeamWorld");
          if (!same(ncclTeamLsa(comm), {2, rank, 1})) f.fail("ncclTeamLsa (one host)");
          if (!same(ncclTeamRail(comm), {1, 0, 2})) f.fail("ncclTeamRail (one host)");
          if (ncclTeamRankToWorld(comm, world, 1 - rank) != 1 - rank) f.fail("ncclTeamRankToWorld");
          if (ncclTeamRankToLsa(comm, world, 1 - rank) != 1 - rank) f.fail("ncclTeamRankToLsa");
          // Sentinels for a NULL communicator (no result code to return).
          if (!same(ncclTeamWorld(nullptr), {0, -1, 1}) || ncclTeamRankToWorld(nullptr, world, 0) != -1)
            f.fail("NULL communicator sentinels");

          Handle gin{};
          ResourceRequirements req{};
          MP_NCCL(f, ncclGinBarrierCreateRequirement(comm, world, 2, &gin, &req));
          // 2.28.9's buffer and 2.30's signals (one per barrier and team rank): either kind of client.
          if (req.bufferSize != 2 * 4 * 4 || req.ginSignalCount != 2 * 2 || req.outGinSignalStart != &gin.a ||
              req.outBufferHandle != &gin.b)
            f.fail("ncclGinBarrierCreateRequirement's requirement");

          float in = float(rank + 1), out = 0;
          MP_NCCL(f, ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr));
          if (out != 3.f) f.fail("allreduce after the device API calls");
        }) == 0);
  // The functions without a communicator, from this thread alone (their
  // message goes to the process-wide last error).
  ncclTeam world{2, 0, 1};
  CHECK(ncclDevCommCreate(nullptr, nullptr, nullptr) != ncclSuccess);
  Handle lsa{}, a2a{};
  ResourceRequirements req;
  std::memset(&req, 0x5a, sizeof req);
  CHECK(ncclLsaBarrierCreateRequirement(world, 3, &lsa, &req) == ncclSuccess);
  CHECK(req.bufferSize == (3 * 3 + 3 * 2) * 4);
  CHECK(req.bufferAlign == 4);
  CHECK(req.outBufferHandle == &lsa.a);
  CHECK(lsa.b == 3);
  CHECK(req.next == nullptr);
  CHECK(ncclLLA2ACreateRequirement(2, 4, &a2a, &req) == ncclSuccess);
  CHECK(req.bufferSize == 2 * (1 + 2 * 4) * 16);
  CHECK(req.bufferAlign == 16);
  CHECK(a2a.b == 4);
  CHECK(ncclLLA2ACalcSlots(1024, 4) == 1024);
  CHECK(ncclLLA2ACalcSlots(1024, 16) == 2048);
  // Bad input: an error naming the call (NCCL checks none of it).
  CHECK(ncclLsaBarrierCreateRequirement(world, -1, &lsa, &req) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("ncclLsaBarrierCreateRequirement") != std::string::npos);
  CHECK(ncclLLA2ACreateRequirement(1, 1, nullptr, &req) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("ncclLLA2ACreateRequirement") != std::string::npos);
  CHECK(ncclLLA2ACalcSlots(-5, 4) == -1);
  CHECK(std::string(ncclGetLastError(nullptr)).find("ncclLLA2ACalcSlots") != std::string::npos);
  ncclResetDebugInitInternal();  // NCCL's internal alias: must exist and not disturb anything
}

TEST_CASE("device API teams: NCCL's shapes over real hosts, bad teams and members refused", "[validation][device][processes]") {
  // 6 processes on 3 emulated hosts of 2: LSA teams of 2, rails of 3.
  CHECK(run_ranks_as_processes(
            6,
            [](int rank, int n, ncclComm_t comm, Failures& f) {
              if (!same(ncclTeamLsa(comm), {2, rank % 2, 1})) f.fail("ncclTeamLsa on 3 hosts of 2");
              ncclTeam rail = ncclTeamRail(comm);
              if (!same(rail, {3, rank / 2, 2})) f.fail("ncclTeamRail on 3 hosts of 2");
              if (ncclTeamRankToWorld(comm, rail, 2) != 4 + rank % 2) f.fail("ncclTeamRankToWorld of the rail");
              const int partner = rank ^ 1;  // the other rank on this host
              if (ncclTeamRankToLsa(comm, ncclTeamWorld(comm), partner) != partner % 2) f.fail("ncclTeamRankToLsa");
              // A world rank on another host has no LSA index: -1 and why.
              const int far = (rank + 2) % n;
              if (ncclTeamRankToLsa(comm, ncclTeamWorld(comm), far) != -1) f.fail("ncclTeamRankToLsa of another host");
              if (std::string(ncclGetLastError(comm)).find("LSA team") == std::string::npos)
                f.fail(std::string("message for another host: ") + ncclGetLastError(comm));
              if (ncclTeamRankToWorld(comm, rail, 3) != -1) f.fail("member 3 of a rail of 3");
              if (ncclTeamRankToWorld(comm, ncclTeam{4, 0, 0}, 0) != -1) f.fail("a team of stride 0");
              if (ncclTeamRankToWorld(comm, ncclTeam{2, 5, 1}, 0) != -1) f.fail("a team rank past its size");
              if (std::string(ncclGetLastError(comm)).find("is not a team") == std::string::npos)
                f.fail(std::string("message for a bad team: ") + ncclGetLastError(comm));
              if (ncclTeamRankToWorld(comm, ncclTeam{n, rank, 2}, 0) != -1) f.fail("a team reaching past the world");
            },
            60, [](int rank) { setenv("BRAID_HOSTID", ("devapi-host-" + std::to_string(rank / 2)).c_str(), 1); }) ==
        0);
  // Hosts of 3 and 1 ranks: NCCL's gcd makes every LSA team a single rank.
  CHECK(run_ranks_as_processes(
            4,
            [](int rank, int n, ncclComm_t comm, Failures& f) {
              if (!same(ncclTeamLsa(comm), {1, 0, 1})) f.fail("ncclTeamLsa on uneven hosts");
              if (!same(ncclTeamRail(comm), {4, rank, 1})) f.fail("ncclTeamRail on uneven hosts");
            },
            60, [](int rank) { setenv("BRAID_HOSTID", rank < 3 ? "devapi-big" : "devapi-small", 1); }) == 0);
  ncclTeam world{2, 0, 1};
  CHECK(ncclTeamRankToLsa(nullptr, world, 0) == -1);
  CHECK(std::string(ncclGetLastError(nullptr)).find("ncclTeamRankToLsa") != std::string::npos);
  CHECK(same(ncclTeamRail(nullptr), {0, -1, 1}));
}

// BRAID_CHECK=1 (or NCCL_CHECK_MODE=DEBUG_GLOBAL): ranks that disagree on a
// collective's count, datatype, op, root or algorithm selection (a call's
// algSelection, a tuner plugin's pick) all get ncclInvalidArgument
// before any byte moves (their output buffers
// stay untouched), and the communicator keeps working for agreeing calls;
// sends and receives are compared pair by pair.
// With the check off, agreeing calls are unaffected (checked elsewhere).
#include <catch2/catch.hpp>

#include "harness.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

using namespace mp;

namespace {

struct Mismatch {
  const char* what;
  size_t count[2];
  ncclDataType_t type[2];
  ncclRedOp_t op[2];
  int root[2];
  bool rooted;
};

}  // namespace

TEST_CASE("BRAID_CHECK=1 turns cross-rank argument mismatches into ncclInvalidArgument on every rank",
          "[validation][check]") {
  setenv("BRAID_CHECK", "1", 1);
  const Mismatch cases[] = {
      {"count", {100, 101}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 0}, false},
      {"datatype", {100, 100}, {ncclFloat, ncclInt32}, {ncclSum, ncclSum}, {0, 0}, false},
      {"op", {100, 100}, {ncclFloat, ncclFloat}, {ncclSum, ncclMax}, {0, 0}, false},
      {"root", {100, 100}, {ncclFloat, ncclFloat}, {ncclSum, ncclSum}, {0, 1}, true},
  };
  for (const Mismatch& m : cases) {
    INFO("mismatch in " << m.what);
    CHECK(run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, Failures& f) {
            std::vector<float> in(200, 1.f), out(200, -5.f);
            ncclResult_t r = m.rooted ? ncclReduce(in.data(), out.data(), m.count[rank], m.type[rank], m.op[rank],
                                                   m.root[rank], comm, nullptr)
                                      : ncclAllReduce(in.data(), out.data(), m.count[rank], m.type[rank], m.op[rank],
                                                      comm, nullptr);
            if (r != ncclInvalidArgument) f.fail(fmt::format("rank {}: mismatch returned {}", rank, int(r)));
            if (std::string(ncclGetLastError(comm)).find("argument check") == std::string::npos)
              f.fail(fmt::format("rank {}: message: {}", rank, ncclGetLastError(comm)));
            for (float v : out)
              if (v != -5.f) return f.fail(fmt::format("rank {}: output written despite the mismatch", rank));
            // Agreeing calls still work, exactly.
            MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 200, ncclFloat, ncclSum, comm, nullptr));
            if (out[199] != 2.f) f.fail("allreduce after a mismatch wrong");
          }) == 0);
  }
  // One rank selects rd for its call, the other leaves the choice to braid
  // (a tuner plugin's pick on one rank alone looks the same).
  CHECK(run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, Failures& f) {
          std::vector<float> in(200, 1.f), out(200, -5.f);
          ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
          config.algSelection = "rd";
          const ncclResult_t r = ncclAllReduceConfig(in.data(), out.data(), 200, ncclFloat, ncclSum, comm, nullptr,
                                                     rank == 1 ? &config : nullptr);
          const std::string said = ncclGetLastError(comm);
          if (r != ncclInvalidArgument || said.find("algorithms=rd") == std::string::npos ||
              said.find("algorithms=any") == std::string::npos)
            f.fail(fmt::format("rank {}: selections apart returned {}: {}", rank, int(r), said));
          if (out[0] != -5.f) f.fail("output written");
          MP_NCCL(f, ncclAllReduceConfig(in.data(), out.data(), 200, ncclFloat, ncclSum, comm, nullptr, &config));
          if (out[199] != 2.f) f.fail("allreduce with agreeing selections wrong");
        }) == 0);
  // A group whose ranks queued different numbers of collectives.
  CHECK(run_ranks_as_threads(3, [&](int rank, int n, ncclComm_t comm, Failures& f) {
          std::vector<float> in(10, 1.f), out(10, -5.f);
          ncclGroupStart();
          ncclAllReduce(in.data(), out.data(), 10, ncclFloat, ncclSum, comm, nullptr);
          if (rank == 2) ncclAllReduce(in.data(), out.data(), 10, ncclFloat, ncclSum, comm, nullptr);
          ncclResult_t r = ncclGroupEnd();
          if (r != ncclInvalidArgument) f.fail(fmt::format("rank {}: uneven group returned {}", rank, int(r)));
          if (out[0] != -5.f) f.fail("output written");
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 10, ncclFloat, ncclSum, comm, nullptr));
          if (out[9] != 3.f) f.fail("allreduce after uneven group wrong");
        }) == 0);
  unsetenv("BRAID_CHECK");
}

// A call one rank's own checks refuse (here a bad datatype, or a NULL
// buffer) still goes to the cross-rank check, so its peer's call fails at
// once instead of waiting for that rank (BRAID_TIMEOUT is 30 s here).  A
// count of 0 is compared too: 0 against 64 is a mismatch, 0 everywhere runs.
TEST_CASE("BRAID_CHECK=1: a call one rank refuses fails its peers' at once, and counts of 0 are compared",
          "[validation][check]") {
  setenv("BRAID_CHECK", "1", 1);
  setenv("BRAID_TIMEOUT", "30", 1);
  CHECK(run_ranks_as_threads(2, [&](int rank, int, ncclComm_t comm, Failures& f) {
          std::vector<float> in(64, 1.f), out(64, -5.f);
          for (int bad = 0; bad < 2; ++bad) {
            const auto start = std::chrono::steady_clock::now();
            const ncclResult_t r =
                rank == 1 ? ncclAllReduce(bad ? nullptr : in.data(), out.data(), 64, bad ? ncclFloat : ncclNumTypes,
                                          ncclSum, comm, nullptr)
                          : ncclAllReduce(in.data(), out.data(), 64, ncclFloat, ncclSum, comm, nullptr);
            const std::string why = ncclGetLastError(comm);
            if (r != ncclInvalidArgument || (rank == 0 && why.find("rank 1 refused") == std::string::npos))
              f.fail(fmt::format("rank {}: a refused call returned {} ({})", rank, int(r), why));
            if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5))
              f.fail(fmt::format("rank {}: the refusal took over 5 s", rank));
          }
          if (out[0] != -5.f) f.fail(fmt::format("rank {}: output written", rank));
          ncclResult_t r = ncclAllReduce(in.data(), out.data(), rank == 0 ? 0 : 64, ncclFloat, ncclSum, comm, nullptr);
          if (r != ncclInvalidArgument) f.fail(fmt::format("rank {}: counts 0 and 64 returned {}", rank, int(r)));
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 0, ncclFloat, ncclSum, comm, nullptr));
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 64, ncclFloat, ncclSum, comm, nullptr));
          if (out[63] != 2.f) f.fail(fmt::format("rank {}: allreduce after the refusals wrong", rank));
        }) == 0);
  unsetenv("BRAID_TIMEOUT");
  unsetenv("BRAID_CHECK");
}

// A group over two communicators, one of whose ranks disagree: only that
// communicator's part fails; the other's runs, exactly, so a rank that is
// only in the other one (rank 2 here, which calls alone) is not left waiting.
TEST_CASE("BRAID_CHECK=1: a mismatch on one communicator of a group leaves the other's work running",
          "[validation][check]") {
  setenv("BRAID_CHECK", "1", 1);
  setenv("BRAID_TIMEOUT", "30", 1);
  CHECK(run_ranks_as_threads(3, [&](int rank, int, ncclComm_t all, Failures& f) {
          ncclComm_t pair = nullptr;  // ranks 0 and 1
          MP_NCCL(f, ncclCommSplit(all, rank < 2 ? 0 : NCCL_SPLIT_NOCOLOR, rank, &pair, nullptr));
          std::vector<float> in(64, 1.f), out(64, -5.f), out_all(64, -5.f);
          const auto start = std::chrono::steady_clock::now();
          if (rank < 2) {
            MP_NCCL(f, ncclGroupStart());
            ncclAllReduce(in.data(), out.data(), rank == 0 ? 64 : 32, ncclFloat, ncclSum, pair, nullptr);
            ncclAllReduce(in.data(), out_all.data(), 64, ncclFloat, ncclSum, all, nullptr);
            const ncclResult_t r = ncclGroupEnd();
            if (r != ncclInvalidArgument) f.fail(fmt::format("rank {}: the group returned {}", rank, int(r)));
            if (out[0] != -5.f) f.fail(fmt::format("rank {}: the mismatched call wrote its output", rank));
          } else {
            MP_NCCL(f, ncclAllReduce(in.data(), out_all.data(), 64, ncclFloat, ncclSum, all, nullptr));
          }
          if (out_all[63] != 3.f) f.fail(fmt::format("rank {}: the other communicator's allreduce gave {}", rank,
                                                     out_all[63]));
          if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5))
            f.fail(fmt::format("rank {}: the group took over 5 s", rank));
          if (pair) MP_NCCL(f, ncclCommDestroy(pair));
        }) == 0);
  unsetenv("BRAID_TIMEOUT");
  unsetenv("BRAID_CHECK");
}

// Sends and receives are checked pair by pair: the pair that disagrees fails
// on both of its ranks at once, with its buffers untouched, while another
// pair of the same group runs exactly; a refused receive fails its sender.
TEST_CASE("BRAID_CHECK=1: a pair whose sends and receives disagree fails at once, the group's other pairs run",
          "[validation][check]") {
  setenv("BRAID_CHECK", "1", 1);
  setenv("BRAID_TIMEOUT", "30", 1);
  CHECK(run_ranks_as_threads(3, [&](int rank, int, ncclComm_t comm, Failures& f) {
          std::vector<float> data(64, float(rank + 1)), got(64, -5.f);
          const auto start = std::chrono::steady_clock::now();
          MP_NCCL(f, ncclGroupStart());
          if (rank == 0) {
            ncclSend(data.data(), 64, ncclFloat, 1, comm, nullptr);
            ncclSend(data.data(), 64, ncclFloat, 2, comm, nullptr);
          } else {
            ncclRecv(got.data(), rank == 1 ? 32 : 64, ncclFloat, 0, comm, nullptr);  // rank 1 expects 32
          }
          const ncclResult_t r = ncclGroupEnd();
          const std::string why = ncclGetLastError(comm);
          if (rank < 2 && (r != ncclInvalidArgument ||
                           why.find("rank 0 sends rank 1 [64 x type 7], rank 1 receives [32 x type 7]") ==
                               std::string::npos))
            f.fail(fmt::format("rank {}: the mismatched pair returned {} ({})", rank, int(r), why));
          if (rank == 1 && got[0] != -5.f) f.fail("rank 1: the mismatched receive wrote its buffer");
          if (rank == 2 && (r != ncclSuccess || got[63] != 1.f))
            f.fail(fmt::format("rank 2: the matching pair returned {}, got {}", int(r), got[63]));
          // A receive its own rank refuses fails the sender at once; counts of 0 are compared.
          if (rank < 2) {
            const ncclResult_t refused = rank == 0 ? ncclSend(data.data(), 64, ncclFloat, 1, comm, nullptr)
                                                   : ncclRecv(nullptr, 64, ncclFloat, 0, comm, nullptr);
            if (refused != ncclInvalidArgument ||
                (rank == 0 && std::string(ncclGetLastError(comm)).find("rank 1 refused its receive from rank 0") ==
                                  std::string::npos))
              f.fail(fmt::format("rank {}: a refused receive gave {} ({})", rank, int(refused),
                                 ncclGetLastError(comm)));
            const ncclResult_t zero = rank == 0 ? ncclSend(data.data(), 0, ncclFloat, 1, comm, nullptr)
                                                : ncclRecv(got.data(), 64, ncclFloat, 0, comm, nullptr);
            if (zero != ncclInvalidArgument) f.fail(fmt::format("rank {}: counts 0 and 64 gave {}", rank, int(zero)));
            MP_NCCL(f, rank == 0 ? ncclSend(data.data(), 0, ncclFloat, 1, comm, nullptr)
                                 : ncclRecv(got.data(), 0, ncclFloat, 0, comm, nullptr));
          }
          if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5))
            f.fail(fmt::format("rank {}: the checks took over 5 s", rank));
          // The communicator still works, exactly.
          MP_NCCL(f, ncclAllReduce(data.data(), got.data(), 64, ncclFloat, ncclSum, comm, nullptr));
          if (got[0] != 6.f) f.fail(fmt::format("rank {}: allreduce after the mismatches gave {}", rank, got[0]));
        }) == 0);
  unsetenv("BRAID_TIMEOUT");
  unsetenv("BRAID_CHECK");
}

TEST_CASE("BRAID_CHECK set on one rank only still checks on all (agreed at init)", "[validation][check]") {
  // Rank 1 alone has BRAID_CHECK=1.  Were it to check alone, it would wait for
  // records rank 0 never sends; agreed at init, both check and both refuse.
  auto setup = [](int rank) {
    if (rank == 1) setenv("BRAID_CHECK", "1", 1);
    else unsetenv("BRAID_CHECK");
  };
  CHECK(run_ranks_as_processes(2, [](int rank, int, ncclComm_t comm, Failures& f) {
          std::vector<float> in(64, 1.f), out(64, -5.f);
          ncclResult_t r = ncclAllReduce(in.data(), out.data(), rank == 0 ? 64 : 63, ncclFloat, ncclSum, comm, nullptr);
          if (r != ncclInvalidArgument) f.fail(fmt::format("rank {}: mismatch returned {}", rank, int(r)));
          if (out[0] != -5.f) f.fail(fmt::format("rank {}: output written despite the mismatch", rank));
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 64, ncclFloat, ncclSum, comm, nullptr));
          if (out[63] != 2.f) f.fail("allreduce after the mismatch wrong");
        }, 60, setup) == 0);
}

// NCCL_CHECK_MODE's local check: a host buffer that is not mapped memory
// (here: a page unmapped after mmap) is refused before any data moves, where
// a worker thread would otherwise fault; on every rank, since each passes
// one; then an exact call.  Without the mode, no check is made (not run: it
// would fault).
TEST_CASE("NCCL_CHECK_MODE=DEBUG_LOCAL and NCCL_CHECK_POINTERS=1 refuse a host buffer that is not mapped",
          "[validation][check]") {
  for (const char* setting : {"NCCL_CHECK_MODE=DEBUG_LOCAL", "NCCL_CHECK_POINTERS=1", "NCCL_CHECK_MODE=DEBUG_GLOBAL"}) {
    INFO(setting);
    const std::string name(setting, std::strchr(setting, '=')), value(std::strchr(setting, '=') + 1);
    auto setup = [&](int) {
      unsetenv("NCCL_CHECK_MODE");
      setenv(name.c_str(), value.c_str(), 1);
    };
    CHECK(run_ranks_as_processes(2, [&](int rank, int n, ncclComm_t comm, Failures& f) {
            const size_t page = size_t(sysconf(_SC_PAGESIZE));
            char* two = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                                -1, 0));
            munmap(two + page, page);  // the second page is gone
            float* tail = reinterpret_cast<float*>(two + page - 64 * sizeof(float));
            std::vector<float> in(128, 1.f), out(128 * n, -5.f);
            // Runs past the mapping: recvbuff for AllReduce, sendbuff for AllGather, a send.
            ncclResult_t r = ncclAllReduce(in.data(), tail, 128, ncclFloat, ncclSum, comm, nullptr);
            if (r != ncclInvalidArgument || std::string(ncclGetLastError(comm)).find("not mapped") == std::string::npos)
              f.fail(fmt::format("rank {}: allreduce into an unmapped page returned {} ({})", rank, int(r),
                                 ncclGetLastError(comm)));
            r = ncclAllGather(tail, out.data(), 128, ncclFloat, comm, nullptr);
            if (r != ncclInvalidArgument) f.fail(fmt::format("rank {}: allgather returned {}", rank, int(r)));
            r = ncclSend(tail, 128, ncclFloat, (rank + 1) % n, comm, nullptr);
            if (r != ncclInvalidArgument) f.fail(fmt::format("rank {}: send returned {}", rank, int(r)));
            // What fits the mapping passes.
            MP_NCCL(f, ncclAllReduce(in.data(), tail, 64, ncclFloat, ncclSum, comm, nullptr));
            if (tail[63] != 2.f) f.fail(fmt::format("rank {}: allreduce wrong", rank));
            munmap(two, page);
          }, 60, setup) == 0);
  }
}

TEST_CASE("NCCL_CHECK_MODE=DEBUG_GLOBAL is BRAID_CHECK=1, and DEBUG_LOCAL adds no exchange", "[validation][check]") {
  for (const char* mode : {"DEBUG_GLOBAL", "DEBUG_LOCAL"}) {
    INFO("NCCL_CHECK_MODE=" << mode);
    const bool global = std::string(mode) == "DEBUG_GLOBAL";
    auto setup = [&](int) {
      unsetenv("BRAID_CHECK");
      setenv("NCCL_CHECK_MODE", mode, 1);
    };
    CHECK(run_ranks_as_processes(2, [&](int rank, int, ncclComm_t comm, Failures& f) {
            std::vector<float> in(64, 1.f), out(64, -5.f);
            if (global) {
              const ncclResult_t r = ncclAllReduce(in.data(), out.data(), rank == 0 ? 64 : 63, ncclFloat, ncclSum,
                                                   comm, nullptr);
              if (r != ncclInvalidArgument || out[0] != -5.f)
                f.fail(fmt::format("rank {}: a mismatch returned {} ({})", rank, int(r), ncclGetLastError(comm)));
            }
            MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 64, ncclFloat, ncclSum, comm, nullptr));
            if (out[63] != 2.f) f.fail(fmt::format("rank {}: allreduce wrong", rank));
          }, 60, setup) == 0);
  }
}

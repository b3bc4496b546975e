// API basics: versions, error strings, argument checks with NCCL's codes.
#include <catch2/catch.hpp>

#include "collective_check.h"

using namespace mp;

TEST_CASE("version and error strings", "[api]") {
  int v = 0;
  REQUIRE(ncclGetVersion(&v) == ncclSuccess);
  CHECK(v == NCCL_VERSION_CODE);
  CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
  CHECK(std::string(ncclGetErrorString(ncclInvalidArgument)).find("invalid argument") == 0);
  CHECK(std::string(ncclGetErrorString(ncclResult_t(42))) == "unknown result code");
}

TEST_CASE("bad arguments get NCCL's codes and leave the communicator usable", "[api][errors][threads]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          float a[4] = {1, 2, 3, 4}, b[4];
          auto expect = [&](ncclResult_t got, ncclResult_t want, const char* what) {
            if (got != want) f.fail(fmt::format("{}: got {} want {}", what, int(got), int(want)));
            else if (std::string(ncclGetLastError(comm)).empty() && want != ncclSuccess)
              f.fail(fmt::format("{}: no last error message", what));
          };
          expect(ncclAllReduce(a, b, 4, ncclNumTypes, ncclSum, comm, nullptr), ncclInvalidArgument, "bad type");
          expect(ncclAllReduce(a, b, 4, ncclFloat, ncclNumOps, comm, nullptr), ncclInvalidArgument, "bad op");
          expect(ncclAllReduce(nullptr, b, 4, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument, "null send");
          expect(ncclAllReduce(a, nullptr, 4, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument, "null recv");
          expect(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument, "null comm");
          expect(ncclBroadcast(a, b, 4, ncclFloat, n, comm, nullptr), ncclInvalidArgument, "root too big");
          expect(ncclReduce(a, b, 4, ncclFloat, ncclSum, -1, comm, nullptr), ncclInvalidArgument, "negative root");
          expect(ncclSend(a, 4, ncclFloat, n, comm, nullptr), ncclInvalidArgument, "peer out of range");
          expect(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comm, nullptr), ncclSuccess, "count 0");
          int out;
          expect(ncclCommCount(comm, nullptr), ncclInvalidArgument, "null count ptr");
          expect(ncclCommUserRank(nullptr, &out), ncclInvalidArgument, "null comm rank");
          // Still works afterwards.
          CollCase c;
          c.count = 4;
          run_and_check(c, rank, n, comm, f);
        }) == 0);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
}

TEST_CASE("init argument checks and double destroy", "[api][errors]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 0, id, 0) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(&comm, 2, id, 2) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(nullptr, 1, id, 0) == ncclInvalidArgument);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument);
  ncclConfig_t good = NCCL_CONFIG_INITIALIZER;
  REQUIRE(ncclCommInitRankConfig(&comm, 1, id, 0, &good) == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclInvalidArgument);
  CHECK(ncclCommDestroy(nullptr) == ncclSuccess);  // NCCL: a no-op
}

TEST_CASE("ncclMemAlloc is page aligned and refuses foreign frees", "[api]") {
  void* p = nullptr;
  REQUIRE(ncclMemAlloc(&p, 1000) == ncclSuccess);
  CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
  CHECK(ncclMemFree(p) == ncclSuccess);
  CHECK(ncclMemFree(p) == ncclInvalidArgument);
  int local = 0;
  CHECK(ncclMemFree(&local) == ncclInvalidArgument);
  CHECK(ncclMemFree(nullptr) == ncclSuccess);
  // More than the machine holds fails now, not in the OOM killer at first touch.
  p = &local;
  CHECK(ncclMemAlloc(&p, size_t(1) << 50) != ncclSuccess);
  CHECK(p == nullptr);
  CHECK(std::string(ncclGetLastError(nullptr)).find("more than this machine's memory") != std::string::npos);
}

// The AlltoAllv whose counts live in memory (braid/alltoallv.h) on real
// ranks: threads, forked processes, processes on emulated hosts (one-sided
// RMA between them) and threads forced onto RMA (BRAID_MOE_RMA=1, where
// ThreadSanitizer sees both ends).  Every call's received bytes and counts
// are checked exactly, over random counts that change call to call (zeros
// and full blocks included) and every element size; bad arguments fail
// every rank's call with a clear error; a late or dead rank fails the
// others within the handle's timeout.
#include <fmt/format.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "alltoallv_calls.h"
#include "scoped_env.h"

using namespace moe_test;

namespace {

std::function<void(int)> two_per_host() {
  return [](int rank) { setenv("BRAID_HOSTID", fmt::format("a2av-host-{}", rank / 2).c_str(), 1); };
}

}  // namespace

TEST_CASE("alltoallv with counts in memory: exact, counts change every call, ranks as threads",
          "[moe][alltoallv][threads]") {
  const ncclDataType_t types[] = {ncclUint8, ncclBfloat16, ncclFloat32, ncclInt64};
  for (int n : {2, 3, 5, 8}) {
    A2aCase c{.type = types[n % 4], .max_count = 1 + n * 9, .calls = 6, .seed = uint64_t(n)};
    INFO("threads n=" << n);
    CHECK(mp::run_ranks_as_threads(n, calls_body(c)) == 0);
  }
}

TEST_CASE("alltoallv with counts in memory: exact, ranks as processes of one host and of several",
          "[moe][alltoallv][processes][hosts]") {
  for (int n : {2, 4}) {
    A2aCase c{.type = ncclFloat16, .max_count = 300, .calls = 5, .seed = uint64_t(40 + n)};
    INFO("processes n=" << n);
    CHECK(mp::run_ranks_as_processes(n, calls_body(c), 120) == 0);
  }
  CHECK(mp::run_ranks_as_processes(4, calls_body(A2aCase{.type = ncclInt32, .max_count = 1000, .calls = 8, .seed = 5}),
                                   120, two_per_host()) == 0);
  CHECK(mp::run_ranks_as_processes(3, calls_body(A2aCase{.type = ncclUint8, .max_count = 5, .calls = 100, .seed = 6}),
                                   120, two_per_host()) == 0);
}

TEST_CASE("alltoallv over RMA between threads (BRAID_MOE_RMA=1): exact, 100 calls back to back",
          "[moe][alltoallv][threads][hosts]") {
  ScopedEnv rma("BRAID_MOE_RMA", "1");
  CHECK(mp::run_ranks_as_threads(
            3, calls_body(A2aCase{.type = ncclFloat64, .max_count = 64, .calls = 100, .seed = 7})) == 0);
}

TEST_CASE("alltoallv bad input: clear errors on every rank, and the handle takes the next call",
          "[moe][alltoallv][threads]") {
  CHECK(braidAlltoAllv(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr) == ncclInvalidArgument);
  CHECK(braidAlltoAllvDestroy(nullptr) == ncclInvalidArgument);
  CHECK(mp::run_ranks_as_threads(3, [](int rank, int n, ncclComm_t comm, mp::Failures& f) {
          auto expect = [&](ncclResult_t got, ncclResult_t want, const char* text, const char* what) {
            const std::string why = ncclGetLastError(comm);
            if (got != want || why.find(text) == std::string::npos)
              f.fail(fmt::format("rank {}: {} -> {} ({}), want {} mentioning '{}'", rank, what, int(got), why,
                                 int(want), text));
          };
          braidAlltoAllv_t a2a = nullptr;
          expect(braidAlltoAllvCreate(comm, ncclFloat32, 0, 0, &a2a), ncclInvalidArgument, "maxCountPerPeer",
                 "maxCountPerPeer 0");
          expect(braidAlltoAllvCreate(comm, ncclFloat32, rank == 1 ? 8 : 9, 0, &a2a), ncclInvalidArgument,
                 "maxCountPerPeer", "ranks disagree");
          expect(braidAlltoAllvCreate(comm, ncclNumTypes, 8, 0, &a2a), ncclInvalidArgument, "datatype", "bad datatype");
          expect(braidAlltoAllvCreate(comm, ncclFloat32, 8, 0, nullptr), ncclInvalidArgument, "handle is NULL",
                 "NULL handle");
          MP_NCCL(f, braidAlltoAllvCreate(comm, ncclFloat32, 8, 2000, &a2a));
          if (!a2a) return;
          std::vector<float> send(size_t(8) * n, 1.0f), recv(send.size());
          std::vector<int64_t> counts(static_cast<size_t>(n), 2), got(static_cast<size_t>(n));
          MP_NCCL(f, braidAlltoAllv(a2a, send.data(), counts.data(), recv.data(), got.data(), nullptr));
          if (rank == 2) counts[0] = 9;  // past maxCountPerPeer: rank 2's error, and everyone's
          expect(braidAlltoAllv(a2a, send.data(), counts.data(), recv.data(), got.data(), nullptr),
                 rank == 2 ? ncclInvalidArgument : ncclRemoteError,
                 rank == 2 ? "sendCounts[0] = 9" : "rank 2 passed bad arguments", "a count past the capacity");
          counts.assign(counts.size(), 2);
          expect(braidAlltoAllv(a2a, send.data(), rank == 1 ? nullptr : counts.data(), recv.data(), got.data(),
                                nullptr),
                 rank == 1 ? ncclInvalidArgument : ncclRemoteError,
                 rank == 1 ? "sendCounts or recvCounts is NULL" : "rank 1 passed bad arguments", "NULL counts");
          // The handle goes on: the next calls are exact, with new values.
          for (int call = 0; call < 3; ++call) {
            for (int d = 0; d < n; ++d)
              for (int i = 0; i < 2; ++i) send[size_t(d) * 2 + i] = float(100 * rank + 10 * d + i + call);
            recv.assign(recv.size(), -1.0f);
            got.assign(got.size(), -1);
            MP_NCCL(f, braidAlltoAllv(a2a, send.data(), counts.data(), recv.data(), got.data(), nullptr));
            for (int s = 0; s < n; ++s)
              for (int i = 0; i < 2; ++i)
                if (got[size_t(s)] != 2 || recv[size_t(s) * 2 + i] != float(100 * s + 10 * rank + i + call))
                  f.fail(fmt::format("rank {}: call {} after the failed ones: from {} got {} ({} elements)", rank,
                                     call, s, recv[size_t(s) * 2 + i], got[size_t(s)]));
          }
          MP_NCCL(f, braidAlltoAllvDestroy(a2a));
        }) == 0);
}

namespace {

enum : int { kOk = 0, kInit = 10, kCreate = 11, kWrong = 12, kNoError = 13, kBadText = 14, kSlow = 15 };
constexpr int kTimeoutMs = 2000;  // every wait's bound, the first calls' too: slack for a loaded machine
// How long a rank stays after its part, so that a survivor whose wait began
// late still times out on the last rank, not on a connection closed first.
constexpr int kLingerMs = 3000;

// Ranks on hosts of their own.  The last rank is late (asleep) for call 2,
// or dies (SIGKILL) before it; the others' call 2 must fail within the
// timeout (plus slack), naming what they waited for.
int late_or_dead(int rank, int n, const ncclUniqueId& id, bool dies) {
  setenv("BRAID_HOSTID", fmt::format("a2av-fault-host-{}", rank).c_str(), 1);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return kInit;
  braidAlltoAllv_t a2a = nullptr;
  if (braidAlltoAllvCreate(comm, ncclInt32, 16, kTimeoutMs, &a2a) != ncclSuccess) return kCreate;
  std::vector<int32_t> send(size_t(16) * n, rank), recv(send.size());
  std::vector<int64_t> counts(static_cast<size_t>(n), 3), got(static_cast<size_t>(n));
  int code = kOk;
  for (int call = 0; call < 2 && code == kOk; ++call)
    if (braidAlltoAllv(a2a, send.data(), counts.data(), recv.data(), got.data(), nullptr) != ncclSuccess) {
      std::fprintf(stderr, "rank %d: call %d failed: %s\n", rank, call, ncclGetLastError(comm));
      code = kWrong;
    }
  // A barrier first: over sockets a rank killed while its peers still
  // finish call 1 could reset connections under data they need.
  mp::Failures f;
  mp::barrier_all(comm, f);
  if (f.count) code = kWrong;
  if (code == kOk && rank == n - 1) {
    if (dies) raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * kTimeoutMs + kLingerMs));
  } else if (code == kOk) {
    const auto start = std::chrono::steady_clock::now();
    const ncclResult_t r = braidAlltoAllv(a2a, send.data(), counts.data(), recv.data(), got.data(), nullptr);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string why = ncclGetLastError(comm);
    if (r == ncclSuccess) code = kNoError;
    // Late: its wait gives up.  Dead: that wait, or a put to the dead rank, fails.
    else if (why.find(dies ? fmt::format("rank {}", n - 1) : std::string("reached over RMA")) == std::string::npos)
      code = kBadText;
    else if ((!dies && took < kTimeoutMs / 1000.0 * 0.9) || took > kTimeoutMs / 1000.0 + 5)
      code = kSlow;
    if (code != kOk) std::fprintf(stderr, "rank %d: code %d after %.2f s: %s\n", rank, code, took, why.c_str());
    // Closing now would cut short another survivor's wait: stay until every wait has timed out.
    std::this_thread::sleep_for(std::chrono::milliseconds(kLingerMs));
  }
  ncclCommAbort(comm);
  braidAlltoAllvDestroy(a2a);
  return code;
}

void run_fault(bool dies) {
  const int n = 3;
  std::vector<pid_t> pids = mp::fork_ranks(
      n, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) { return late_or_dead(r, n, ids[0], dies); });
  REQUIRE(int(pids.size()) == n);
  for (int r = 0; r < n; ++r) {
    int status = 0;
    REQUIRE(waitpid(pids[size_t(r)], &status, 0) == pids[size_t(r)]);
    INFO("rank " << r);
    if (dies && r == n - 1) {
      CHECK(WIFSIGNALED(status));
      continue;
    }
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == kOk);
  }
}

}  // namespace

TEST_CASE("alltoallv: a late rank fails the others at the handle's timeout, a dead one within it",
          "[moe][alltoallv][processes][faults][hosts]") {
  run_fault(false);
  run_fault(true);
}

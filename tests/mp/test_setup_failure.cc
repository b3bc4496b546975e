// A window registration one rank fails midway (BRAID_TEST_FAIL_WINDOW_RANK:
// its backend fails before its exchanges, as one that cannot map a peer's
// memory or connect RMA would): its peers wait in an exchange it will not
// make, so the communicator breaks on every rank (src/shim/api_memory.cc).
// Every rank's ncclCommWindowRegister fails well within BRAID_TIMEOUT and
// hands out no window, ncclCommGetAsyncError reports the error, a later
// collective and a shrink are refused at once, and destroying the
// communicator works (the harness does).  Ranks as threads, as processes
// on one host (shared memory) and as processes on emulated hosts (sockets).
//
// A group with such a registration and a collective on another
// communicator: the collective still runs, on every rank
// (src/runtime/group.cc).
//
// And a resume one rank cannot complete (a file-size limit its shared
// memory segments cannot grow past): the same break, on every rank.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>

#include "collective_check.h"
#include "scoped_env.h"

using namespace mp;

namespace {

constexpr int kFailingRank = 1;
using Clock = std::chrono::steady_clock;

void registration_breaks_the_comm(int rank, int n, ncclComm_t comm, Failures& f) {
  const size_t bytes = size_t(n) * 1024 * sizeof(float);
  void* mem = nullptr;
  MP_NCCL(f, ncclMemAlloc(&mem, bytes));
  ncclWindow_t win = nullptr;
  auto start = Clock::now();
  const ncclResult_t registered = ncclCommWindowRegister(comm, mem, bytes, &win, NCCL_WIN_DEFAULT);
  const std::string why = ncclGetLastError(comm);
  if (registered == ncclSuccess) f.fail(fmt::format("rank {}: the registration succeeded", rank));
  if (win) f.fail(fmt::format("rank {}: a failed registration handed out a window", rank));
  if (rank == kFailingRank && why.find("BRAID_TEST_FAIL_WINDOW_RANK") == std::string::npos)
    f.fail(fmt::format("rank {}: the error says '{}', not why", rank, why));
  // BRAID_TIMEOUT is 30 s here: a peer that waited for it would take that.
  if (Clock::now() - start > std::chrono::seconds(10))
    f.fail(fmt::format("rank {}: the failure took more than 10 s ({})", rank, why));

  ncclResult_t async = ncclSuccess;
  MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
  if (async == ncclSuccess || async == ncclInProgress)
    f.fail(fmt::format("rank {}: ncclCommGetAsyncError says {} after the failure", rank, int(async)));
  std::vector<float> in(64, 1.0f), out(64);
  start = Clock::now();
  if (ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr) == ncclSuccess)
    f.fail(fmt::format("rank {}: a collective ran on the broken communicator", rank));
  if (Clock::now() - start > std::chrono::seconds(1))
    f.fail(fmt::format("rank {}: the refused collective took more than 1 s", rank));
  // Its bootstrap is closed: shrinking it is refused at once, saying so
  // (docs/compatibility.md), not after a wait.
  if (rank != kFailingRank) {
    int exclude[1] = {kFailingRank};
    ncclComm_t shrunk = nullptr;
    start = Clock::now();
    if (ncclCommShrink(comm, exclude, 1, &shrunk, nullptr, NCCL_SHRINK_ABORT) == ncclSuccess || shrunk)
      f.fail(fmt::format("rank {}: a broken communicator was shrunk", rank));
    else if (std::string(ncclGetLastError(comm)).find("aborted") == std::string::npos)
      f.fail(fmt::format("rank {}: shrinking says '{}'", rank, ncclGetLastError(comm)));
    if (Clock::now() - start > std::chrono::seconds(1))
      f.fail(fmt::format("rank {}: the refused shrink took more than 1 s", rank));
  }
  MP_NCCL(f, ncclMemFree(mem));
}

// A group that registers a window on a communicator of ranks 0 and 1 (a
// split; its rank 1 fails as above) and runs an AllReduce on the parent,
// which ranks 2 and 3 run alone: the AllReduce still runs on every rank,
// exactly, and the parent stays usable.  Ranks 2 and 3 would otherwise wait
// for ranks 0 and 1 until BRAID_TIMEOUT.
void group_keeps_the_other_comms_work(int rank, int n, ncclComm_t comm, Failures& f) {
  ncclComm_t pair = nullptr;
  MP_NCCL(f, ncclCommSplit(comm, rank < 2 ? 0 : NCCL_SPLIT_NOCOLOR, rank, &pair, nullptr));
  const size_t bytes = 1024 * sizeof(float);
  void* mem = nullptr;
  MP_NCCL(f, ncclMemAlloc(&mem, bytes));
  std::vector<int32_t> in(4096, rank + 1), out(in.size(), -1);
  const int32_t want = n * (n + 1) / 2;
  ncclWindow_t win = nullptr;
  const auto start = Clock::now();
  MP_NCCL(f, ncclGroupStart());
  if (pair) MP_NCCL(f, ncclCommWindowRegister(pair, mem, bytes, &win, NCCL_WIN_DEFAULT));  // runs at the group's end
  MP_NCCL(f, ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comm, nullptr));
  const ncclResult_t ended = ncclGroupEnd();
  if (pair && ended == ncclSuccess) f.fail(fmt::format("rank {}: the group succeeded", rank));
  if (!pair && ended != ncclSuccess) f.fail(fmt::format("rank {}: {}", rank, ncclGetLastError(nullptr)));
  if (Clock::now() - start > std::chrono::seconds(10))
    f.fail(fmt::format("rank {}: the group took more than 10 s ({})", rank, ncclGetLastError(nullptr)));
  if (win) f.fail(fmt::format("rank {}: a failed registration handed out a window", rank));
  if (std::count(out.begin(), out.end(), want) != ptrdiff_t(out.size()))
    f.fail(fmt::format("rank {}: the AllReduce gave {}, want {}", rank, out[0], want));

  ncclResult_t async = ncclInternalError;
  MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) f.fail(fmt::format("rank {}: the parent's async error is {}", rank, int(async)));
  if (pair) {
    MP_NCCL(f, ncclCommGetAsyncError(pair, &async));
    if (async == ncclSuccess) f.fail(fmt::format("rank {}: the failed communicator's async error is 0", rank));
    MP_NCCL(f, ncclCommDestroy(pair));
  }
  std::fill(out.begin(), out.end(), -1);
  MP_NCCL(f, ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comm, nullptr));
  if (std::count(out.begin(), out.end(), want) != ptrdiff_t(out.size()))
    f.fail(fmt::format("rank {}: the next AllReduce gave {}", rank, out[0]));
  MP_NCCL(f, ncclMemFree(mem));
}

}  // namespace

TEST_CASE("a window registration one rank fails midway breaks the communicator on every rank, threads",
          "[mp][window][faults][threads]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_WINDOW_RANK", std::to_string(kFailingRank).c_str());
  CHECK(run_ranks_as_threads(4, registration_breaks_the_comm) == 0);
}

TEST_CASE("a window registration one rank fails midway breaks the communicator on every rank, processes",
          "[mp][window][faults]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_WINDOW_RANK", std::to_string(kFailingRank).c_str());
  CHECK(run_ranks_as_processes(4, registration_breaks_the_comm) == 0);
}

TEST_CASE("a window registration one rank fails midway breaks the communicator on every rank, emulated hosts",
          "[mp][window][faults][hosts]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_WINDOW_RANK", std::to_string(kFailingRank).c_str());
  CHECK(run_ranks_as_processes(3, registration_breaks_the_comm, 60, [](int rank) {
          setenv("BRAID_HOSTID", fmt::format("window-host-{}", rank).c_str(), 1);
        }) == 0);
}

TEST_CASE("a resume one rank cannot complete breaks the communicator on every rank, processes",
          "[mp][suspend][faults]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  CHECK(run_ranks_as_processes(3, [](int rank, int, ncclComm_t comm, Failures& f) {
          void* mem = nullptr;
          MP_NCCL(f, ncclMemAlloc(&mem, 4096));
          ncclWindow_t win = nullptr;  // resume connects its RMA again
          MP_NCCL(f, ncclCommWindowRegister(comm, mem, 4096, &win, NCCL_WIN_DEFAULT));
          barrier_all(comm, f);
          MP_NCCL(f, ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
          rlimit old{};
          getrlimit(RLIMIT_FSIZE, &old);
          if (rank == kFailingRank) {
            signal(SIGXFSZ, SIG_IGN);  // growing a segment past the limit fails with EFBIG instead of killing
            rlimit tight = old;
            tight.rlim_cur = 0;
            setrlimit(RLIMIT_FSIZE, &tight);
          }
          const auto start = Clock::now();
          if (ncclCommResume(comm) == ncclSuccess) f.fail(fmt::format("rank {}: the resume succeeded", rank));
          if (Clock::now() - start > std::chrono::seconds(10))
            f.fail(fmt::format("rank {}: the failed resume took more than 10 s ({})", rank, ncclGetLastError(comm)));
          if (rank == kFailingRank) setrlimit(RLIMIT_FSIZE, &old);
          ncclResult_t async = ncclSuccess;
          MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
          if (async == ncclSuccess || async == ncclInProgress)
            f.fail(fmt::format("rank {}: ncclCommGetAsyncError says {} after the failed resume", rank, int(async)));
        }) == 0);
}

TEST_CASE("a group whose window registration fails still runs its collectives on another communicator, threads",
          "[mp][window][faults][threads]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_WINDOW_RANK", std::to_string(kFailingRank).c_str());
  CHECK(run_ranks_as_threads(4, group_keeps_the_other_comms_work) == 0);
}

TEST_CASE("a group whose window registration fails still runs its collectives on another communicator, processes",
          "[mp][window][faults]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_WINDOW_RANK", std::to_string(kFailingRank).c_str());
  CHECK(run_ranks_as_processes(4, group_keeps_the_other_comms_work) == 0);
}

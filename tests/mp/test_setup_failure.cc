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
// An init one rank fails midway (BRAID_TEST_FAIL_INIT_RANK), alone or in
// a group, blocking or not: the same break, on every rank (group.cc).
//
// And a resume one rank cannot complete: the same break, on every rank.
#include <catch2/catch.hpp>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>

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
  // The refusal says what broke the communicator, not only that something did.
  const std::string refused = ncclGetLastError(comm);
  if (refused.find("earlier asynchronous error (") == std::string::npos || refused.find("()") != std::string::npos ||
      (rank == kFailingRank && refused.find("BRAID_TEST_FAIL_WINDOW_RANK") == std::string::npos))
    f.fail(fmt::format("rank {}: the refusal says '{}', not what broke the communicator", rank, refused));
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

// Polls a communicator until it leaves ncclInProgress (bounded).
ncclResult_t settle(ncclComm_t comm, Failures& f) {
  ncclResult_t state = ncclInProgress;
  for (auto start = Clock::now(); state == ncclInProgress && Clock::now() - start < std::chrono::seconds(40);) {
    MP_NCCL(f, ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

// A group that registers a window on a communicator of ranks 0 and 1 (a
// split, blocking or not; its rank 1 fails as above) and runs an AllReduce
// on the parent, which ranks 2 and 3 run alone: the AllReduce still runs
// on every rank, exactly, and the parent stays usable and reports no
// error (a non-blocking group's communicators each report their own
// outcome).  Ranks 2 and 3 would otherwise wait for ranks 0 and 1 until
// BRAID_TIMEOUT.
void group_keeps_the_other_comms_work(int rank, int n, ncclComm_t comm, bool nonblocking, Failures& f) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = nonblocking ? 0 : 1;
  ncclComm_t pair = nullptr;
  const ncclResult_t split = ncclCommSplit(comm, rank < 2 ? 0 : NCCL_SPLIT_NOCOLOR, rank, &pair, &config);
  if ((split != ncclSuccess && split != ncclInProgress) || (pair && settle(pair, f) != ncclSuccess))
    return f.fail(fmt::format("rank {}: the split failed ({})", rank, ncclGetLastError(nullptr)));
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
  ncclResult_t ended = ncclGroupEnd();
  // A non-blocking group runs in the background: the parent's state is
  // final once its work is done, the pair's is its outcome.
  const ncclResult_t on_parent = settle(comm, f);
  if (ended == ncclInProgress && pair) ended = settle(pair, f);
  if (pair && ended == ncclSuccess) f.fail(fmt::format("rank {}: the group succeeded", rank));
  if (!pair && ended != ncclSuccess) f.fail(fmt::format("rank {}: {}", rank, ncclGetLastError(nullptr)));
  if (Clock::now() - start > std::chrono::seconds(10))
    f.fail(fmt::format("rank {}: the group took more than 10 s ({})", rank, ncclGetLastError(nullptr)));
  if (win) f.fail(fmt::format("rank {}: a failed registration handed out a window", rank));
  if (std::count(out.begin(), out.end(), want) != ptrdiff_t(out.size()))
    f.fail(fmt::format("rank {}: the AllReduce gave {}, want {}", rank, out[0], want));

  if (on_parent != ncclSuccess) f.fail(fmt::format("rank {}: the parent's async error is {}", rank, int(on_parent)));
  if (pair) {
    ncclResult_t async = ncclSuccess;
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

// Every rank makes communicators from `ids` in one group, blocking or not,
// and kFailingRank's inits fail midway (BRAID_TEST_FAIL_INIT_RANK): every
// rank's must fail well within BRAID_TIMEOUT, since the failing rank breaks
// each communicator in its init thread and its peers' waits end at once.
// The failing rank keeps its communicators until the others are done
// (`others_done`, shared memory that forked ranks see too), so that only the
// break, not its abort, can end their waits.
void init_fails_everywhere(int rank, int n, const std::vector<ncclUniqueId>& ids, bool blocking,
                           std::atomic<int>* others_done, Failures& f) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  std::vector<ncclComm_t> comms(ids.size(), nullptr);
  const auto start = Clock::now();
  MP_NCCL(f, ncclGroupStart());
  for (size_t i = 0; i < ids.size(); ++i) MP_NCCL(f, ncclCommInitRankConfig(&comms[i], n, ids[i], rank, &config));
  const ncclResult_t ended = ncclGroupEnd();
  // The first communicator's own error: the process-wide one (NCCL's
  // ncclGetLastError(NULL)) is also written by peer ranks that are threads.
  const std::string why = ncclGetLastError(comms[0]);
  for (ncclComm_t comm : comms) {
    // A non-blocking group's outcome is each communicator's async error.
    const ncclResult_t state = ended == ncclInProgress ? settle(comm, f) : ended;
    if (state == ncclSuccess || state == ncclInProgress)
      f.fail(fmt::format("rank {}: an init ended in {}", rank, int(state)));
  }
  if (Clock::now() - start > std::chrono::seconds(10))
    f.fail(fmt::format("rank {}: the failed init took more than 10 s ({})", rank, why));
  if (blocking && rank == kFailingRank && why.find("BRAID_TEST_FAIL_INIT_RANK") == std::string::npos)
    f.fail(fmt::format("rank {}: the error says '{}', not why", rank, why));
  if (rank != kFailingRank) others_done->fetch_add(1);
  while (rank == kFailingRank && others_done->load() < n - 1 && Clock::now() - start < std::chrono::seconds(40))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (ncclComm_t comm : comms) MP_NCCL(f, ncclCommAbort(comm));
}

int total(const std::vector<Failures>& failures) {
  int sum = 0;
  for (const Failures& f : failures) sum += f.count;
  return sum;
}

// A counter in shared anonymous memory: forked ranks share it.
struct SharedCounter {
  SharedCounter()
      : at(static_cast<std::atomic<int>*>(
            mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0))) {
    REQUIRE(at != MAP_FAILED);
    new (at) std::atomic<int>(0);
  }
  ~SharedCounter() { munmap(at, sizeof(std::atomic<int>)); }
  std::atomic<int>* at;
};

int init_as_threads(int n, int ncomms, bool blocking) {
  std::vector<ncclUniqueId> ids(size_t(ncomms), ncclUniqueId{});
  for (auto& id : ids)
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  SharedCounter done;
  std::vector<Failures> failures(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { init_fails_everywhere(r, n, ids, blocking, done.at, failures[size_t(r)]); });
  for (auto& t : threads) t.join();
  return total(failures);
}

int init_as_processes(int n, int ncomms, bool blocking) {
  SharedCounter done;
  return reap_with_one_killed(fork_ranks(n, 60, ncomms, [&](int r, const std::vector<ncclUniqueId>& ids) {
                                Failures f;
                                init_fails_everywhere(r, n, ids, blocking, done.at, f);
                                return f.count ? 1 : 0;
                              }),
                              -1);  // none killed: every rank must pass
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

// The failing rank's resume fails as it connects its windows again (a
// hook: a real resource limit made that rank fail only where it created a
// segment before its peers did, about half the runs once creating one no
// longer sized it whole; and one with no file descriptor left also starved
// UBSan's checks, which open a pipe).
TEST_CASE("a resume one rank cannot complete breaks the communicator on every rank, processes",
          "[mp][suspend][faults]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_RESUME_RANK", std::to_string(kFailingRank));
  CHECK(run_ranks_as_processes(3, [](int rank, int, ncclComm_t comm, Failures& f) {
          void* mem = nullptr;
          MP_NCCL(f, ncclMemAlloc(&mem, 4096));
          ncclWindow_t win = nullptr;  // resume connects its RMA again
          MP_NCCL(f, ncclCommWindowRegister(comm, mem, 4096, &win, NCCL_WIN_DEFAULT));
          barrier_all(comm, f);
          MP_NCCL(f, ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
          const auto start = Clock::now();
          if (ncclCommResume(comm) == ncclSuccess) f.fail(fmt::format("rank {}: the resume succeeded", rank));
          if (Clock::now() - start > std::chrono::seconds(10))
            f.fail(fmt::format("rank {}: the failed resume took more than 10 s ({})", rank, ncclGetLastError(comm)));
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
  for (bool nonblocking : {false, true}) {
    CAPTURE(nonblocking);
    CHECK(run_ranks_as_threads(4, [&](int rank, int n, ncclComm_t comm, Failures& f) {
            group_keeps_the_other_comms_work(rank, n, comm, nonblocking, f);
          }) == 0);
  }
}

TEST_CASE("a group whose window registration fails still runs its collectives on another communicator, processes",
          "[mp][window][faults]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_WINDOW_RANK", std::to_string(kFailingRank).c_str());
  for (bool nonblocking : {false, true}) {
    CAPTURE(nonblocking);
    CHECK(run_ranks_as_processes(4, [&](int rank, int n, ncclComm_t comm, Failures& f) {
            group_keeps_the_other_comms_work(rank, n, comm, nonblocking, f);
          }) == 0);
  }
}

TEST_CASE("an init one rank fails midway fails on every rank at once, threads", "[mp][init][faults][threads]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_INIT_RANK", std::to_string(kFailingRank).c_str());
  CHECK(init_as_threads(4, 1, false) == 0);  // non-blocking
  CHECK(init_as_threads(4, 2, true) == 0);   // a blocking group of two
}

TEST_CASE("an init one rank fails midway fails on every rank at once, processes", "[mp][init][faults]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv fail("BRAID_TEST_FAIL_INIT_RANK", std::to_string(kFailingRank).c_str());
  CHECK(init_as_processes(4, 2, false) == 0);  // a non-blocking group of two
  CHECK(init_as_processes(4, 1, true) == 0);
}

namespace {

// n thread ranks start a non-blocking init (`init`), in which rank
// `stalled` stalls; once every rank has seen its init still in progress,
// each aborts, the stalled one last (its abort ends its stall, which could
// end its peers' waits too): every abort must return within 3 s.  The
// total of failures.
int abort_stalled_inits(int n, int stalled, const std::function<ncclResult_t(int, ncclConfig_t*, ncclComm_t*)>& init) {
  std::vector<Failures> failures(static_cast<size_t>(n));
  std::atomic<int> checked{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Failures& f = failures[size_t(r)];
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      ncclComm_t comm = nullptr;
      const ncclResult_t started = init(r, &config, &comm);
      if (started != ncclInProgress || !comm) {
        checked.fetch_add(2);
        return f.fail(fmt::format("rank {}: init returned {}", r, int(started)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the others are in their exchanges by now
      ncclResult_t state = ncclSuccess;
      MP_NCCL(f, ncclCommGetAsyncError(comm, &state));
      if (state != ncclInProgress) f.fail(fmt::format("rank {}: the init ended in {} before the abort", r, int(state)));
      checked.fetch_add(1);
      const int before = r == stalled ? 2 * n - 1 : n;
      for (auto until = Clock::now() + std::chrono::seconds(10); checked.load() < before && Clock::now() < until;)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto start = Clock::now();
      MP_NCCL(f, ncclCommAbort(comm));
      if (Clock::now() - start > std::chrono::seconds(3)) f.fail(fmt::format("rank {}: the abort took over 3 s", r));
      checked.fetch_add(1);
    });
  for (auto& t : threads) t.join();
  return total(failures);
}

}  // namespace

// A non-blocking init whose peer stalls after the first exchange: the
// others wait in a later one, and ncclCommAbort must end their wait at
// once, not after BRAID_TIMEOUT.
TEST_CASE("an abort ends a non-blocking init whose peer stalls", "[mp][init][faults][nonblocking][threads]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv stall("BRAID_TEST_STALL_INIT_RANK", std::to_string(kFailingRank).c_str());
  const int n = 3;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(abort_stalled_inits(n, kFailingRank, [&](int r, ncclConfig_t* config, ncclComm_t* comm) {
          return ncclCommInitRankConfig(comm, n, id, r, config);
        }) == 0);
}

// The same with several roots (ncclCommInitRankScalable): rank 3 stalls
// between the bootstrap's rendezvous and its exchanges, so its block's
// leader waits in the block's allgather and rank 0 in the upper group's
// gather.  Those waits run on the inner bootstraps, and ncclCommAbort must
// end them at once, not after BRAID_TIMEOUT.
TEST_CASE("an abort ends a non-blocking scalable init whose peer stalls in the bootstrap",
          "[mp][init][scalable][faults][nonblocking][threads]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv stall("BRAID_TEST_STALL_SCALABLE_RANK", "3");
  const int n = 4;
  ncclUniqueId ids[2];
  for (ncclUniqueId& id : ids) REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(abort_stalled_inits(n, 3, [&](int r, ncclConfig_t* config, ncclComm_t* comm) {
          return ncclCommInitRankScalable(comm, n, r, 2, ids, config);
        }) == 0);
}

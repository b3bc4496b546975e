// One-sided RMA (ncclPutSignal, ncclSignal, ncclWaitSignal,
// ncclWinGetUserPtr; NCCL 2.29) and memory offload (ncclCommSuspend,
// ncclCommResume, ncclCommMemStats) on the host backend: real ranks in
// threads, in processes on one host (shared memory) and in processes on
// emulated hosts (BRAID_HOSTID: sockets), exact window contents and signal
// counts, and a wait that gives up with ncclTimeout.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "collective_check.h"
#include "process_log.h"
#include "scoped_env.h"

using namespace mp;

namespace {

using Setup = std::function<void(int rank)>;

// run_ranks with a config: numRmaCtx and numRmaSig for these tests.
int run_with_config(Mode mode, int nranks, int contexts, int signals, const RankBody& body, const Setup& setup = {}) {
  InitRank init = [=](ncclComm_t* comm, int n, const ncclUniqueId& id, int r) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.numRmaCtx = contexts;
    config.numRmaSig = signals;
    return ncclCommInitRankConfig(comm, n, id, r, &config);
  };
  return mode == Mode::Threads ? run_ranks_as_threads(nranks, body, init)
                               : run_ranks_as_processes(nranks, body, 90, setup, init, mode == Mode::PidNamespaces);
}

constexpr size_t kBlock = 3000;  // floats each rank puts into each peer's window

float value(int from, int to, size_t i, int round) { return float(from * 100000 + to * 1000 + int(i % 977) + round); }

// Every rank puts a block into every rank's window (itself included), each
// signalled on a context and index that depend on the writer, then waits
// for all of them and checks every byte of its window.
void put_signal_wait(int rank, int n, ncclComm_t comm, Failures& f) {
  const size_t bytes = size_t(n) * kBlock * sizeof(float);
  void* mem = nullptr;
  MP_NCCL(f, ncclMemAlloc(&mem, bytes));
  float* window = static_cast<float*>(mem);
  std::fill(window, window + size_t(n) * kBlock, -1.0f);
  ncclWindow_t win = nullptr;
  MP_NCCL(f, ncclCommWindowRegister(comm, mem, bytes, &win, NCCL_WIN_DEFAULT));
  if (!win) return f.fail("no window");
  void* user = nullptr;
  MP_NCCL(f, ncclWinGetUserPtr(comm, win, &user));
  if (user != mem) f.fail("ncclWinGetUserPtr is not this rank's buffer");

  for (int round = 0; round < 3; ++round) {
    std::vector<float> block(kBlock);
    for (int to = 0; to < n; ++to) {
      for (size_t i = 0; i < kBlock; ++i) block[i] = value(rank, to, i, round);
      MP_NCCL(f, ncclPutSignal(block.data(), kBlock, ncclFloat, to, win, size_t(rank) * kBlock * sizeof(float),
                               /*sigIdx=*/rank % 3, /*ctx=*/rank % 2, 0, comm, nullptr));
    }
    std::vector<ncclWaitSignalDesc_t> descs;
    for (int from = 0; from < n; ++from) descs.push_back({1, from, from % 3, from % 2});
    MP_NCCL(f, ncclWaitSignal(int(descs.size()), descs.data(), comm, nullptr));
    for (int from = 0; from < n; ++from)
      for (size_t i = 0; i < kBlock; ++i)
        if (window[size_t(from) * kBlock + i] != value(from, rank, i, round))
          return f.fail(fmt::format("rank {} round {}: window[{}][{}] = {}, want {}", rank, round, from, i,
                                    window[size_t(from) * kBlock + i], value(from, rank, i, round)));
    // Nobody writes the window again before everyone has checked it.
    float token = 1, sum = 0;
    MP_NCCL(f, ncclAllReduce(&token, &sum, 1, ncclFloat, ncclSum, comm, nullptr));
  }

  // Writes from one rank land in issue order: four puts into one place,
  // one wait for all four, the last one's data is there.
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  std::vector<int32_t> word(64);
  for (int k = 1; k <= 4; ++k) {
    std::fill(word.begin(), word.end(), rank * 10 + k);
    MP_NCCL(f, ncclPutSignal(word.data(), word.size(), ncclInt32, next, win, 0, 2, 1, 0, comm, nullptr));
  }
  ncclWaitSignalDesc_t four{4, prev, 2, 1};
  MP_NCCL(f, ncclWaitSignal(1, &four, comm, nullptr));
  const int32_t* got = static_cast<const int32_t*>(mem);
  for (size_t i = 0; i < word.size(); ++i)
    if (got[i] != prev * 10 + 4) return f.fail(fmt::format("rank {}: ordered puts left {} at {}", rank, got[i], i));

  // Signals alone, and a group: its writes go out before its waits.
  MP_NCCL(f, ncclSignal(next, 0, 0, 0, comm, nullptr));
  MP_NCCL(f, ncclSignal(next, 0, 0, 0, comm, nullptr));
  ncclWaitSignalDesc_t two{2, prev, 0, 0};
  MP_NCCL(f, ncclGroupStart());
  MP_NCCL(f, ncclWaitSignal(1, &two, comm, nullptr));
  MP_NCCL(f, ncclSignal(next, 1, 1, 0, comm, nullptr));
  MP_NCCL(f, ncclGroupEnd());
  ncclWaitSignalDesc_t one{1, prev, 1, 1};
  MP_NCCL(f, ncclWaitSignal(1, &one, comm, nullptr));

  float token = 1, sum = 0;
  MP_NCCL(f, ncclAllReduce(&token, &sum, 1, ncclFloat, ncclSum, comm, nullptr));
  MP_NCCL(f, ncclCommWindowDeregister(comm, win));
  MP_NCCL(f, ncclMemFree(mem));
}

Setup emulated_hosts() {
  return [](int rank) { setenv("BRAID_HOSTID", fmt::format("rma-host-{}", rank).c_str(), 1); };
}

uint64_t stat_of(ncclComm_t comm, ncclCommMemStat_t which, Failures& f) {
  uint64_t v = ~uint64_t(0);
  MP_NCCL(f, ncclCommMemStats(comm, which, &v));
  return v;
}

// Shared-memory mappings of this process (/dev/shm segments).
int shm_mappings() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find("/dev/shm/") != std::string::npos;
  return count;
}

void exact_allreduce(ncclComm_t comm, int rank, int n, size_t count, Failures& f, const char* what) {
  std::vector<double> in(count, double(rank + 1)), out(count, 0);
  MP_NCCL(f, ncclAllReduce(in.data(), out.data(), count, ncclDouble, ncclSum, comm, nullptr));
  const double want = double(n) * (n + 1) / 2;
  for (size_t i = 0; i < count; ++i)
    if (out[i] != want) return f.fail(fmt::format("{}: rank {} out[{}] = {}, want {}", what, rank, i, out[i], want));
}

// Suspend releases the transport's and the backend's memory (MemStats and,
// in a process of its own, the mappings show it); nothing runs while
// suspended; Resume brings back exact collectives and the windows' RMA.
void suspend_resume(int rank, int n, ncclComm_t comm, Failures& f, bool count_mappings) {
  void* mem = nullptr;
  MP_NCCL(f, ncclMemAlloc(&mem, 4096));
  ncclWindow_t win = nullptr;
  MP_NCCL(f, ncclCommWindowRegister(comm, mem, 4096, &win, NCCL_WIN_DEFAULT));
  exact_allreduce(comm, rank, n, 1 << 18, f, "before suspend");
  const uint64_t releasable = stat_of(comm, ncclStatGpuMemSuspend, f);
  const uint64_t total = stat_of(comm, ncclStatGpuMemTotal, f);
  const uint64_t persist = stat_of(comm, ncclStatGpuMemPersist, f);
  if (releasable == 0) f.fail("MemStats: nothing to release after a collective");
  if (total != releasable + persist) f.fail(fmt::format("MemStats: total {} != {} + {}", total, releasable, persist));
  if (stat_of(comm, ncclStatGpuMemSuspended, f) != 0) f.fail("MemStats: suspended before ncclCommSuspend");
  const int mapped = shm_mappings();

  MP_NCCL(f, ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  if (stat_of(comm, ncclStatGpuMemSuspended, f) != 1) f.fail("MemStats: not suspended");
  if (stat_of(comm, ncclStatGpuMemSuspend, f) != 0) f.fail("MemStats: suspended, yet memory still held");
  if (stat_of(comm, ncclStatGpuMemTotal, f) != stat_of(comm, ncclStatGpuMemPersist, f))
    f.fail("MemStats: total while suspended is not what persists");
  if (count_mappings && shm_mappings() >= mapped)
    f.fail(fmt::format("suspend left {} of {} shared-memory mappings", shm_mappings(), mapped));
  double x = 1;
  if (ncclAllReduce(&x, &x, 1, ncclDouble, ncclSum, comm, nullptr) != ncclInvalidUsage)
    f.fail("a collective on a suspended communicator was not ncclInvalidUsage");
  if (ncclSignal((rank + 1) % n, 0, 0, 0, comm, nullptr) != ncclInvalidUsage)
    f.fail("a signal on a suspended communicator was not ncclInvalidUsage");

  MP_NCCL(f, ncclCommResume(comm));
  if (stat_of(comm, ncclStatGpuMemSuspended, f) != 0) f.fail("MemStats: still suspended after resume");
  exact_allreduce(comm, rank, n, 1 << 18, f, "after resume");
  if (stat_of(comm, ncclStatGpuMemSuspend, f) == 0) f.fail("MemStats: nothing held after resume and a collective");
  // The window survived: one-sided traffic works on the new connections.
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  int32_t v = 7000 + rank;
  MP_NCCL(f, ncclPutSignal(&v, 1, ncclInt32, next, win, 64, 0, 0, 0, comm, nullptr));
  ncclWaitSignalDesc_t d{1, prev, 0, 0};
  MP_NCCL(f, ncclWaitSignal(1, &d, comm, nullptr));
  if (static_cast<int32_t*>(mem)[16] != 7000 + prev) f.fail("a put after resume did not land");
  exact_allreduce(comm, rank, n, 100, f, "before deregistering");
  MP_NCCL(f, ncclCommWindowDeregister(comm, win));
  MP_NCCL(f, ncclMemFree(mem));
}

}  // namespace

TEST_CASE("put/signal/wait exact, threads", "[mp][rma][threads]") {
  CHECK(run_with_config(Mode::Threads, 3, 2, 3, put_signal_wait) == 0);
}

TEST_CASE("put/signal/wait exact, processes on one host (shared memory)", "[mp][rma]") {
  CHECK(run_with_config(Mode::Processes, 4, 2, 3, put_signal_wait) == 0);
}

// Containers that share /dev/shm but not pids: every rank is pid 2, and
// none may take a peer for a thread of its own process.
TEST_CASE("put/signal/wait exact, processes in pid namespaces of their own", "[mp][rma][pid_namespace]") {
  if (!can_make_pid_namespaces()) {
    WARN("skipped: cannot make pid namespaces here (needs root)");
    return;
  }
  CHECK(run_with_config(Mode::PidNamespaces, 3, 2, 3, put_signal_wait) == 0);
}

TEST_CASE("put/signal/wait exact, processes on emulated hosts (sockets)", "[mp][rma][hosts]") {
  CHECK(run_with_config(Mode::Processes, 3, 2, 3, put_signal_wait, emulated_hosts()) == 0);
}

// A rank that destroys its communicator while a peer's RMA receiver still
// runs (over sockets, which see the stream's end) says goodbye first: the
// peer logs no failure and its communicator stays healthy.
TEST_CASE("a peer that destroys its communicator first is no RMA failure (sockets)", "[mp][rma][hosts]") {
  auto setup = [](int rank) {
    emulated_hosts()(rank);
    log_to_own_file("INIT");  // and every warning
  };
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    put_signal_wait(rank, n, comm, f);
    if (rank == 0) return;  // destroys at once
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 has gone meanwhile
    ncclResult_t state = ncclInternalError;
    MP_NCCL(f, ncclCommGetAsyncError(comm, &state));
    if (state != ncclSuccess) f.fail(fmt::format("rank {}: async error {} after rank 0 left", rank, int(state)));
    const std::string log = own_log();
    if (log.find("RMA from rank 0") != std::string::npos) f.fail(fmt::format("rank {} warned: {}", rank, log));
  };
  CHECK(run_with_config(Mode::Processes, 3, 2, 3, body, setup) == 0);
}

// A wait for signals from a rank that then destroys its communicator fails
// at once with ncclRemoteError, not at BRAID_TIMEOUT (the goodbye comes
// after everything the rank sent, so nothing more can come).
TEST_CASE("a wait for signals from a rank that destroyed its communicator fails at once", "[mp][rma][hosts]") {
  for (bool hosts : {false, true}) {
    auto setup = [hosts](int rank) {
      if (hosts) emulated_hosts()(rank);
      setenv("BRAID_TIMEOUT", "60", 1);
    };
    auto body = [](int rank, int, ncclComm_t comm, Failures& f) {
      void* mem = nullptr;
      ncclWindow_t win = nullptr;
      MP_NCCL(f, ncclMemAlloc(&mem, 4096));
      MP_NCCL(f, ncclCommWindowRegister(comm, mem, 4096, &win, NCCL_WIN_DEFAULT));
      // Rank 1 signals rank 0 once; rank 0 waits for two, and rank 1 leaves.
      if (rank == 1) MP_NCCL(f, ncclSignal(0, 0, 0, 0, comm, nullptr));
      if (rank == 0) {
        const auto start = std::chrono::steady_clock::now();
        ncclWaitSignalDesc_t two{2, 1, 0, 0};
        const ncclResult_t r = ncclWaitSignal(1, &two, comm, nullptr);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string said = ncclGetLastError(comm);
        if (r != ncclRemoteError || said.find("1 of 2 from rank 1") == std::string::npos ||
            said.find("destroyed its communicator") == std::string::npos || seconds > 20)
          f.fail(fmt::format("the wait gave {} after {:.1f} s: {}", int(r), seconds, said));
      }
      // Rank 1 returns at once: its communicator is destroyed while rank 0 waits.
    };
    INFO((hosts ? "sockets" : "shared memory"));
    CHECK(run_with_config(Mode::Processes, 2, 1, 1, body, setup) == 0);
  }
}

TEST_CASE("one-sided calls check their arguments and give up with ncclTimeout", "[mp][rma][errors][threads]") {
  ScopedEnv quick("BRAID_TIMEOUT", "1");
  std::atomic<int> waits_done{0};
  CHECK(run_with_config(Mode::Threads, 2, 1, 2, [&waits_done](int rank, int n, ncclComm_t comm, Failures& f) {
          auto expect = [&](ncclResult_t got, ncclResult_t want, const char* what) {
            if (got != want) f.fail(fmt::format("rank {} {}: got {} want {}", rank, what, int(got), int(want)));
          };
          // Before any window: RMA is not connected yet (NCCL: rmaEagerInit 0).
          expect(ncclSignal(1 - rank, 0, 0, 0, comm, nullptr), ncclInvalidUsage, "signal before a window");
          std::vector<char> buf(4096);
          ncclWindow_t win = nullptr;
          MP_NCCL(f, ncclCommWindowRegister(comm, buf.data(), buf.size(), &win, NCCL_WIN_STRICT_ORDERING));
          int v = 1;
          expect(ncclPutSignal(&v, 1, ncclInt32, n, win, 0, 0, 0, 0, comm, nullptr), ncclInvalidArgument, "peer");
          expect(ncclPutSignal(&v, 1, ncclInt32, 0, win, 0, 2, 0, 0, comm, nullptr), ncclInvalidArgument, "sigIdx");
          expect(ncclPutSignal(&v, 1, ncclInt32, 0, win, 0, 0, 1, 0, comm, nullptr), ncclInvalidArgument, "ctx");
          expect(ncclPutSignal(&v, 1, ncclInt32, 0, win, 4093, 0, 0, 0, comm, nullptr), ncclInvalidArgument,
                 "past the window");
          expect(ncclPutSignal(&v, 1, ncclInt32, 0, win, 0, 0, 0, 1, comm, nullptr), ncclInvalidArgument, "flags");
          expect(ncclPutSignal(nullptr, 1, ncclInt32, 0, win, 0, 0, 0, 0, comm, nullptr), ncclInvalidArgument,
                 "NULL data");
          expect(ncclPutSignal(&v, 1, ncclInt32, 0, nullptr, 0, 0, 0, 0, comm, nullptr), ncclInvalidArgument,
                 "NULL window");
          expect(ncclPutSignal(&v, 1, ncclNumTypes, 0, win, 0, 0, 0, 0, comm, nullptr), ncclInvalidArgument, "type");
          expect(ncclSignal(-1, 0, 0, 0, comm, nullptr), ncclInvalidArgument, "signal peer");
          ncclWaitSignalDesc_t bad{1, 0, 0, 5};
          expect(ncclWaitSignal(1, &bad, comm, nullptr), ncclInvalidArgument, "wait ctx");
          expect(ncclWaitSignal(1, nullptr, comm, nullptr), ncclInvalidArgument, "NULL descriptors");
          expect(ncclWaitSignal(-1, &bad, comm, nullptr), ncclInvalidArgument, "negative count");
          void* p = nullptr;
          expect(ncclWinGetUserPtr(comm, nullptr, &p), ncclInvalidArgument, "NULL window pointer");
          expect(ncclWinGetUserPtr(comm, win, nullptr), ncclInvalidArgument, "NULL out pointer");
          // A signal nobody sends: the wait gives up after BRAID_TIMEOUT.
          ncclWaitSignalDesc_t never{1, 1 - rank, 1, 0};
          auto start = std::chrono::steady_clock::now();
          expect(ncclWaitSignal(1, &never, comm, nullptr), ncclTimeout, "a signal that never comes");
          if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) f.fail("the wait took too long");
          if (std::string(ncclGetLastError(comm)).find("BRAID_TIMEOUT") == std::string::npos)
            f.fail(fmt::format("the timeout's message: {}", ncclGetLastError(comm)));
          // Both waits have ended before either rank leaves: a rank that had
          // gone would fail the other's wait at once (its goodbye), not by
          // timeout.  (The communicator refuses calls after the timeout: the
          // ranks are threads, and meet on an atomic.)
          waits_done.fetch_add(1);
          while (waits_done.load() < n) std::this_thread::yield();
          ncclCommWindowDeregister(comm, win);
        }) == 0);
}

TEST_CASE("suspend frees memory, MemStats shows it, resume works, threads", "[mp][suspend][threads]") {
  CHECK(run_with_config(Mode::Threads, 3, 1, 1, [](int rank, int n, ncclComm_t comm, Failures& f) {
          suspend_resume(rank, n, comm, f, false);
        }) == 0);
}

TEST_CASE("suspend frees memory, MemStats shows it, resume works, processes", "[mp][suspend]") {
  CHECK(run_with_config(Mode::Processes, 3, 1, 1, [](int rank, int n, ncclComm_t comm, Failures& f) {
          suspend_resume(rank, n, comm, f, true);
        }) == 0);
}

TEST_CASE("suspend and resume on emulated hosts (sockets)", "[mp][suspend][hosts]") {
  CHECK(run_with_config(Mode::Processes, 3, 1, 1, [](int rank, int n, ncclComm_t comm, Failures& f) {
          suspend_resume(rank, n, comm, f, false);
        }, emulated_hosts()) == 0);
}

TEST_CASE("suspend and memstats check their arguments", "[mp][suspend][errors][threads]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          auto expect = [&](ncclResult_t got, ncclResult_t want, const char* what) {
            if (got != want) f.fail(fmt::format("rank {} {}: got {} want {}", rank, what, int(got), int(want)));
          };
          uint64_t v = 0;
          expect(ncclCommSuspend(nullptr, NCCL_SUSPEND_MEM), ncclInvalidArgument, "NULL comm");
          expect(ncclCommSuspend(comm, 0x10), ncclInvalidArgument, "unknown flag");
          expect(ncclCommResume(nullptr), ncclInvalidArgument, "resume NULL comm");
          expect(ncclCommMemStats(comm, ncclCommMemStat_t(9), &v), ncclInvalidArgument, "unknown stat");
          expect(ncclCommMemStats(comm, ncclStatGpuMemTotal, nullptr), ncclInvalidArgument, "NULL value");
          expect(ncclCommMemStats(nullptr, ncclStatGpuMemTotal, &v), ncclInvalidArgument, "MemStats NULL comm");
          expect(ncclCommResume(comm), ncclSuccess, "resume when not suspended");
          expect(ncclCommSuspend(comm, 0), ncclSuccess, "suspend without NCCL_SUSPEND_MEM releases nothing");
          if (stat_of(comm, ncclStatGpuMemSuspended, f) != 0) f.fail("flags 0 suspended the memory");
          exact_allreduce(comm, rank, n, 10, f, "after the checks");
        }) == 0);
}

// MemStats counts the pages the shared-memory rings hold, which grow with
// the fragments sent, not the rings' whole mappings (tmpfs allocates a page
// when it is first touched: shm_segment.h).
void held_grows_with_traffic(int rank, int n, ncclComm_t comm, Failures& f) {
  exact_allreduce(comm, rank, n, 1 << 17, f, "1 MB");  // connects the rings; fragments fill part of their slots
  const uint64_t some = stat_of(comm, ncclStatGpuMemSuspend, f);
  exact_allreduce(comm, rank, n, 1 << 21, f, "16 MB");  // the same rings, their slots filled
  const uint64_t more = stat_of(comm, ncclStatGpuMemSuspend, f);
  if (more < some + (256 << 10))
    f.fail(fmt::format("MemStats: {} bytes held after 1 MB, {} after 16 MB: not what the rings hold", some, more));
}

TEST_CASE("MemStats counts what the shared-memory rings hold, not what they map", "[mp][suspend]") {
  ScopedEnv cma("BRAID_CMA", "off");  // every byte through the rings (threads pass large ones by a single copy)
  CHECK(run_with_config(Mode::Processes, 4, 1, 1, held_grows_with_traffic) == 0);
}

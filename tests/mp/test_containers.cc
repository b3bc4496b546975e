// Ranks in containers on one machine.
//
// A rank with a /dev/shm of its own (docker without --ipc=host) cannot map
// the others' segments: it is another host to them (host_hash), reached by
// sockets.  Before, it took the shared-memory paths and waited for segments
// that never appeared, until BRAID_TIMEOUT.
//
// Ranks in different pid namespaces that share the host name and /dev/shm
// (docker --network=host --ipc=host) but not their pids are joined by the
// shared-memory paths, and a pid from another namespace names some other
// process here, or none: asking kill(pid, 0) about it took live ranks for
// dead, and equal pids made ranks of two containers look like threads of
// one process.  Processes are told apart by pid and pid namespace
// (same_process), and watched through the pidfds the ranks pass each other
// at init (PeerProcesses).
//
// Needs root (namespaces); says it skipped, and passes, otherwise.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

#include "collective_check.h"
#include "scoped_env.h"
#include "survivor.h"

using namespace mp;

namespace {

// Exit codes of a rank that should have succeeded.
enum : int { kNotInNamespace = 20, kCallFailed = 21, kWrongResult = 22, kInitFailed = 23 };

// Each rank in turn arrives 300 ms late, so that the others wait long
// enough to look for a dead peer: AllReduce of 1 MB (shm pipes), of 64 B
// (the one-shot board) and Broadcast of 64 B from rank 0 (the eager board).
int late_in_turn(int rank, int n, const ncclUniqueId& id, bool in_namespace) {
  if (in_namespace && getpid() != 2) return kNotInNamespace;
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return kInitFailed;
  for (int k = 0; k < 3 * n; ++k) {
    if (k % n == rank) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const bool broadcast = k >= 2 * n;
    std::vector<float> in(k < n ? 1 << 18 : 16), out(in.size(), -1.f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = float(rank + 1) * float(i % 13);
    const ncclResult_t r = broadcast
                               ? ncclBroadcast(in.data(), out.data(), in.size(), ncclFloat, 0, comm, nullptr)
                               : ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
    if (r != ncclSuccess) {
      std::fprintf(stderr, "rank %d, call %d: %s: %s\n", rank, k, ncclGetErrorString(r), ncclGetLastError(comm));
      return kCallFailed;
    }
    const float factor = broadcast ? 1.f : float(n * (n + 1) / 2);
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != factor * float(i % 13)) return kWrongResult;
  }
  return ncclCommDestroy(comm) == ncclSuccess ? 0 : kCallFailed;
}

// Reaps `pids` and returns their exit codes, in rank order.
std::vector<int> reap(const std::vector<pid_t>& pids) {
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    codes.push_back(waitpid(pid, &status, 0) == pid ? exit_code(status) : -1);
  }
  return codes;
}

}  // namespace

TEST_CASE("ranks in another pid namespace are not taken for dead (shm pipes, one-shot and eager boards)",
          "[mp][processes][pid_namespace]") {
  setenv("BRAID_TRANSPORT", "shm", 1);
  setenv("BRAID_TIMEOUT", "30", 1);  // far longer than any wait here: a failure is a wrong verdict
  const int n = 2;
  std::vector<pid_t> pids = fork_ranks(n, 90, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    if (r == 0) return late_in_turn(r, n, ids[0], false);
    return in_new_pid_namespace(60, [&] { return late_in_turn(r, n, ids[0], true); });
  });
  unsetenv("BRAID_TRANSPORT");
  unsetenv("BRAID_TIMEOUT");
  REQUIRE(int(pids.size()) == n);
  const std::vector<int> codes = reap(pids);
  if (codes[1] == kNoPidNamespace) {
    WARN("skipped: cannot make a pid namespace here (needs root)");
    return;
  }
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
}

// Its pidfd, passed at init, tells the others at once: they fail within
// seconds, not at BRAID_TIMEOUT.
TEST_CASE("a rank of another pid namespace that dies: survivors fail at once",
          "[mp][processes][pid_namespace][faults]") {
  setenv("BRAID_TRANSPORT", "shm", 1);
  setenv("BRAID_TIMEOUT", "60", 1);
  const int n = 3;
  const size_t count = 1 << 16;
  std::vector<pid_t> pids = fork_ranks(n, 90, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    if (r < n - 1) return survivor(r, n, ids[0], 3, count, Call::AllReduce);
    // The last rank, in its own namespace, takes part for 700 ms and then is killed.
    return in_new_pid_namespace(60, [&] {
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, n, ids[0], r) != ncclSuccess) return int(kInitFailed);
      std::vector<float> in(count), out(count);
      for (size_t i = 0; i < in.size(); ++i) in[i] = float(r + 1) * float(i % 13);
      const auto start = Clock::now();
      while (seconds_since(start) < 0.7)
        if (ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
          return int(kCallFailed);
      raise(SIGKILL);
      return int(kCallFailed);
    });
  });
  unsetenv("BRAID_TRANSPORT");
  unsetenv("BRAID_TIMEOUT");
  REQUIRE(int(pids.size()) == n);
  const std::vector<int> codes = reap(pids);
  if (codes[n - 1] == kNoPidNamespace) {
    WARN("skipped: cannot make a pid namespace here (needs root)");
    return;
  }
  CHECK(codes[n - 1] == 128 + SIGKILL);
  for (int r = 0; r < n - 1; ++r) {
    INFO("survivor rank " << r);
    CHECK(codes[size_t(r)] == kOk);
  }
}

// Every rank pid 2: none may take a peer for a thread of its own process
// (the host windows, the fd passing) or read it with process_vm_readv.
TEST_CASE("every collective exact with each rank in a pid namespace of its own", "[mp][processes][pid_namespace]") {
  if (!can_make_pid_namespaces()) {
    WARN("skipped: cannot make pid namespaces here (needs root)");
    return;
  }
  // A communicator in this process first, as a job's earlier ones: the
  // children then inherit what it drew (this_process()) and must not
  // take each other for one process.
  CHECK(run_ranks_as_threads(2, [](int, int, ncclComm_t comm, Failures& f) { barrier_all(comm, f); }) == 0);
  setenv("BRAID_TRANSPORT", "shm", 1);
  setenv("BRAID_CMA", "on", 1);
  CHECK(run_ranks(Mode::PidNamespaces, 3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          for (Coll c : kAllColls)
            for (size_t count : {size_t(7), size_t(1) << 16})
              run_and_check({.coll = c, .count = count, .root = 1}, rank, n, comm, f);
        }) == 0);
  unsetenv("BRAID_TRANSPORT");
  unsetenv("BRAID_CMA");
}

TEST_CASE("a rank with a /dev/shm of its own is reached by sockets: every collective exact",
          "[mp][processes][containers]") {
  if (!true_in_a_child([] { return own_dev_shm("256m"); })) {
    WARN("skipped: cannot make mount namespaces here (needs root)");
    return;
  }
  ScopedEnv quick("BRAID_TIMEOUT", "20");  // bounds the failure this guards against
  CHECK(run_ranks_as_processes(
            3,
            [](int rank, int n, ncclComm_t comm, Failures& f) {
              for (Coll c : kAllColls)
                for (size_t count : {size_t(7), size_t(1) << 16})
                  run_and_check({.coll = c, .count = count, .root = 1}, rank, n, comm, f);
            },
            120,
            [](int rank) {
              if (rank == 2 && !own_dev_shm("256m")) _exit(5);
            }) == 0);
}

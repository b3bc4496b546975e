// Multi-rank test harness: runs a body on n ranks as threads of this process
// or as forked processes, over braid's public C API only.
//
// Process mode forks after the unique id exists (the root listener lives in
// the parent); each child has a hard alarm so a hang fails the test instead
// of hanging CI, and reports failure through its exit status.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace mp {

// Checks inside rank bodies: print and count, never throw across threads.
struct Failures {
  int count = 0;
  void fail(const std::string& what) {
    if (count++ < 10) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
};

#define MP_NCCL(failures, call)                                                                       \
  do {                                                                                                \
    ncclResult_t mp_r_ = (call);                                                                      \
    if (mp_r_ != ncclSuccess)                                                                         \
      (failures).fail(std::string(#call) + " -> " + ncclGetErrorString(mp_r_) + ": " + ncclGetLastError(nullptr)); \
  } while (0)

using RankBody = std::function<void(int rank, int nranks, ncclComm_t comm, Failures& failures)>;

// Each rank creates its communicator, runs body, destroys the communicator.
inline int run_ranks_as_threads(int nranks, const RankBody& body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  std::vector<Failures> failures(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      MP_NCCL(failures[r], ncclCommInitRank(&comm, nranks, id, r));
      if (!comm) return;
      body(r, nranks, comm, failures[r]);
      MP_NCCL(failures[r], ncclCommDestroy(comm));
    });
  for (auto& t : threads) t.join();
  int total = 0;
  for (auto& f : failures) total += f.count;
  return total;
}

// setup(rank) runs in the child before init (e.g. setenv for that rank).
inline int run_ranks_as_processes(int nranks, const RankBody& body, unsigned timeout_s = 60,
                                  const std::function<void(int)>& setup = {}) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(timeout_s);
      if (setup) setup(r);
      Failures failures;
      ncclComm_t comm = nullptr;
      MP_NCCL(failures, ncclCommInitRank(&comm, nranks, id, r));
      if (comm) {
        body(r, nranks, comm, failures);
        MP_NCCL(failures, ncclCommDestroy(comm));
      }
      std::fflush(nullptr);
      _exit(failures.count ? 1 : 0);
    }
    pids.push_back(pid);
  }
  int bad = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "rank process %d %s %d\n", int(pid), WIFSIGNALED(status) ? "killed by signal" : "exited",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      ++bad;
    }
  }
  return bad;
}

enum class Mode { Threads, Processes };
inline const char* mode_name(Mode m) { return m == Mode::Threads ? "threads" : "processes"; }
inline int run_ranks(Mode mode, int nranks, const RankBody& body) {
  return mode == Mode::Threads ? run_ranks_as_threads(nranks, body) : run_ranks_as_processes(nranks, body);
}

}  // namespace mp

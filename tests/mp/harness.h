// Multi-rank test harness: runs a body on n ranks as threads of this process
// or as forked processes, over braid's public C API only.
//
// Process mode forks after the unique id exists (the root listener lives in
// the parent); each child has a hard alarm so a hang fails the test instead
// of hanging CI, and reports failure through its exit status.
#pragma once

#include <netinet/in.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
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

// A socket address of either family, as braid's ids and hellos hold it (28 bytes).
union AnyAddress {
  sockaddr_in6 v6;
  sockaddr_in v4;
  sockaddr sa;
  socklen_t length() const { return sa.sa_family == AF_INET6 ? sizeof(v6) : sizeof(v4); }
};

// The bootstrap root's address as ncclGetUniqueId encoded it (bytes 16..43 of the id).
inline AnyAddress root_address(const ncclUniqueId& id) {
  AnyAddress addr{};
  std::memcpy(&addr, id.internal + 16, sizeof(addr));
  return addr;
}

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

// Every rank has reached this point: a blocking AllReduce (host backend,
// NULL stream), for tests whose ranks touch each other's memory directly.
inline void barrier_all(ncclComm_t comm, Failures& f) {
  float x = 1, sum = 0;
  MP_NCCL(f, ncclAllReduce(&x, &sum, 1, ncclFloat, ncclSum, comm, nullptr));
}

using RankBody = std::function<void(int rank, int nranks, ncclComm_t comm, Failures& failures)>;
// How a rank makes its communicator (default: ncclCommInitRank), e.g. with a config.
using InitRank = std::function<ncclResult_t(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank)>;
inline ncclResult_t init_rank(const InitRank& init, ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
  return init ? init(comm, nranks, id, rank) : ncclCommInitRank(comm, nranks, id, rank);
}

// Each rank creates its communicator, runs body, destroys the communicator.
inline int run_ranks_as_threads(int nranks, const RankBody& body, const InitRank& init = {}) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  std::vector<Failures> failures(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      MP_NCCL(failures[r], init_rank(init, &comm, nranks, id, r));
      if (!comm) return;
      body(r, nranks, comm, failures[r]);
      MP_NCCL(failures[r], ncclCommDestroy(comm));
    });
  for (auto& t : threads) t.join();
  int total = 0;
  for (auto& f : failures) total += f.count;
  return total;
}

// Forks one child per rank first, and only then makes `nids` unique ids and
// hands them to every child through a pipe.  The order matters: the first
// ncclGetUniqueId starts the bootstrap root's thread, and a fork while some
// thread holds a lock leaves the child with that lock held forever.  glibc's
// malloc guards against that with fork handlers; ASan's allocator (GCC 12)
// does not, and forked ranks deadlocked in their first allocation.  (The
// root's start-up is over when ncclGetUniqueId returns, test_fork.cc, but
// the thread allocates again as ranks join.)
// child(rank, ids) runs in the child (after a hard alarm); its return value
// is the child's exit status.  Returns the children's pids.
inline std::vector<pid_t> fork_ranks(int nranks, unsigned timeout_s, int nids,
                                     const std::function<int(int, const std::vector<ncclUniqueId>&)>& child) {
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  std::vector<int> writers;
  for (int r = 0; r < nranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) break;
    pid_t pid = fork();
    if (pid == 0) {
      alarm(timeout_s);
      for (int w : writers) close(w);  // earlier ranks' pipes
      close(fds[1]);
      std::vector<ncclUniqueId> ids(nids);
      size_t want = ids.size() * sizeof(ncclUniqueId), got = 0;
      while (got < want) {
        ssize_t k = read(fds[0], reinterpret_cast<char*>(ids.data()) + got, want - got);
        if (k <= 0) _exit(3);  // the parent could not make the ids
        got += size_t(k);
      }
      close(fds[0]);
      int code = child(r, ids);
      std::fflush(nullptr);
      _exit(code);
    }
    close(fds[0]);
    writers.push_back(fds[1]);
    pids.push_back(pid);
  }
  std::vector<ncclUniqueId> ids(nids);
  bool ok = true;
  for (auto& id : ids) ok = ok && ncclGetUniqueId(&id) == ncclSuccess;
  for (int w : writers) {
    if (ok) (void)!write(w, ids.data(), ids.size() * sizeof(ncclUniqueId));
    close(w);
  }
  return pids;
}

inline int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Runs `rank` in a new pid namespace, as a container's processes run, and
// returns its exit code, or kNoPidNamespace where none can be made (not
// root).  The namespace's first process (pid 1, its init) only waits for
// `rank`, which runs as pid 2: an init ignores the signals it has no
// handler for, its alarm and its own SIGKILL included.
constexpr int kNoPidNamespace = 77;
inline int in_new_pid_namespace(unsigned timeout_s, const std::function<int()>& rank) {
  if (unshare(CLONE_NEWPID) != 0) return kNoPidNamespace;
  const pid_t init = fork();
  if (init < 0) return kNoPidNamespace;
  if (init == 0) {
    const pid_t child = fork();
    if (child == 0) {
      alarm(timeout_s);
      const int code = rank();
      std::fflush(nullptr);
      _exit(code);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child) _exit(kNoPidNamespace);
    _exit(exit_code(status));
  }
  int status = 0;
  if (waitpid(init, &status, 0) != init) return kNoPidNamespace;
  return exit_code(status);
}

// Whether `can` returns true in a forked child: for what changes the
// process that asks (entering namespaces), so that this one stays as it is.
inline bool true_in_a_child(const std::function<bool()>& can) {
  const pid_t child = fork();
  if (child == 0) _exit(can() ? 0 : 1);
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && exit_code(status) == 0;
}

// Gives this process a /dev/shm of its own, `size` large ("64m", as
// docker's default): a mount namespace (its mounts private, so nothing
// reaches the machine's) with a fresh tmpfs there.  Needs root.
inline bool own_dev_shm(const char* size) {
  const std::string options = std::string("size=") + size;
  return unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         mount("tmpfs", "/dev/shm", "tmpfs", 0, options.c_str()) == 0;
}

// Whether this process may make pid namespaces.
inline bool can_make_pid_namespaces() {
  return true_in_a_child([] { return unshare(CLONE_NEWPID) == 0; });
}

// setup(rank) runs in the child before init (e.g. setenv for that rank).
// With own_pid_namespace, each rank runs in a pid namespace of its own, so
// that all of them are pid 2 (see in_new_pid_namespace).
inline int run_ranks_as_processes(int nranks, const RankBody& body, unsigned timeout_s = 60,
                                  const std::function<void(int)>& setup = {}, const InitRank& init = {},
                                  bool own_pid_namespace = false) {
  std::vector<pid_t> pids = fork_ranks(nranks, timeout_s, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    auto rank = [&] {
      if (setup) setup(r);
      Failures failures;
      ncclComm_t comm = nullptr;
      MP_NCCL(failures, init_rank(init, &comm, nranks, ids[0], r));
      if (comm) {
        body(r, nranks, comm, failures);
        MP_NCCL(failures, ncclCommDestroy(comm));
      }
      return failures.count ? 1 : 0;
    };
    return own_pid_namespace ? in_new_pid_namespace(timeout_s, rank) : rank();
  });
  int bad = int(nranks - pids.size());
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

// Reaps forked ranks (fork_ranks) where rank `killed` must have died of
// SIGKILL and every other must have exited 0: how many did not.
inline int reap_with_one_killed(const std::vector<pid_t>& pids, int killed) {
  int bad = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    const bool ok = int(r) == killed ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                                     : WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
      std::fprintf(stderr, "rank %zu: status %#x\n", r, unsigned(status));
      ++bad;
    }
  }
  return bad;
}

// Every rank's init must fail with one of `codes` and a message holding `says`.
inline int init_must_fail(int nranks, const std::function<void(int)>& setup, std::vector<ncclResult_t> codes,
                          std::string says) {
  std::vector<pid_t> pids = fork_ranks(nranks, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    setup(r);
    setenv("BRAID_TIMEOUT", "20", 1);
    ncclComm_t comm = nullptr;
    ncclResult_t got = ncclCommInitRank(&comm, nranks, ids[0], r);
    std::string why = ncclGetLastError(nullptr);
    if (std::find(codes.begin(), codes.end(), got) == codes.end() || why.find(says) == std::string::npos) {
      std::fprintf(stderr, "rank %d: init gave %d (%s), expected %d and '%s'\n", r, int(got), why.c_str(),
                   int(codes.front()), says.c_str());
      return 1;
    }
    return 0;
  });
  int bad = nranks - int(pids.size());
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return bad;
}
inline int init_must_fail(int nranks, const std::function<void(int)>& setup, ncclResult_t code, std::string says) {
  return init_must_fail(nranks, setup, std::vector<ncclResult_t>{code}, std::move(says));
}

// How ranks run: threads of this process, forked processes, or forked
// processes each in a pid namespace of its own (as in containers: all pid 2).
enum class Mode { Threads, Processes, PidNamespaces };
inline const char* mode_name(Mode m) {
  return m == Mode::Threads ? "threads" : m == Mode::Processes ? "processes" : "processes in pid namespaces";
}
inline int run_ranks(Mode mode, int nranks, const RankBody& body) {
  return mode == Mode::Threads ? run_ranks_as_threads(nranks, body)
                               : run_ranks_as_processes(nranks, body, 60, {}, {}, mode == Mode::PidNamespaces);
}

}  // namespace mp

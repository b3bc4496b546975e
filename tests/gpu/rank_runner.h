// What the device API GPU tests share: a CHECK_OR_FAIL for a rank's body,
// and main()'s work of running that body as N ranks, threads of this
// process or forked processes (before this process touches CUDA), on the
// GPUs there are (the body picks rank % devices).
//
//   binary NRANKS threads|processes
//
// Prints PASS or FAIL with `what`; the exit status main() returns.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "nccl.h"

// What a failed call said: CUDA's error string, or braid's last error.
inline const char* failure_text(cudaError_t r) { return cudaGetErrorString(r); }
inline const char* failure_text(ncclResult_t) { return ncclGetLastError(nullptr); }
inline const char* failure_text(int) { return "(what failed is said above)"; }

// Inside int rank_main(int rank, ...): returns 1 when `call` is not 0.
#define CHECK_OR_FAIL(call)                                                                           \
  do {                                                                                                \
    auto r_ = (call);                                                                                 \
    if (r_ != 0) {                                                                                    \
      std::fprintf(stderr, "rank %d: %s failed (%d): %s\n", rank, #call, int(r_), failure_text(r_)); \
      return 1;                                                                                       \
    }                                                                                                 \
  } while (0)

// A rank's start: its device (rank % the devices there are), then its
// communicator.  0, or 1 after saying what failed.
inline int init_rank_on_device(int rank, int n, const ncclUniqueId& id, ncclComm_t* comm) {
  int devices = 0;
  CHECK_OR_FAIL(cudaGetDeviceCount(&devices));
  CHECK_OR_FAIL(cudaSetDevice(rank % devices));
  // Stream-ordered frees keep their memory: trimming the pool at a
  // synchronize could wait for a peer rank's kernel (threads share the
  // GPU's context).  And a cudaMallocAsync never reuses a block freed on
  // another stream by making its stream wait for that free (the default
  // pool's cudaMemPoolReuseAllowInternalDependencies): thread ranks share
  // the device's default pool, so that wait could be for a peer's stream,
  // behind the peer's kernel that waits for this rank's next launch.
  // Reuse the driver can see is safe (the free already done, or ordered
  // by events) stays on.
  cudaMemPool_t pool;
  uint64_t keep = UINT64_MAX;
  int no = 0;
  CHECK_OR_FAIL(cudaDeviceGetDefaultMemPool(&pool, rank % devices));
  CHECK_OR_FAIL(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  CHECK_OR_FAIL(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no));
  CHECK_OR_FAIL(ncclCommInitRank(comm, n, id, rank));
  return 0;
}

// Ranks that are threads share one CUDA context, where an allocation or a
// free that waits for the device waits for a peer's kernel, which may wait
// for this rank's next one.  Thread ranks meet here after such calls and
// before the kernels that wait for peers; processes have contexts of their
// own and go on.
// Bounded (false after 60 s: a rank that failed never comes); every thread
// rank calls it equally often.
struct ThreadRanks {
  int n = 0;  // 0: ranks are processes
  std::atomic<int> arrived{0};
};
inline ThreadRanks& thread_ranks() {
  static ThreadRanks ranks;
  return ranks;
}
inline bool thread_ranks_meet() {
  ThreadRanks& t = thread_ranks();
  if (t.n == 0) return true;
  thread_local int round = 0;
  ++round;
  t.arrived.fetch_add(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (t.arrived.load() < round * t.n)
    if (std::chrono::steady_clock::now() > until) return false;
    else std::this_thread::yield();
  return true;
}

// Before CUDA starts: thread ranks' streams must not share hardware queues
// (8 by default: a rank's kernel queued behind a peer's waiting one is a
// deadlock), and the tests' kernels load at start (a lazy load at a first
// launch may wait for the device, where a peer's kernel spins).
inline void prepare_thread_ranks() {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

inline int run_gpu_ranks(int argc, char** argv, int (*rank_main)(int rank, int n, ncclUniqueId id), const char* what) {
  prepare_thread_ranks();
  const int n = argc > 1 ? std::atoi(argv[1]) : 2;
  const bool processes = argc > 2 && std::string(argv[2]) == "processes";
  ncclUniqueId id;
  if (n < 1 || ncclGetUniqueId(&id) != ncclSuccess) return 2;
  int failed = 0;
  if (processes) {
    std::vector<pid_t> children;
    for (int r = 0; r < n; ++r) {
      const pid_t pid = fork();
      if (pid == 0) _exit(rank_main(r, n, id));
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  } else {
    std::vector<int> results(n, 1);
    thread_ranks().n = n;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { results[r] = rank_main(r, n, id); });
    for (auto& t : threads) t.join();
    for (int r : results) failed += r != 0;
  }
  std::printf("%s: %s, %d ranks as %s, %d failed\n", failed ? "FAIL" : "PASS", what, n,
              processes ? "processes" : "threads", failed);
  return failed ? 1 : 0;
}

// braid's kernels stop waiting for peers long before BRAID_TIMEOUT (40 s
// here) when waiting can no longer help (src/exec/cuda_kernel_errors.h):
//
//   braid_gpu_kernel_stops exit NRANKS                       (processes)
//   braid_gpu_kernel_stops revoke NRANKS threads|processes
//
// exit: after one checked AllReduce, the last rank kills itself (SIGKILL)
// while the others' next AllReduce (64 MB) waits for it.  The survivors
// whose waits are for it (some must be) stop: their ncclCommGetAsyncError
// turns to ncclRemoteError within 10 s.  The others wait for survivors, not
// for the dead rank, and go on waiting (as they would for a slow peer)
// until ncclCommAbort, which each survivor calls after 10 s at most: then
// every stream must drain within 10 s of it.
// revoke: the last rank never joins the next AllReduce; the others revoke
// the communicator while their kernels wait for it.  ncclCommGetAsyncError
// must settle to ncclSuccess (a revoke is no error) with the stream idle by
// then, within 10 s; a later call must be refused, and ncclCommDestroy
// succeed.  The last rank revokes and destroys after the others are done,
// so no kernel writes to its memory once it is freed.
//
// main must not touch CUDA before forking the ranks (run_if_gpu.sh skips the
// test without a device).
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "rank_runner.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kCount = 16 << 20;  // floats: 64 MB
constexpr auto kBound = std::chrono::seconds(10);

bool revoke_mode = false;
// Shared with forked ranks: survivors done with their revoke, and in exit
// mode those whose kernels stopped for the dead rank by themselves.
struct Shared {
  std::atomic<int> revoked{0}, stopped_by_exit{0};
};
Shared* shared = nullptr;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Polls ncclCommGetAsyncError until it is neither ncclSuccess nor
// ncclInProgress (want_settled: until it is ncclSuccess, a revoke having
// settled), or the bound passes; the last answer.
ncclResult_t poll_async(ncclComm_t comm, bool want_settled) {
  const auto until = Clock::now() + kBound;
  ncclResult_t state = ncclSuccess;
  do {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (want_settled ? state == ncclSuccess : (state != ncclSuccess && state != ncclInProgress)) return state;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (Clock::now() < until);
  return state;
}

int rank_main(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = nullptr;
  CHECK_OR_FAIL(init_rank_on_device(rank, n, id, &comm));
  cudaStream_t stream;
  CHECK_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float *send = nullptr, *recv = nullptr;
  CHECK_OR_FAIL(cudaMalloc(&send, kCount * sizeof(float)));
  CHECK_OR_FAIL(cudaMalloc(&recv, kCount * sizeof(float)));
  std::vector<float> host(kCount, float(rank + 1));
  CHECK_OR_FAIL(cudaMemcpy(send, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
  // Thread ranks: every one done allocating (cudaMalloc and cudaMemcpy may
  // wait for the device) before any launches a kernel that waits for them.
  if (!thread_ranks_meet()) return 1;
  // A checked call first: the communicator works before anything stops it.
  CHECK_OR_FAIL(ncclAllReduce(send, recv, kCount, ncclFloat, ncclSum, comm, stream));
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  CHECK_OR_FAIL(cudaMemcpy(host.data(), recv, kCount * sizeof(float), cudaMemcpyDeviceToHost));
  const float want = float(n * (n + 1) / 2);
  for (size_t i = 0; i < kCount; i += 4099)
    if (host[i] != want) {
      std::fprintf(stderr, "rank %d: element %zu is %g, wanted %g\n", rank, i, host[i], want);
      return 1;
    }

  const bool last = rank == n - 1;
  if (last && !revoke_mode) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the others' kernels wait by now
    ::kill(::getpid(), SIGKILL);
  }
  if (last) {  // revoke: stays out of the call until the others are done (or failed)
    const auto until = Clock::now() + 6 * kBound;
    while (shared->revoked.load() < n - 1 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK_OR_FAIL(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
    CHECK_OR_FAIL(poll_async(comm, true));
    CHECK_OR_FAIL(ncclCommDestroy(comm));
    return 0;
  }

  CHECK_OR_FAIL(ncclAllReduce(send, recv, kCount, ncclFloat, ncclSum, comm, stream));
  int failed = 0;
  if (revoke_mode) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the kernel waits for the last rank
    const auto t0 = Clock::now();
    CHECK_OR_FAIL(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
    const ncclResult_t settled = poll_async(comm, true);
    const cudaError_t idle = cudaStreamQuery(stream);  // settled means the kernels have ended
    CHECK_OR_FAIL(cudaStreamSynchronize(stream));
    const double took = seconds_since(t0);
    const ncclResult_t refused = ncclAllReduce(send, recv, 1, ncclFloat, ncclSum, comm, stream);
    std::printf("rank %d: revoke settled (%s, stream %s) and the stream drained in %.3f s; a later call: %s\n", rank,
                ncclGetErrorString(settled), cudaGetErrorString(idle), took, ncclGetErrorString(refused));
    failed = settled != ncclSuccess || idle != cudaSuccess || took > 10.0 || refused != ncclInvalidUsage;
    shared->revoked.fetch_add(1);
    if (!failed) CHECK_OR_FAIL(ncclCommDestroy(comm));
  } else {
    const auto t0 = Clock::now();
    const ncclResult_t seen = poll_async(comm, false);
    const double noticed = seconds_since(t0);
    if (seen == ncclRemoteError) shared->stopped_by_exit.fetch_add(1);
    if (seen != ncclRemoteError) {  // waiting for a survivor: the abort releases it
      std::thread abort([comm] { ncclCommAbort(comm); });
      const auto t1 = Clock::now();
      const cudaError_t drained = cudaStreamSynchronize(stream);
      abort.join();
      std::printf("rank %d: still waiting after %.3f s (%s); after ncclCommAbort the stream drained (%s) in %.3f s\n",
                  rank, noticed, ncclGetErrorString(seen), cudaGetErrorString(drained), seconds_since(t1));
      failed = drained != cudaSuccess || seconds_since(t1) > 10.0;
    } else {
      const cudaError_t drained = cudaStreamSynchronize(stream);
      std::printf("rank %d: the last rank's exit gave %s after %.3f s; the stream drained (%s) after %.3f s\n", rank,
                  ncclGetErrorString(seen), noticed, cudaGetErrorString(drained), seconds_since(t0));
      failed = drained != cudaSuccess || seconds_since(t0) > 10.0;
      ncclCommAbort(comm);
    }
  }
  cudaFree(send);
  cudaFree(recv);
  cudaStreamDestroy(stream);
  return failed;
}

// exit: every rank a process; the last must die of its SIGKILL, the others
// pass.
int run_exit(int n, const ncclUniqueId& id) {
  std::vector<pid_t> children;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(rank_main(r, n, id));
    children.push_back(pid);
  }
  int failed = 0;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    waitpid(children[r], &status, 0);
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const bool passed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    failed += r == n - 1 ? !killed : !passed;
  }
  const int stopped = shared->stopped_by_exit.load();
  if (stopped == 0) {
    std::printf("no survivor's kernel stopped for the dead rank by itself\n");
    ++failed;
  }
  std::printf("%s: a dead peer stops the kernels waiting for it (%d of %d survivors), %d ranks as processes, %d "
              "failed\n",
              failed ? "FAIL" : "PASS", stopped, n - 1, n, failed);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc < 3 || (mode != "exit" && mode != "revoke")) {
    std::fprintf(stderr, "usage: %s exit NRANKS | revoke NRANKS threads|processes\n", argv[0]);
    return 2;
  }
  setenv("BRAID_TIMEOUT", "40", 1);  // far above the 10 s bound: the stop must not be a timeout
  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return 2;
  shared = new (memory) Shared;
  revoke_mode = mode == "revoke";
  const int n = std::atoi(argv[2]);
  if (n < 2) return 2;
  if (revoke_mode)
    return run_gpu_ranks(argc - 1, argv + 1, rank_main, "ncclCommRevoke stops braid's waiting kernels");
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  return run_exit(n, id);
}

// BRAID_STRAGGLER=auto on the CUDA backend (src/exec/cuda/cuda_straggler.h):
// a rank whose *device* is late is found from its kernels' stamps, where no
// host-side view could see it.
//
//   braid_gpu_straggler_auto NRANKS threads|processes      (on device 0)
//
// The last rank's stream runs a 5 ms kernel before each of its AllReduces
// (8 MB each, tracked); its host calls on time, like everyone's, and no host
// waits between calls.  Every rank must switch to StragglAR with the last
// rank as straggler (read back from braid's TUNING log, which main turns
// on), and every result must be exact.  (ctest runs it through
// run_if_gpu.sh, which skips it without a CUDA device: main must not touch
// CUDA before forking the ranks.)
#include <cuda_runtime.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nccl.h"
#include "rank_runner.h"

namespace {

constexpr int kCalls = 24;
constexpr size_t kCount = 2 << 20;  // floats: 8 MB, far above the tracked minimum
constexpr unsigned long long kLateNs = 5'000'000;
std::string log_dir;  // BRAID_DEBUG_FILE's folder: one log per process

__global__ void spin_for(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < ns);
}

// Small integers: every sum is exact in float whatever the order.
float input(int r, int k, size_t i) { return float((r + 1) * (k % 3 + 1) + int(i % 5)); }

int rank_main(int rank, int n, ncclUniqueId id) {
  CHECK_OR_FAIL(cudaSetDevice(0));
  ncclComm_t comm = nullptr;
  CHECK_OR_FAIL(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t stream;
  CHECK_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<float*> send(kCalls), recv(kCalls);
  std::vector<float> host(kCount);
  for (int k = 0; k < kCalls; ++k) {
    for (size_t i = 0; i < kCount; ++i) host[i] = input(rank, k, i);
    CHECK_OR_FAIL(cudaMalloc(&send[k], kCount * sizeof(float)));
    CHECK_OR_FAIL(cudaMalloc(&recv[k], kCount * sizeof(float)));
    CHECK_OR_FAIL(cudaMemcpy(send[k], host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
  }
  // Thread ranks: every one done allocating (cudaMalloc and cudaMemcpy may
  // wait for the device) before any launches a kernel that waits for them.
  if (!thread_ranks_meet()) return 1;
  for (int k = 0; k < kCalls; ++k) {
    if (rank == n - 1) spin_for<<<1, 1, 0, stream>>>(kLateNs);
    CHECK_OR_FAIL(ncclAllReduce(send[k], recv[k], kCount, ncclFloat, ncclSum, comm, stream));
  }
  // One more call as a barrier (it writes call 0's first sum again): once it
  // completes here, every rank's earlier kernels have, so none still reads
  // this rank's buffers.
  CHECK_OR_FAIL(ncclAllReduce(send[0], recv[0], 1, ncclFloat, ncclSum, comm, stream));
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async));
  CHECK_OR_FAIL(async);
  int wrong = 0;
  for (int k = 0; k < kCalls; ++k) {
    CHECK_OR_FAIL(cudaMemcpy(host.data(), recv[k], kCount * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += input(r, k, i);
      if (host[i] != want && wrong++ == 0)
        std::fprintf(stderr, "rank %d: call %d element %zu is %g, wanted %g\n", rank, k, i, host[i], want);
    }
  }
  // Every call is planned by now, so the switch is in this process's log.
  std::ifstream in(log_dir + "/" + std::to_string(::getpid()) + ".log");
  std::stringstream text;
  text << in.rdbuf();
  const std::string said = "rank " + std::to_string(rank) + ": StragglAR on (straggler " + std::to_string(n - 1) + ")";
  const bool switched = text.str().find(said) != std::string::npos;
  if (!switched) std::fprintf(stderr, "rank %d: its log never says '%s'\n", rank, said.c_str());
  CHECK_OR_FAIL(ncclCommDestroy(comm));
  for (int k = 0; k < kCalls; ++k) {
    cudaFree(send[k]);
    cudaFree(recv[k]);
  }
  cudaStreamDestroy(stream);
  return wrong == 0 && switched ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  char dir[] = "/tmp/braid-straggler-auto-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  log_dir = dir;
  setenv("BRAID_STRAGGLER", "auto", 1);
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_SUBSYS", "TUNING", 1);
  setenv("BRAID_DEBUG_FILE", (log_dir + "/%p.log").c_str(), 1);
  const int result = run_gpu_ranks(argc, argv, rank_main, "BRAID_STRAGGLER=auto finds a device that is late");
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') std::remove((log_dir + "/" + e->d_name).c_str());
    closedir(d);
  }
  rmdir(dir);
  return result;
}

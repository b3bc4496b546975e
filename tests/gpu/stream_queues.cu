// Which streams share a hardware queue: a probe of the CUDA driver, not of
// braid.  braid's thread ranks wait for each other inside kernels, so a
// kernel queued behind a peer's waiting kernel (its stream mapped onto the
// same of the CUDA_DEVICE_MAX_CONNECTIONS queues) hangs until the timeout.
// Whether the driver hands out queues in turn by creation (so that streams
// made and destroyed meanwhile move the turn on) or by the streams alive
// decides how braid must make its own streams (see the README of
// perf/results/cuda_h200/20261204), and no document says which.
//
//   braid_gpu_stream_queues
//
// For each case: stream A runs a kernel that spins until a flag in mapped
// host memory is set (or 2 s pass); then `made` other streams are created
// (and destroyed at once, or kept), then stream B, whose kernel sets the
// flag.  If B shares A's queue, B's kernel starts only after A's gave up:
// "shared".  Prints one line per case and exits 0; it checks nothing.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

__global__ void wait_for_flag(volatile int* flag, int* gave_up, unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*flag) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  *gave_up = 1;
}

__global__ void set_flag(volatile int* flag) { *flag = 1; }

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                 \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// Whether B's kernel had to wait for A's to give up.
bool shared(int made, bool keep, int* flag, int* gave_up) {
  *flag = 0;
  *gave_up = 0;
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  int* dflag = nullptr;
  int* dgave = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dgave), gave_up, 0));
  wait_for_flag<<<1, 1, 0, a>>>(dflag, dgave, 2'000'000'000ull);
  std::vector<cudaStream_t> kept;
  for (int i = 0; i < made; ++i) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (keep) kept.push_back(s);
    else CHECK(cudaStreamDestroy(s));
  }
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  set_flag<<<1, 1, 0, b>>>(dflag);
  CHECK(cudaStreamSynchronize(b));
  CHECK(cudaStreamSynchronize(a));
  for (cudaStream_t s : kept) CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  return *gave_up != 0;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device\n");
    return 77;
  }
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const int n = connections ? std::atoi(connections) : 8;
  int *flag = nullptr, *gave_up = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&gave_up), sizeof(int), cudaHostAllocMapped));
  // Both kernels loaded before any waits (a lazy load could wait for the device).
  cudaFuncAttributes attributes;
  CHECK(cudaFuncGetAttributes(&attributes, wait_for_flag));
  CHECK(cudaFuncGetAttributes(&attributes, set_flag));
  std::printf("CUDA_DEVICE_MAX_CONNECTIONS=%s (queues assumed: %d)\n", connections ? connections : "unset", n);
  for (bool keep : {false, true})
    for (int made : {0, 1, n - 2, n - 1, n, 2 * n - 1}) {
      const bool s = shared(made, keep, flag, gave_up);
      std::printf("streams made between A and B: %3d (%s): %s\n", made, keep ? "kept alive" : "destroyed at once",
                  s ? "shared a queue (B waited for A)" : "separate queues");
    }
  return 0;
}

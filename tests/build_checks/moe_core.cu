// The MoE protocol core (include/braid/moe/) compiles for a CUDA device as
// written: a device memory model (system-scope fences and atomics, the
// %globaltimer clock) and one kernel that plans, puts, arrives, commits and
// waits with it.  Compiled (not run) by ctest moe_core_nvcc where nvcc exists.
#include "braid/moe/layout.h"
#include "braid/moe/plan.h"
#include "braid/moe/protocol.h"
#include "braid/moe/signal.h"

using namespace braid::moe;

struct DeviceMemory {
  __device__ void put(int, void* remote, const void* local, size_t bytes) {
    for (size_t i = threadIdx.x; i < bytes; i += blockDim.x)
      static_cast<char*>(remote)[i] = static_cast<const char*>(local)[i];
  }
  __device__ void fence() { __threadfence_system(); }
  __device__ void signal_words(int, uint64_t* remote, const uint64_t* words, int32_t n) {
    __threadfence_system();
    for (int32_t i = 0; i < n; ++i)
      atomicExch(reinterpret_cast<unsigned long long*>(remote + i), (unsigned long long)words[i]);
  }
  __device__ uint64_t load(const uint64_t* word) {
    return *reinterpret_cast<const volatile unsigned long long*>(word);
  }
  __device__ uint32_t arrive(uint32_t* counter) { return atomicAdd(counter, 1u); }
  __device__ void pause() { __nanosleep(100); }
};

__device__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void moe_protocol_kernel(Shape s, const int32_t* topk, int32_t tokens, int32_t* wanted, int32_t* slots,
                                    char* peer_data, uint64_t* peer_signals, uint32_t* arrivals, const char* rows,
                                    uint64_t* my_signals, int32_t* counts_out, int64_t* first) {
  DeviceMemory mm;
  if (blockIdx.x == 0 && threadIdx.x == 0) plan_routes(s, topk, tokens, wanted, slots);
  __syncthreads();
  put_row(mm, 1, peer_data, s, 0, 0, 0, rows);
  if (threadIdx.x == 0 && arrive(mm, arrivals, 1, gridDim.x)) commit(mm, 1, peer_signals, s, 0, wanted, 1);
  const uint64_t deadline = globaltimer() + 1000000000ull;
  auto expired = [&] { return globaltimer() > deadline; };
  uint32_t count = 0;
  if (threadIdx.x == 0 && wait(mm, my_signals, s, 0, 0, 1, &count, expired) == WaitResult::Ok)
    counts_out[0] = int32_t(count);
  if (blockIdx.x == 0 && threadIdx.x == 0) output_offsets(s, OutputLayout::ExpertMajor, counts_out, first);
}

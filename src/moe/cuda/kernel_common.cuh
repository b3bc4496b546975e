// What braid's MoE and AlltoAllv kernels share: system-scope acquire loads
// and release stores, the first error's report (and the stop word that
// makes every other wait give up), and the end of a call, where the last
// CTA to finish advances the call number the next launch (or graph
// replay) reads.
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "src/moe/cuda/device_moe.h"

namespace braid::moe::cuda {

template <class T>
__device__ __forceinline__ T load_acquire(const T& v) {
  return ::cuda::atomic_ref<T, ::cuda::thread_scope_system>(const_cast<T&>(v)).load(::cuda::memory_order_acquire);
}
template <class T>
__device__ __forceinline__ void store_release(T& v, T x) {
  ::cuda::atomic_ref<T, ::cuda::thread_scope_system>(v).store(x, ::cuda::memory_order_release);
}

// The first error of the handle, for the host; then every wait stops.
// Whoever raises the stop word (device memory) first fills the record: no
// atomic on the mapped host memory, which PCIe may not carry.
__device__ inline void report(DeviceMoeError* error, int32_t* stop, DeviceErrorCode code, bool combine, int32_t peer,
                              int32_t le, int64_t value, uint32_t epoch) {
  if (::cuda::atomic_ref<int32_t, ::cuda::thread_scope_system>(*stop).exchange(1, ::cuda::memory_order_acq_rel) != 0)
    return;
  error->combine = combine;
  error->peer = peer;
  error->local_expert = le;
  error->value = value;
  error->epoch = epoch;
  store_release(error->code, int32_t(code));
}

// Thread 0 of each CTA, at the end of call `call`: whether this CTA is the
// last of the call to finish.  The fences make every CTA's work (its reads
// of the window too) come before what the last one does next.
__device__ inline bool last_to_finish(uint64_t* exits, uint64_t call) {
  __threadfence();
  const bool last = atomicAdd(reinterpret_cast<unsigned long long*>(exits), 1ull) + 1 == call * gridDim.x;
  if (last) __threadfence();
  return last;
}

}  // namespace braid::moe::cuda

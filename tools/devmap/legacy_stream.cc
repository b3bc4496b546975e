// libbraid-devmap.so, second part: ranks that are threads sharing a GPU
// must not meet on the legacy default stream.
//
// Programs written for one GPU per rank (NCCL's device API examples) make
// blocking streams (cudaStreamCreate) and call cudaMemset and cudaMemcpy,
// which run on the legacy default stream, between their kernels.  In one
// process, legacy-stream work waits for the earlier work of every blocking
// stream of the device's context, the other ranks' streams included.  So a
// rank's cudaMemset waits for a peer's kernel, which spins in a barrier for
// this rank's kernel, which is queued behind the memset: a deadlock.  NCCL's
// 2.28.9 gin_alltoall_hybrid example, which clears its receive buffer with
// cudaMemset right before its launch, passed at 2 thread ranks on one H200
// and hung at 4 (perf/results/cuda_h200/20261204).  On NCCL's own runs each
// rank is a process with a context of its own, where this cannot happen.
//
// Where several of the indices a program sees share a real device
// (devmap::shares_devices), this part gives those calls the meaning they
// have when each rank is a process: cudaMemset and cudaMemcpy run on the
// calling thread's per-thread default stream (which waits for no other
// thread's work), after the earlier work of the blocking streams this
// thread made on the current device, and are done when they return;
// cudaDeviceSynchronize waits for this thread's streams on it, not every
// rank's.  Not covered: kernels a
// program launches on the legacy stream itself (`<<<grid, block>>>` with
// no stream), and the other legacy-stream calls (cudaMemcpyToSymbol, 2D
// copies...), which pass through unchanged.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/devmap/devmap.h"

namespace {

// The streams the program made while devices were shared: which thread
// made each, on which real device, and whether it is blocking (ordered with
// that device's legacy stream).
struct Made {
  cudaStream_t stream;
  std::thread::id by;
  int device;
  bool blocking;
};
std::mutex made_mutex;
std::vector<Made> made;

int current_real_device() {
  REAL(cudaGetDevice);  // the runtime's own answer, not the index the program set
  int device = -1;
  return real_cudaGetDevice(&device) == cudaSuccess ? device : -1;
}

cudaError_t note_made(cudaError_t e, const cudaStream_t* stream, unsigned int flags) {
  if (e != cudaSuccess || !devmap::shares_devices()) return e;
  std::lock_guard<std::mutex> lock(made_mutex);
  made.push_back({*stream, std::this_thread::get_id(), current_real_device(), (flags & cudaStreamNonBlocking) == 0});
  return e;
}

// This thread's streams on the current device (only the blocking ones, or
// all): what that device's legacy stream would order this thread's call after.
std::vector<cudaStream_t> my_streams(bool blocking_only) {
  const int device = current_real_device();
  std::vector<cudaStream_t> mine;
  std::lock_guard<std::mutex> lock(made_mutex);
  for (const Made& m : made)
    if (m.by == std::this_thread::get_id() && m.device == device && (m.blocking || !blocking_only))
      mine.push_back(m.stream);
  return mine;
}

// Runs `op` on the per-thread default stream after what this thread's
// blocking streams hold, and waits for it: the legacy stream's order as far
// as this thread's own work goes, and nothing of the other threads'.
template <class Op>
cudaError_t as_own_legacy(Op op) {
  REAL(cudaEventCreateWithFlags);
  REAL(cudaEventRecord);
  REAL(cudaStreamWaitEvent);
  REAL(cudaStreamSynchronize);
  thread_local std::map<int, cudaEvent_t> done;  // by device: an event records only on its own device's streams
  for (cudaStream_t s : my_streams(true)) {
    cudaEvent_t& event = done[current_real_device()];
    if (!event)
      if (cudaError_t e = real_cudaEventCreateWithFlags(&event, cudaEventDisableTiming)) return e;
    if (cudaError_t e = real_cudaEventRecord(event, s)) return e;
    if (cudaError_t e = real_cudaStreamWaitEvent(cudaStreamPerThread, event, 0)) return e;
  }
  if (cudaError_t e = op(cudaStreamPerThread)) return e;
  return real_cudaStreamSynchronize(cudaStreamPerThread);
}

}  // namespace

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  REAL(cudaStreamCreate);
  return note_made(real_cudaStreamCreate(stream), stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  REAL(cudaStreamCreateWithFlags);
  return note_made(real_cudaStreamCreateWithFlags(stream, flags), stream, flags);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  REAL(cudaStreamCreateWithPriority);
  return note_made(real_cudaStreamCreateWithPriority(stream, flags, priority), stream, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  REAL(cudaStreamDestroy);
  {
    std::lock_guard<std::mutex> lock(made_mutex);
    made.erase(std::remove_if(made.begin(), made.end(), [&](const Made& m) { return m.stream == stream; }),
               made.end());
  }
  return real_cudaStreamDestroy(stream);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  REAL(cudaMemset);
  REAL(cudaMemsetAsync);
  if (!devmap::shares_devices()) return real_cudaMemset(dst, value, bytes);
  return as_own_legacy([&](cudaStream_t s) { return real_cudaMemsetAsync(dst, value, bytes, s); });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  REAL(cudaMemcpy);
  REAL(cudaMemcpyAsync);
  if (!devmap::shares_devices()) return real_cudaMemcpy(dst, src, bytes, kind);
  return as_own_legacy([&](cudaStream_t s) { return real_cudaMemcpyAsync(dst, src, bytes, kind, s); });
}

cudaError_t cudaDeviceSynchronize() {
  REAL(cudaDeviceSynchronize);
  REAL(cudaStreamSynchronize);
  if (!devmap::shares_devices()) return real_cudaDeviceSynchronize();
  for (cudaStream_t s : my_streams(false))
    if (cudaError_t e = real_cudaStreamSynchronize(s)) return e;
  return real_cudaStreamSynchronize(cudaStreamPerThread);
}

}  // extern "C"

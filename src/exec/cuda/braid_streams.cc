#include "src/exec/cuda/braid_streams.h"

#include <chrono>
#include <map>
#include <mutex>

#include "src/base/deadline.h"
#include "src/base/env.h"
#include "src/exec/cuda/cuda_try.h"

namespace braid {
namespace {

struct DeviceStreams {
  std::mutex lock[2];  // by BraidStream
  cudaStream_t stream[2] = {nullptr, nullptr};
};

// Never freed, nor their lock: communicators on a device come and go, a
// stream destroyed and made again would take another queue, and proxy
// threads may still copy while the process exits.
std::map<int, DeviceStreams*>& by_device() {
  static auto* devices = new std::map<int, DeviceStreams*>;
  return *devices;
}
std::mutex& streams_lock() {
  static auto* lock = new std::mutex;
  return *lock;
}

Status streams_of(int device, DeviceStreams** out) {
  std::lock_guard<std::mutex> guard(streams_lock());
  DeviceStreams*& d = by_device()[device];
  if (!d) d = new DeviceStreams;
  for (cudaStream_t& s : d->stream) {
    if (s) continue;
    int previous = -1;
    CUDA_TRY(cudaGetDevice(&previous));
    CUDA_TRY(cudaSetDevice(device));
    const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaSetDevice(previous);
    CUDA_TRY(e);
  }
  *out = d;
  return Status::ok();
}

}  // namespace

Status run_on_braid_stream(int device, BraidStream which, const std::function<cudaError_t(cudaStream_t)>& work) {
  DeviceStreams* d = nullptr;
  BRAID_TRY(streams_of(device, &d));
  const int i = static_cast<int>(which);
  std::lock_guard<std::mutex> guard(d->lock[i]);
  CUDA_TRY(work(d->stream[i]));
  // Bounded, as every wait in braid: work stuck behind a waiting kernel
  // (a shared hardware queue) is an error that says so, not a hang.
  const Deadline deadline = Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
  Waiter waiter;
  for (;;) {
    const cudaError_t e = cudaStreamQuery(d->stream[i]);
    if (e == cudaSuccess) return Status::ok();
    if (e != cudaErrorNotReady) CUDA_TRY(e);
    if (deadline.expired())
      return BRAID_ERROR(ncclSystemError,
                         "braid's {} stream on device {} did not finish its work within BRAID_TIMEOUT ({} s): it may "
                         "be queued behind a kernel that waits for this rank (a hardware queue shared with a peer's "
                         "stream: CUDA_DEVICE_MAX_CONNECTIONS=32 and few streams help)",
                         which == BraidStream::kGin ? "GIN" : "setup", device, env_int("BRAID_TIMEOUT"));
    waiter.pause();
  }
}

Status on_own_stream(const std::function<cudaError_t(cudaStream_t)>& work) {
  int device = -1;
  CUDA_TRY(cudaGetDevice(&device));
  return run_on_braid_stream(device, BraidStream::kSetup, work);
}

}  // namespace braid

#include "src/exec/cuda/cuda_gin_memory.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "src/base/log.h"
#include "src/exec/cuda/braid_streams.h"
#include "src/exec/cuda/cuda_try.h"

namespace braid {
namespace {

class CudaGinMemory final : public devapi::GinMemoryOps {
 public:
  explicit CudaGinMemory(int device) : device_(device) {}
  bool host_direct() const override { return false; }
  bool adds_in_windows() const override { return false; }

  // On braid's GIN stream of the device (braid_streams.h: made at the first
  // communicator's init, not by the proxy once kernels wait), never the
  // default stream, which would wait for the application's kernels.  The
  // proxy and a TCP receiver take turns on it.  These threads are braid's
  // and run in relaxed capture mode: in the default global mode their
  // synchronize, while an application thread captures a graph (PyTorch
  // does, beside a kernel that GIN serves), is a prohibited call that
  // invalidates the capture.
  Status copy(void* dst, const void* src, uint64_t bytes) const override {
    if (!bytes) return Status::ok();
    thread_local const cudaError_t relaxed = [] {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      return cudaThreadExchangeStreamCaptureMode(&mode);
    }();
    CUDA_TRY(relaxed);
    CUDA_TRY(cudaSetDevice(device_));
    return run_on_braid_stream(device_, BraidStream::kGin, [&](cudaStream_t stream) {
      return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
    });
  }
  // Signal arrays and counters are host memory the device maps.
  Status add(uint64_t* word, uint64_t value) const override {
    __atomic_fetch_add(word, value, __ATOMIC_RELEASE);
    return Status::ok();
  }

 private:
  int device_;
};

}  // namespace

const devapi::GinMemoryOps& cuda_gin_memory(int device) {
  static std::mutex mutex;
  static auto* by_device = new std::map<int, std::unique_ptr<CudaGinMemory>>;  // never freed: exit paths
  std::lock_guard<std::mutex> lock(mutex);
  auto& ops = (*by_device)[device];
  if (!ops) {
    ops = std::make_unique<CudaGinMemory>(device);
    // The proxy's streams share the hardware queues with the program's:
    // with few, a copy can queue behind a stream whose next work waits
    // for the kernel GIN serves (docs/compatibility.md).
    const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (connections && std::atoi(connections) < 8)
      BRAID_WARN("GIN on device {} with CUDA_DEVICE_MAX_CONNECTIONS={}: the proxy's copies may queue behind a "
                 "stream that waits for the kernel they serve (a hang); 8 or more avoids it",
                 device, connections);
  }
  return *ops;
}

}  // namespace braid

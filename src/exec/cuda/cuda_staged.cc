// DeviceMemory on the CUDA runtime, for host-staged communicators
// (src/exec/host_staged.h): pinned staging memory, copies on the caller's
// stream, and a stream synchronisation to wait.
#include <cuda_runtime.h>

#include "src/exec/cuda/cuda_try.h"
#include "src/exec/device_backend.h"
#include "src/exec/host_staged.h"

namespace braid {
namespace {

class CudaMemory final : public DeviceMemory {
 public:
  // `required`: the device a buffer must be on (NCCL_CHECK_MODE), or -1.
  CudaMemory(int device, int required) : device_(device), required_(required) {}

  Status check(const void* p, const char* what) override { return check_device_memory(p, what, required_); }
  Status check_not_capturing(void* stream) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CUDA_TRY(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
    if (status != cudaStreamCaptureStatusNone)
      return BRAID_ERROR(ncclInvalidUsage,
                         "this communicator spans hosts and stages its buffers through host memory: its calls "
                         "cannot be captured into a CUDA graph");
    return Status::ok();
  }
  Status to_host(void* host, const void* device, size_t bytes, void* stream) override {
    CUDA_TRY(cudaSetDevice(device_));
    CUDA_TRY(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)));
    return Status::ok();
  }
  Status to_device(void* device, const void* host, size_t bytes, void* stream) override {
    CUDA_TRY(cudaSetDevice(device_));
    CUDA_TRY(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
    return Status::ok();
  }
  Status wait(void* stream) override {
    CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    return Status::ok();
  }
  void* host_alloc(size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void host_free(void* p) override { cudaFreeHost(p); }

 private:
  int device_, required_;
};

}  // namespace

Status make_cuda_staged_backend(const BackendContext& ctx, int device, const HostPathSettings& host,
                                std::unique_ptr<Backend>* out) {
  const int required = ctx.check_buffer_devices ? device : -1;
  *out = std::make_unique<HostStagedBackend>(std::make_unique<CudaMemory>(device, required),
                                             std::make_unique<HostBackend>(ctx, host));
  return Status::ok();
}

}  // namespace braid

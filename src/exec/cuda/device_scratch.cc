// The runtime's own device traffic and what the driver reports
// (device_backend.h).
#include <cuda_runtime.h>

#include <vector>

#include "src/exec/cuda/cuda_try.h"
#include "src/exec/device_backend.h"

namespace braid {
namespace {

class CudaScratch final : public DeviceScratch {
 public:
  explicit CudaScratch(int device) : device_(device) {}
  ~CudaScratch() override {
    if (!stream_ || cudaSetDevice(device_) != cudaSuccess) return;
    for (void* p : blocks_) cudaFreeAsync(p, stream_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    if (pool_) cudaMemPoolDestroy(pool_);
  }
  // A pool of its own: from the device's default pool, shared with the
  // program and with ranks that are threads of it, an allocation may be
  // made to wait for another stream's free (README, "Ranks may share one GPU").
  Status init() {
    CUDA_TRY(cudaSetDevice(device_));
    CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    CUDA_TRY(cudaMemPoolCreate(&pool_, &props));
    return Status::ok();
  }
  cudaStream_t stream() const override { return stream_; }
  Status alloc(size_t bytes, void** out) override {
    CUDA_TRY(cudaSetDevice(device_));
    CUDA_TRY(cudaMallocFromPoolAsync(out, bytes, pool_, stream_));
    blocks_.push_back(*out);
    return Status::ok();
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    CUDA_TRY(cudaSetDevice(device_));
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
    return Status::ok();
  }
  Status synchronize() override {
    CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::ok();
  }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  std::vector<void*> blocks_;
};

}  // namespace

DeviceInventory probe_device_inventory() {
  DeviceInventory inventory;
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess) inventory.devices = count;
  int version = 0;
  if (cudaDriverGetVersion(&version) == cudaSuccess) inventory.driver_version = version;
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) inventory.runtime_version = version;
  inventory.compiled_version = CUDART_VERSION;
  cudaGetLastError();  // no device is not an error to leave behind
  return inventory;
}

Status DeviceScratch::create(int device, std::unique_ptr<DeviceScratch>* out) {
  cudaGetLastError();
  auto scratch = std::make_unique<CudaScratch>(device);
  BRAID_TRY(scratch->init());
  *out = std::move(scratch);
  return Status::ok();
}

}  // namespace braid

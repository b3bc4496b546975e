#include "src/exec/cuda/cuda_device_api_memory.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "src/base/env.h"
#include "src/exec/cuda/cuda_gin_memory.h"
#include "src/exec/cuda/host_registration.h"
#include "src/exec/cuda/braid_streams.h"
#include "src/exec/cuda/cuda_try.h"
#include "src/exec/cuda/cuda_vmm.h"

namespace braid {
namespace {

// Makes `device` current for one call and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

class CudaDeviceApiMemory final : public DeviceApiMemory {
 public:
  explicit CudaDeviceApiMemory(int device) : device_(device) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
      capacity_ = prop.totalGlobalMem;
      std::memcpy(&id_, prop.uuid.bytes, sizeof(id_));
    }
    granularity_ = vmm::granularity(device);
  }
  const char* name() const override { return "cuda"; }
  uint64_t granularity() const override { return granularity_; }
  uint64_t capacity() const override { return capacity_; }
  uint64_t memory_id() const override { return id_; }

  bool can_share() const override { return vmm::available(device_); }
  // The proxy on a GPU is built and has not run on one yet: opt-in until a
  // GPU machine has run it (BRAID_CUDA_GIN=1; docs/compatibility.md).
  const devapi::GinMemoryOps* gin_ops() const override {
    return env_int("BRAID_CUDA_GIN") == 1 ? &cuda_gin_memory(device_) : nullptr;
  }
  Status describe(const void* p, size_t bytes, ExportedMemory* out) override {
    DeviceScope scope(device_);
    return vmm::describe(p, bytes, out);
  }
  Status reserve(uint64_t bytes, uint64_t align, char** base) override { return vmm::reserve(bytes, align, base); }
  void release(char* base, uint64_t bytes) override { vmm::release(base, bytes); }
  Status map(int fd, uint64_t bytes, char* at) override { return vmm::map(device_, fd, bytes, at); }
  void unmap(char* at, uint64_t bytes) override { vmm::unmap(at, bytes); }

  Status alloc_shareable(size_t bytes, void** out) override {
    DeviceScope scope(device_);
    return vmm::alloc(device_, bytes, out);
  }
  void free_shareable(void* p) override { vmm::free(p); }
  Status zero(void* p, size_t bytes) override {
    DeviceScope scope(device_);
    return on_own_stream([&](cudaStream_t s) { return cudaMemsetAsync(p, 0, bytes, s); });
  }

  Status struct_alloc(size_t bytes, void** out) override {
    DeviceScope scope(device_);
    CUDA_TRY(cudaMalloc(out, bytes));
    return zero(*out, bytes);
  }
  Status struct_write(void* dst, const void* src, size_t bytes) override {
    DeviceScope scope(device_);
    return on_own_stream([&](cudaStream_t s) { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s); });
  }
  void struct_free(void* p) override {
    DeviceScope scope(device_);
    cudaFree(p);
  }

  Status host_register(void* p, size_t bytes, void** device) override {
    DeviceScope scope(device_);
    return cuda::register_host(p, bytes, device);
  }
  void host_unregister(void* p) override {
    DeviceScope scope(device_);
    cuda::unregister_host(p);
  }

 private:
  int device_;
  uint64_t capacity_ = 0, id_ = 0, granularity_ = 0;
};

}  // namespace

DeviceApiMemory& cuda_device_api_memory(int device) {
  static std::mutex mutex;
  static auto* by_device = new std::map<int, std::unique_ptr<CudaDeviceApiMemory>>;  // never freed: exit paths
  std::lock_guard<std::mutex> lock(mutex);
  auto& m = (*by_device)[device];
  if (!m) m = std::make_unique<CudaDeviceApiMemory>(device);
  return *m;
}

}  // namespace braid

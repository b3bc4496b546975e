#include "src/exec/cuda/host_registration.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "src/exec/cuda/cuda_try.h"

namespace braid::cuda {
namespace {

struct Registration {
  size_t bytes = 0;
  void* device = nullptr;
  int users = 0;
};

std::mutex& registry_mutex() {
  static auto* m = new std::mutex;  // never freed: exit paths
  return *m;
}
std::map<void*, Registration>& registry() {
  static auto* r = new std::map<void*, Registration>;
  return *r;
}

}  // namespace

Status register_host(void* p, size_t bytes, void** device) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(p);
  if (it != registry().end()) {
    if (it->second.bytes != bytes)
      return BRAID_ERROR(ncclInternalError, "host memory at {} is registered with {} bytes, not {}", p,
                         it->second.bytes, bytes);
    ++it->second.users;
    *device = it->second.device;
    return Status::ok();
  }
  // Portable: ranks that are threads of one process may be on other devices.
  CUDA_TRY(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  void* mapped = nullptr;
  if (cudaError_t e = cudaHostGetDevicePointer(&mapped, p, 0); e != cudaSuccess) {
    cudaHostUnregister(p);
    CUDA_TRY(e);
  }
  registry()[p] = {bytes, mapped, 1};
  *device = mapped;
  return Status::ok();
}

void unregister_host(void* p) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(p);
  if (it == registry().end() || --it->second.users > 0) return;
  cudaHostUnregister(p);
  registry().erase(it);
}

}  // namespace braid::cuda

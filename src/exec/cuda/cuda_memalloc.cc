// ncclMemAlloc / ncclMemFree on the CUDA backend: device memory aligned for
// symmetric windows (cudaMalloc guarantees 256 bytes; the block is
// over-allocated and the aligned address remembered with the real one).
#include <map>
#include <mutex>

#include "src/exec/cuda/cuda_try.h"
#include "src/exec/device_backend.h"

namespace braid {
namespace {

std::mutex mutex;
std::map<void*, void*>& blocks() {  // aligned address -> cudaMalloc's
  static auto* live = new std::map<void*, void*>;
  return *live;
}

}  // namespace

Status device_mem_alloc(size_t bytes, size_t alignment, void** out) {
  void* raw = nullptr;
  CUDA_TRY(cudaMalloc(&raw, bytes + alignment));
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + alignment - 1) & ~(alignment - 1));
  std::lock_guard<std::mutex> lock(mutex);
  blocks()[aligned] = raw;
  *out = aligned;
  return Status::ok();
}

Status device_mem_free(void* p) {
  void* raw = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = blocks().find(p);
    if (it == blocks().end()) return BRAID_ERROR(ncclInternalError, "{} is not a device block of ncclMemAlloc", p);
    raw = it->second;
    blocks().erase(it);
  }
  CUDA_TRY(cudaFree(raw));
  return Status::ok();
}

}  // namespace braid

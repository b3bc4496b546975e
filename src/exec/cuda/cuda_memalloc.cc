// ncclMemAlloc / ncclMemFree on the CUDA backend.  As NCCL's: cuMem memory
// exportable as a POSIX descriptor (src/exec/cuda/cuda_vmm.h), which the
// peers can map into symmetric windows, where the device can export it
// and NCCL_CUMEM_ENABLE is not 0.  Otherwise cudaMalloc memory aligned for
// windows (cudaMalloc guarantees 256 bytes; the block is over-allocated
// and the aligned address remembered with the real one).
#include <map>
#include <mutex>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/exec/cuda/cuda_try.h"
#include "src/exec/cuda/cuda_vmm.h"
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
  int device = 0;
  CUDA_TRY(cudaGetDevice(&device));
  if (env_raw("NCCL_CUMEM_ENABLE") != "0" && vmm::available(device) && vmm::granularity(device) % alignment == 0) {
    if (Status s = vmm::alloc(device, bytes, out); s.is_ok()) return s;
    else BRAID_INFO(kInit, "ncclMemAlloc: cuMem failed ({}); cudaMalloc memory instead", s.to_string());
  }
  void* raw = nullptr;
  CUDA_TRY(cudaMalloc(&raw, bytes + alignment));
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + alignment - 1) & ~(alignment - 1));
  std::lock_guard<std::mutex> lock(mutex);
  blocks()[aligned] = raw;
  *out = aligned;
  return Status::ok();
}

Status device_mem_free(void* p) {
  if (vmm::free(p)) return Status::ok();
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

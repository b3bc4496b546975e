// CUDA runtime errors as braid Statuses (host code of the CUDA backend).
#pragma once

#include <cuda_runtime.h>

#include "src/base/status.h"
#include "src/exec/device_buffer_check.h"

#define CUDA_TRY(expr)                                                                                 \
  do {                                                                                                \
    cudaError_t e_ = (expr);                                                                          \
    if (e_ != cudaSuccess)                                                                            \
      return BRAID_ERROR(ncclUnhandledCudaError, "{} failed: {} ({})", #expr, cudaGetErrorString(e_), \
                         cudaGetErrorName(e_));                                                       \
  } while (0)

namespace braid {

// ncclInvalidArgument unless p is device memory, of device `required` if
// that is not -1 (`what` names the argument; src/exec/device_buffer_check.h).
inline Status check_device_memory(const void* p, const char* what, int required = -1) {
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  BufferMemory memory = BufferMemory::Device;
  if (e != cudaSuccess || attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost) {
    cudaGetLastError();  // clear a non-sticky error from the query
    memory = BufferMemory::NotDevice;
  } else if (attr.type == cudaMemoryTypeManaged) {
    memory = BufferMemory::Managed;
  }
  return device_buffer_verdict(memory, attr.device, required, p, what);
}

}  // namespace braid

// The runtime's own device traffic and what the driver reports
// (device_backend.h): scratch memory, an own stream, blocking copies.
#include <cuda_runtime.h>

#include "src/exec/cuda/cuda_try.h"
#include "src/exec/device_backend.h"

namespace braid {

DeviceInventory probe_device_inventory() {
  DeviceInventory inventory;
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess) inventory.devices = count;
  int version = 0;
  if (cudaDriverGetVersion(&version) == cudaSuccess) inventory.driver_version = version;
  cudaGetLastError();  // no device is not an error to leave behind
  return inventory;
}

Status device_scratch_alloc(int device, size_t bytes, void** out) {
  CUDA_TRY(cudaSetDevice(device));
  CUDA_TRY(cudaMalloc(out, bytes));
  return Status::ok();
}

void device_scratch_free(int device, void* p) {
  if (p && cudaSetDevice(device) == cudaSuccess) cudaFree(p);
}

Status device_run_on_own_stream(int device, const std::function<Status(cudaStream_t)>& enqueue) {
  CUDA_TRY(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Status enqueued = enqueue(s);
  cudaError_t e = cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  BRAID_TRY(std::move(enqueued));
  CUDA_TRY(e);
  return Status::ok();
}

Status device_copy_blocking(int device, void* dst, const void* src, size_t bytes) {
  CUDA_TRY(cudaSetDevice(device));
  return on_own_stream([&](cudaStream_t s) { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s); });
}

}  // namespace braid

// Without CUDA (braid built where nvcc was not found), no device backend
// exists: the probe says so and every communicator runs on the host.
#include "src/exec/device_backend.h"

#include "src/base/env.h"

namespace braid {

#if !BRAID_WITH_CUDA
DeviceProbe probe_device_backend() { return DeviceProbe{}; }

Status make_cuda_backend(ncclComm*, int, std::unique_ptr<DeviceBackend>*) {
  return BRAID_ERROR(ncclInvalidUsage, "braid was built without CUDA (nvcc not found at build time)");
}
Status device_mem_alloc(size_t, size_t, void**) {
  return BRAID_ERROR(ncclInvalidUsage, "braid was built without CUDA (nvcc not found at build time)");
}
Status device_mem_free(void*) {
  return BRAID_ERROR(ncclInvalidUsage, "braid was built without CUDA (nvcc not found at build time)");
}
Status make_cuda_staged_backend(ncclComm* comm, int device, std::unique_ptr<DeviceBackend>* out) {
  return make_cuda_backend(comm, device, out);
}
#endif

}  // namespace braid

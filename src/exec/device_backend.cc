// Without CUDA (braid built where nvcc was not found), no device backend
// exists: the probe says so and every communicator runs on the host.
#include "src/exec/device_backend.h"

namespace braid {

#if !BRAID_WITH_CUDA
namespace {
Status no_cuda() { return BRAID_ERROR(ncclInvalidUsage, "braid was built without CUDA (nvcc not found at build time)"); }
}  // namespace

DeviceProbe probe_device_backend() { return DeviceProbe{}; }
Status make_cuda_backend(const BackendContext&, int, std::unique_ptr<Backend>*) { return no_cuda(); }
Status make_cuda_staged_backend(const BackendContext&, int, const HostPathSettings&, std::unique_ptr<Backend>*) {
  return no_cuda();
}
Status device_mem_alloc(size_t, size_t, void**) { return no_cuda(); }
Status device_mem_free(void*) { return no_cuda(); }
DeviceInventory probe_device_inventory() { return DeviceInventory{}; }
Status DeviceScratch::create(int, std::unique_ptr<DeviceScratch>*) { return no_cuda(); }
#endif

}  // namespace braid

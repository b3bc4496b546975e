// Whether this process has a CUDA device the backend can use (see
// device_backend.h): the device it would run on, and which GPU that is.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "src/base/env.h"
#include "src/base/hash.h"
#include "src/exec/device_backend.h"

namespace braid {

DeviceProbe probe_device_backend() {
  DeviceProbe probe;
  std::string want = env_string("BRAID_BACKEND");
  if (want == "host") return probe;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return probe;
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return probe;
  probe.usable = 1;
  probe.device = device;
  // The UUID names the GPU whatever CUDA_VISIBLE_DEVICES numbers it as.
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    probe.gpu = fnv1a(std::string_view(prop.uuid.bytes, sizeof prop.uuid.bytes));
    std::snprintf(probe.name, sizeof probe.name, "%.*s", int(sizeof probe.name) - 1, prop.name);  // cut to fit
    std::snprintf(probe.pci_bus_id, sizeof probe.pci_bus_id, "%04x:%02x:%02x.0", unsigned(prop.pciDomainID) & 0xffff,
                  unsigned(prop.pciBusID) & 0xff, unsigned(prop.pciDeviceID) & 0xff);
    probe.sm = prop.major * 10 + prop.minor;
  }
  return probe;
}

}  // namespace braid

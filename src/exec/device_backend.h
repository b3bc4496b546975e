// The CUDA backends' entry points (src/exec/cuda): what the runtime asks
// before and while it makes a communicator, and ncclMemAlloc's device
// memory.  Built without CUDA, the probe finds no device and the makers
// fail cleanly.
#pragma once

#include <cstddef>
#include <memory>

#include "src/base/status.h"
#include "src/exec/backend.h"
#include "src/plan/host_path.h"

namespace braid {

// What a rank tells the others at init so that all pick the same backend.
struct DeviceProbe {
  int32_t usable = 0;  // 1: this rank can and wants to run the CUDA backend
  int32_t device = -1;
  uint64_t gpu = 0;  // the physical GPU (a hash of its UUID): equal on two ranks <=> one GPU
  char name[64] = {};  // its name (cudaDeviceProp::name, cut to fit): what tuning tables match
  char pci_bus_id[16] = {};  // "0000:1b:00.0": where it is on the PCI tree (the nearest NICs)
  int32_t sm = 0;            // compute capability major * 10 + minor (90: 9.0)
};

// Looks at BRAID_BACKEND and the CUDA devices visible to this process.
DeviceProbe probe_device_backend();

// What this process's CUDA side reports, for the init diagnostics' comparison
// of ranks (src/runtime/diagnostics_consistency.cc): all 0 without CUDA.
struct DeviceInventory {
  int32_t devices = 0;         // CUDA devices this process sees
  int32_t driver_version = 0;  // cudaDriverGetVersion: the CUDA version the driver supports
  int32_t runtime_version = 0;  // cudaRuntimeGetVersion
  int32_t compiled_version = 0;  // CUDART_VERSION braid was built with (RAS's report)
};
DeviceInventory probe_device_inventory();

// For the runtime's own traffic on a device communicator (the init
// diagnostics' patterns): a stream of braid's own on `device` (never the
// legacy default stream, which would also wait for the application's, where
// a peer's kernel may wait for this rank), with memory and copies ordered
// on it (cudaMallocAsync, cudaFreeAsync: no device-wide synchronisation,
// which could wait for another communicator's kernel waiting for this rank).
// Freed on destruction, after the stream's work.
class DeviceScratch {
 public:
  // Also clears this thread's last CUDA error, so that an earlier one the
  // application left is not taken for this work's.
  static Status create(int device, std::unique_ptr<DeviceScratch>* out);
  virtual ~DeviceScratch() = default;
  virtual cudaStream_t stream() const = 0;
  virtual Status alloc(size_t bytes, void** out) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;  // enqueued on stream()
  virtual Status synchronize() = 0;                                     // waits for stream()'s work
};

// ncclMemAlloc's memory where communicators run the CUDA backend: device
// memory on the current device, `alignment`-aligned (a power of two).
Status device_mem_alloc(size_t bytes, size_t alignment, void** out);
Status device_mem_free(void* p);

// The CUDA backend of an initialised communicator (bootstrap and peers
// ready): ranks of one host, CUDA IPC between them.
Status make_cuda_backend(const BackendContext& ctx, int device, std::unique_ptr<Backend>* out);
// The same for a communicator with ranks on other hosts: device buffers
// staged through a host backend with `host` settings (src/exec/host_staged.h).
Status make_cuda_staged_backend(const BackendContext& ctx, int device, const HostPathSettings& host,
                                std::unique_ptr<Backend>* out);

}  // namespace braid

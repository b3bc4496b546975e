// The device API's memory on the CUDA backend (src/exec/device_api_memory.h):
// NCCL's structs in device memory, the flat range and the shareable
// allocations in cuMem (src/exec/cuda/cuda_vmm.h).  One per device.
#pragma once

#include "src/exec/device_api_memory.h"

namespace braid {

DeviceApiMemory& cuda_device_api_memory(int device);

}  // namespace braid

// How braid's GIN proxy (src/devapi/gin_proxy.h) moves bytes on the CUDA
// backend: window memory is a GPU's, which the host cannot load or store,
// so a copy into or out of it is a cudaMemcpyAsync (the copy engines, no
// SMs), waited for before it returns; the proxy's signal adds go to host
// memory the device maps (src/runtime/device_gin.h), as plain host
// atomics.  Nothing here launches a kernel: a user's persistent kernel
// may hold every SM while it waits for the very signal the proxy is about
// to add.  So an add to a word of window memory (2.30's VA signals) is not
// served: the host has no atomic on device memory, and a kernel is what
// could deadlock.
#pragma once

#include "src/devapi/gin_memory.h"

namespace braid {

// One per device, never freed (used by proxy threads until exit).
const devapi::GinMemoryOps& cuda_gin_memory(int device);

}  // namespace braid

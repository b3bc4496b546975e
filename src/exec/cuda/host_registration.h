// Host memory registered with CUDA (mapped, portable), counted per process.
// Ranks that are threads of one process share one mapping of a shared
// segment (src/transport/shm_segment.h), and cudaHostRegister refuses a
// range registered already: the first user registers it, the last one to
// let go unregisters it, so no rank unmaps what another's kernels still
// write.
#pragma once

#include <cstddef>

#include "src/base/status.h"

namespace braid::cuda {

// Registers [p, p + bytes), or counts one more user of the registration
// starting at p (same size); *device: p as kernels reach it.
Status register_host(void* p, size_t bytes, void** device);
// One user less; the last one unregisters.
void unregister_host(void* p);

}  // namespace braid::cuda

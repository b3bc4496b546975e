// What a kernel's error word says, as a warning: which wait gave up and on
// what (src/exec/cuda/device_plan.h, DevError and DevFlag).
#pragma once

#include <cstdint>

namespace braid::cuda {

// `flags`: the host-mapped words a launch reports through (kFlagWords).
void warn_kernel_error(int code, const volatile int* flags, uint64_t comm_hash, int rank, uint64_t timeout_s);

}  // namespace braid::cuda

// What the CUDA backend says of a buffer a call passes it, from what the
// CUDA runtime reports of the pointer (cudaPointerGetAttributes), kept free
// of CUDA headers so that it is unit tested on any machine.
//
// Every call's buffers must be device memory (or managed memory).  Under
// NCCL_CHECK_MODE's local check (or NCCL_CHECK_POINTERS=1) device memory
// must also be the communicator's device's, as NCCL's CudaPtrCheck says
// ("allocated on device X mismatches with NCCL device Y"); without it a
// buffer of another device is left to peer access, as in NCCL.
#pragma once

#include "src/base/status.h"

namespace braid {

enum class BufferMemory { NotDevice, Device, Managed };

// `owner`: the device of Device memory; `required`: the communicator's
// device under the local check, else -1.
inline Status device_buffer_verdict(BufferMemory memory, int owner, int required, const void* p, const char* what) {
  if (memory == BufferMemory::NotDevice)
    return BRAID_ERROR(ncclInvalidArgument,
                       "{} {} is not device memory: this communicator runs the CUDA backend (set "
                       "BRAID_BACKEND=host to use host buffers)",
                       what, p);
  if (memory == BufferMemory::Device && required >= 0 && owner != required)
    return BRAID_ERROR(ncclInvalidArgument,
                       "{} {} is memory of device {}, and this communicator runs on device {} "
                       "(NCCL_CHECK_MODE's local check)",
                       what, p, owner, required);
  return Status::ok();
}

}  // namespace braid

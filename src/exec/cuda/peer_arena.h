// How a CUDA-backend rank reaches a peer's arena (cuda_arena.h): a rank of
// this process on another GPU through peer access, a rank of another
// process through its CUDA IPC handle.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "src/base/status.h"
#include "src/transport/transport.h"

namespace braid::cuda {

// Ranks that are threads of one process on different GPUs use each other's
// arena pointers directly (CUDA IPC, which enables peer access for
// processes, refuses a process's own memory): `device` must be allowed to
// reach `peer_device`'s memory.
Status enable_peer_access(int device, int peer_device);

// Maps rank r's arena (another process's) through its legacy CUDA IPC
// handle.  Such a handle names its exporter by pid, so it does not open
// across pid namespaces (containers need a shared one: docker --pid=host or
// --pid=container:<id>); that failure says so.
Status open_peer_arena(const TransportContext& comm, int r, const cudaIpcMemHandle_t& handle, void** mapped);

}  // namespace braid::cuda

// An AllGather among a communicator's ranks on the host, over its bootstrap
// (no device work), for braid's own libraries over the public API.  MoE and
// AlltoAllv handles agree on their arguments and synchronise at destroy
// through it: on a CUDA communicator a device collective there could wait
// behind a peer's cudaMalloc or cudaFree, which itself waits for the
// kernels already running, one of them this collective's (ranks that are
// threads sharing a GPU).
#pragma once

#include <cstddef>

#include "nccl.h"
#include "src/base/status.h"

namespace braid {

// data: nranks x bytes_per_rank, this rank's part at rank x bytes_per_rank
// filled in; on return every rank's.  Collective; bounded by BRAID_TIMEOUT.
Status host_allgather(ncclComm_t comm, void* data, size_t bytes_per_rank);

}  // namespace braid

// One call as the application made it, after the API checked it: what the
// planner decides on and what a backend runs.  The runtime keeps which
// communicator it belongs to (src/runtime/group.h); nothing below needs it.
#pragma once

#include <cstddef>

#include "braid/chunking.h"
#include "braid/schedule.h"
#include "braid/schedule_library.h"
#include "nccl.h"
#include "src/ops/reduction.h"

namespace braid {

struct CollectiveCall {
  Collective collective = Collective::AllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;  // as called (forwarding to a real NCCL, BRAID_CHECK)
  Reduction reduction;       // what executors fold with (src/ops/reduction.h)
  int root = 0;
  cudaStream_t stream = nullptr;  // device backends enqueue on it; the host backend ignores it
};

struct P2PCall {
  bool is_send = false;
  void* buffer = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  int peer = 0;
  cudaStream_t stream = nullptr;
};

// Which buffers rank `rank` has for a collective: NCCL lets the ranks that
// are not the root pass NULL for Broadcast/Scatter inputs and Reduce/Gather
// outputs.
inline bool has_input(const CollectiveCall& c, int rank) { return !rooted_input(c.collective) || rank == c.root; }
inline bool has_output(const CollectiveCall& c, int rank) { return !rooted_output(c.collective) || rank == c.root; }

// The call's placement on rank `rank`, as NCCL and MSCCL define in place: the
// send buffer exactly where the in-place form puts it (AllGather and
// Gather: block `rank` of the output; ReduceScatter and Scatter: the output
// is block `rank` of the input; otherwise the same pointer).  Buffers that
// partly overlap fit neither form (Placement::Unknown).  Schedule files may
// claim only one placement.
Placement placement_of(const CollectiveCall& c, int rank, int nranks);

}  // namespace braid

// One call as the application made it, after the API checked it: what the
// planner decides on and what a backend runs.  The runtime keeps which
// communicator it belongs to (src/runtime/group.h); nothing below needs it.
#pragma once

#include <cstddef>

#include "braid/chunking.h"
#include "braid/schedule.h"
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

}  // namespace braid

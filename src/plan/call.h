// One call as the application made it, after the API checked it: what the
// planner decides on and what a backend runs.  The runtime keeps which
// communicator it belongs to (src/runtime/group.h); nothing below needs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/chunking.h"
#include "braid/schedule.h"
#include "braid/schedule_library.h"
#include "nccl.h"
#include "src/ops/reduction.h"

namespace braid {

// A call's API events in a profiler plugin (src/runtime/profiler.h): its
// own and its group's, the parents of the events of its run; and the tag a
// per-call configuration gave it (ncclCollConfig_t userProfilerTag).
struct ProfilerParents {
  void* call = nullptr;
  void* group = nullptr;
  uint64_t tag = 0;
};

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
  // A per-call configuration (ncclCollConfig_t, src/plan/alg_selection.h),
  // or NCCL_ALGO's: a bit per algorithm_registry() index this call may run,
  // and kFastPathsBit where a board, single-copy or LL path may serve it; 0
  // is automatic.  A selection without that bit runs one of its schedules.
  uint32_t algorithms = 0;
  // Recorded by device backends once the call's kernel is launched (2.32).
  cudaEvent_t launch_event = nullptr;
  // Only under the cross-rank argument check: a call the API refused on this
  // rank, queued so that the check fails on every rank (never run).
  bool refused = false;
  ProfilerParents profiler;
};

struct P2PCall {
  bool is_send = false;
  void* buffer = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  int peer = 0;
  cudaStream_t stream = nullptr;
  // Only under the cross-rank argument check: a call the API refused on this
  // rank (its peer valid), queued so that the peer's check fails (never run).
  bool refused = false;
  ProfilerParents profiler;
};

// One-sided calls (ncclPutSignal, ncclSignal, ncclWaitSignal; 2.29).
struct SignalWait {
  int peer = 0, ctx = 0, signal = 0;
  uint64_t count = 0;  // signals to wait for (and consume)
};
struct RmaCall {
  bool wait = false;  // ncclWaitSignal: `waits`; otherwise a write to `peer`
  // The write: `bytes` from `data` into `peer`'s part of the window
  // registered `window_seq`-th, at `offset` (none for ncclSignal), then one
  // signal on (ctx, signal).
  int peer = 0;
  const void* data = nullptr;
  uint64_t bytes = 0;
  bool to_window = false;
  uint64_t window_seq = 0;
  uint64_t offset = 0;
  int ctx = 0, signal = 0;
  std::vector<SignalWait> waits;
  int64_t wait_ms = 0;  // the wait's bound; 0: BRAID_TIMEOUT (ncclWaitSignal's)
  cudaStream_t stream = nullptr;  // device backends enqueue on it; the host backend ignores it
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

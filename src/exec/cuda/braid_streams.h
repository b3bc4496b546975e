// braid's own streams on a device: two per device for the whole process,
// made once, at the first communicator's init, and kept.
//
// Why so few and so early: the driver maps a process's streams onto its
// CUDA_DEVICE_MAX_CONNECTIONS hardware queues (at most 32), and work queued
// behind a kernel on the same queue waits for that kernel.  Ranks that are
// threads of one process wait for each other inside kernels, so braid's own
// copies and memsets must never sit behind a peer's waiting kernel.  A
// stream made for each piece of work (one per call, as before), or per
// thread once kernels run (the GIN proxy's, as before), takes whichever
// queue comes next, more of them the more ranks.  (On an H200, GIN, MoE
// and deterministic calls hung with thread ranks and passed, where run,
// with processes: perf/results/cuda_h200/20261204; that the queues are the
// cause is not shown.)  Made once, before any kernel of the process waits,
// braid's streams stay two per device whatever the rank count.  How the
// driver picks a queue for a stream (in turn by creation, or among the live
// streams) is what tests/gpu/stream_queues.cu measures.
//
//   setup: init's memsets and copies, one-sided counters' reads (what
//          on_own_stream runs: waited for at once, short);
//   gin:   the GIN proxy's payload copies (NCCL's device API).
// Each is shared by every rank and thread of the process: one piece of work
// at a time (a lock), enqueued and waited for.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "src/base/status.h"

namespace braid {

enum class BraidStream { kSetup, kGin };

// Runs work(stream) on `device`'s stream `which`, alone, and waits for it
// (at most BRAID_TIMEOUT: ncclSystemError, saying so, past it).
Status run_on_braid_stream(int device, BraidStream which, const std::function<cudaError_t(cudaStream_t)>& work);

// Device work done and waited for on the calling thread's current device's
// setup stream (both of the device's streams are made at the first use, in
// a communicator's init): never the legacy default stream, which would also wait for
// the application's streams, where a peer's kernel may be waiting for this
// rank.
Status on_own_stream(const std::function<cudaError_t(cudaStream_t)>& work);

}  // namespace braid

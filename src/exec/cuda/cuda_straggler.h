// BRAID_STRAGGLER on the CUDA backend (src/plan/straggler.h): which rank an
// AllReduce's schedule plans for, and in auto mode the stamps its device
// leaves on the duration board (src/plan/duration_board.h): one kernel of
// one thread before the call's kernels records its arrival, one after them
// its duration.  The board is host memory the device maps, so the stamps
// need no host thread and no wait.
//
// A fixed rank plans StragglAR for that rank.  Eager takes the last rank to
// reach the host call (its arrival board): on a GPU that is the launch, not
// the kernel's start.  Auto is the one that sees the device: a rank whose
// kernels start late because its previous work ran long is late there too.
#pragma once

#include <cuda_runtime.h>

#include "src/exec/backend.h"
#include "src/plan/duration_stamp.h"

namespace braid {

class CudaStraggler {
 public:
  // At the communicator's init, on its device (every rank: opening the
  // board is collective): auto mode opens the board and maps it.
  Status init(const BackendContext& ctx);
  void release();  // after the device is idle

  // Before an AllReduce's kernels on `stream`: the rank its schedule plans
  // for (-1: none), and the arrival stamp of a call auto mode tracks.  Not
  // a captured call: a replay would stamp that call again.
  Status begin(const CollectiveCall& call, bool capturing, int* straggler);
  // Eager mode: the arrival begin would make, made earlier, so that a
  // thread driving several ranks in a group arrives for all of them before
  // any of them waits (run_cuda_group).  Only for a call begin will see.
  Status arrive_ahead(const CollectiveCall& call);
  // After its kernels: the completion stamp of a tracked call.
  Status end(cudaStream_t stream);

 private:
  const BackendContext* ctx_ = nullptr;
  void* registered_ = nullptr;         // the board's mapping, registered with the device
  char* device_base_ = nullptr;        // its device address
  DurationEntry* stamping_ = nullptr;  // begin's tracked call's entry, as the device sees it
  uint64_t stamping_call_ = 0;
};

}  // namespace braid

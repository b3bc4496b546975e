// The host side of the words a communicator's kernels report through
// (src/exec/cuda/device_plan.h, DevError and DevFlag): what their error word
// says, as ncclCommGetAsyncError's answer and as a warning naming the wait
// that gave up; and the abort flag every wait in the kernels reads (every
// 1024 spins), which stops kernels waiting for a peer before BRAID_TIMEOUT.
//
// Three things raise the flag:
// - ncclCommAbort: the communicator is going; a stopped kernel is
//   ncclInvalidUsage.
// - ncclCommRevoke: in-flight work stops on purpose, which is no error.
// - A peer's process exiting, seen by a ProcessWatch of the ranks in other
//   processes (threads of this one cannot exit alone).  A kernel waiting for
//   any rank then stops, and the error is ncclRemoteError naming the rank
//   that exited.  A kernel that does not wait, or a communicator with no
//   kernel left, reports nothing: a peer that exits after its last call (at
//   a job's end) is no error.  Its writes all landed before it exited, so a
//   kernel that still has data of its to read finds it without waiting.
//
// Plain C++ (no CUDA; the words are the caller's), so the CPU tests, the
// sanitizers' among them, drive it with host threads that wait as the
// kernels do.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "src/base/process_watch.h"
#include "src/base/status.h"

namespace braid::cuda {

class KernelErrors {
 public:
  // `host`: the kFlagWords words, zeroed; `device`: the same as kernels
  // reach them.  `comm_hash`, `rank` and `timeout_s` name the communicator
  // in warnings.
  void init(int* host, int* device, uint64_t comm_hash, int rank, uint64_t timeout_s);
  // Raises the abort flag when one of `peers` exits (see above).
  Status watch_peers(const std::vector<WatchedProcess>& peers);
  void release();  // before the words go: ends the watch

  int* device_words() const { return device_; }  // a launch's `error`
  const int* device_abort_flag() const;          // a launch's `abort_flag`

  void abort();   // ncclCommAbort
  void revoke();  // ncclCommRevoke
  // Ok, or what the kernels hit (warned once).
  Status poll();

 private:
  void raise_abort_flag();

  int* host_ = nullptr;  // cuda::DevFlag words
  int* device_ = nullptr;
  uint64_t comm_hash_ = 0, timeout_s_ = 0;
  int rank_ = -1;
  std::atomic<bool> revoked_{false}, warned_{false};
  std::mutex mu_;
  Status peer_exit_;  // the first peer's exit, once one was seen
  std::unique_ptr<ProcessWatch> watch_;
};

}  // namespace braid::cuda

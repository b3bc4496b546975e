// The host side of the words a communicator's kernels report through
// (src/exec/cuda/device_plan.h, DevError and DevFlag): what their error word
// says, as ncclCommGetAsyncError's answer and as a warning naming the wait
// that gave up; and the words that stop kernels waiting before BRAID_TIMEOUT
// (read every 1024 spins):
// - the abort flag, which stops every wait.  ncclCommAbort raises it (the
//   communicator is going; a stopped kernel is ncclInvalidUsage), and
//   ncclCommRevoke (in-flight work stops on purpose, which is no error).
// - one exited word per rank, raised when that rank's process exits (a
//   ProcessWatch of the ranks in other processes; threads of this one cannot
//   exit alone).  It stops only the waits for that rank, and the error is
//   ncclRemoteError naming it.  A rank may exit once its part of every call
//   is done (at a job's end, with no barrier before) while the others still
//   wait for each other: those waits go on, and all its writes landed before
//   it exited, so a wait for data it sent finds it.
//
// Plain C++ (no CUDA; the words are the caller's), so the CPU tests, the
// sanitizers' among them, drive it with host threads that wait as the
// kernels do.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/process_watch.h"
#include "src/base/status.h"
#include "src/exec/cuda/device_plan.h"

namespace braid::cuda {

class KernelErrors {
 public:
  // How many words a communicator of `nranks` needs.
  static size_t words(int nranks) { return size_t(kFlagWords) + size_t(nranks); }
  // `host`: words(nranks) words, zeroed; `device`: the same as kernels
  // reach them.  `comm_hash`, `rank` and `timeout_s` name the communicator
  // in warnings.
  void init(int* host, int* device, int nranks, uint64_t comm_hash, int rank, uint64_t timeout_s);
  // Raises a rank's exited word when its process exits (see above).
  Status watch_peers(const std::vector<WatchedProcess>& peers);
  void release();  // before the words go: ends the watch

  int* device_words() const { return device_; }  // a launch's `error`
  const int* device_abort_flag() const { return device_ + kFlagAbort; }
  const int* device_exited() const { return device_ + kFlagWords; }

  void abort();   // ncclCommAbort
  void revoke();  // ncclCommRevoke
  // Ok, or what the kernels hit (described and warned the first time).
  Status poll();

 private:
  void raise_abort_flag();
  std::string describe(int code) const;

  int* host_ = nullptr;  // cuda::DevFlag words, then the exited words
  int* device_ = nullptr;
  int nranks_ = 0;
  uint64_t comm_hash_ = 0, timeout_s_ = 0;
  int rank_ = -1;
  std::atomic<bool> revoked_{false}, warned_{false};
  std::unique_ptr<ProcessWatch> watch_;
};

}  // namespace braid::cuda

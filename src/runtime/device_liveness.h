// What the device communicators of one communicator know of its health,
// and what they tell kernels through the abortFlag of 2.29's and 2.30's
// ncclDevComm.
//
// Those headers' waits (signals, counters, GIN flushes, LSA and GIN
// barriers) read *abortFlag every 10000 spins and stop waiting once it is
// not 0.  NCCL leaves it NULL in the devComms users create, so a kernel
// waiting there for a peer that is gone spins forever.  braid points it at
// one word per communicator and raises it when the communicator can no
// longer complete: a GIN proxy's fault (a malformed descriptor, a peer over
// TCP that died), an LSA peer's process exiting, and ncclCommAbort and
// ncclCommRevoke, which stop in-flight work.  The kernel then runs on with
// what its waits had, and ncclCommGetAsyncError says why (a fault; an abort
// or revoke is no error of the communicator's).  2.28.9's devComm has no such field: there a faulted GIN proxy
// drains its queues, so posting kernels do not hang, but a wait for a signal
// that never comes still spins until the host tears the context down.
//
// LSA peers in other processes are watched (src/base/process_watch.h; no
// thread when every LSA peer is a thread of this process, which cannot exit
// alone) while a devComm lives: DeviceComms ends its DeviceLiveness with
// the last one.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "src/base/process_watch.h"
#include "src/base/status.h"
#include "src/exec/device_api_memory.h"

namespace braid {

class DeviceLiveness {
 public:
  // The word, zeroed and reachable from the device, and the watch of
  // `peers` (a peer whose process cannot be watched is logged and skipped).
  static Status create(DeviceApiMemory& memory, const std::vector<WatchedProcess>& peers,
                       std::unique_ptr<DeviceLiveness>* out);
  ~DeviceLiveness();  // stops the watch; the word goes with it
  DeviceLiveness(const DeviceLiveness&) = delete;
  DeviceLiveness& operator=(const DeviceLiveness&) = delete;

  // What a devComm's abortFlag holds: the word as the device reaches it.
  uint32_t* device_flag() const { return device_word_; }
  // A fault: raises the word, keeping the first reason (any thread).
  void raise(const Status& why);
  // A deliberate stop (ncclCommAbort, ncclCommRevoke): raises the word,
  // with no fault to report.
  void stop() { __atomic_store_n(word_, uint32_t(1), __ATOMIC_RELEASE); }
  // The first fault (ok while there is none).
  Status reason() const;

 private:
  explicit DeviceLiveness(DeviceApiMemory& memory) : memory_(memory) {}

  DeviceApiMemory& memory_;
  uint32_t* word_ = nullptr;         // host memory, one page
  uint32_t* device_word_ = nullptr;  // the same, as the device reaches it
  bool registered_ = false;
  std::atomic<bool> raised_{false};
  mutable std::mutex mu_;
  Status first_;
  std::unique_ptr<ProcessWatch> watch_;  // last: it ends before what it raises goes
};

}  // namespace braid

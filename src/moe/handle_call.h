// What a call of a MoE or AlltoAllv handle holds while it runs (dispatch,
// combine, braidAlltoAllv, destroy): the handle, one thread at a time, and
// its communicator (src/shim/library_use.h: an Abort or Destroy from another
// thread waits for the call instead of unmapping the windows under it).
//
// One thread at a time: two calls at once would race on the handle's
// epochs and buffers, and their peers would see the words of neither call
// (a timeout that names this rank itself, an argument error on a peer).
#pragma once

#include <atomic>

#include "nccl.h"
#include "src/base/status.h"
#include "src/shim/library_use.h"

namespace braid::moe {

class HandleCall {
 public:
  HandleCall(std::atomic<bool>* busy, ncclComm* comm)
      : busy_(busy), held_(!busy->exchange(true, std::memory_order_acquire)), use_(comm) {}
  ~HandleCall() {
    if (held_) busy_->store(false, std::memory_order_release);
  }
  HandleCall(const HandleCall&) = delete;
  HandleCall& operator=(const HandleCall&) = delete;

  // A call that runs the protocol: the handle is free and the communicator
  // can take work (not aborted, destroyed or revoked).
  Status check(const char* call) const {
    BRAID_TRY(check_free(call));
    return use_.check(call);
  }
  // Destroy: the handle is free and no group is open (its barrier and the
  // frees cannot be deferred); the communicator's state is close()'s.
  Status check_destroy(const char* call) const {
    BRAID_TRY(check_free(call));
    return check_outside_group(call);
  }

 private:
  Status check_free(const char* call) const {
    if (held_) return Status::ok();
    return BRAID_ERROR(ncclInvalidUsage, "{}: another thread is in a call on this handle (a handle's calls run one "
                       "at a time)", call);
  }

  std::atomic<bool>* busy_;
  const bool held_;
  LibraryUse use_;
};

}  // namespace braid::moe

// What braid's own libraries over the public API (MoE dispatch/combine, the
// device-count AlltoAllv) need of a communicator beyond NCCL's calls.
//
// A call of such a handle stores through the peers' windows this process
// maps; an Abort or Destroy of the communicator from another thread (a
// watchdog's) unmaps them.  So the call holds the communicator for its
// whole run, as braid's own calls do (CommUse: the Abort waits for it), and
// its waits end when the communicator is aborted or revoked, so that the
// Abort does not wait out the handle's timeout.
#pragma once

#include "nccl.h"
#include "src/base/status.h"
#include "src/shim/api.h"

namespace braid {

class LibraryUse {
 public:
  explicit LibraryUse(ncclComm* comm) : comm_(comm), use_(comm) {}
  // The communicator can take work: live; not aborted, finalized, revoked
  // or suspended; its init done.
  Status check(const char* call) const;

 private:
  ncclComm* comm_;
  CommUse use_;
};

// A group is open on this thread (ncclGroupStart without its End): calls
// that complete before they return refuse it, since the group would defer
// their collective and RMA steps past the caller's buffers and frames.
Status check_outside_group(const char* call);

// The communicator was aborted or revoked (the backends' `stop`): a wait of
// a handle's call ends then, with stopped_error().
bool comm_stopping(const ncclComm* comm);
Status stopped_error(const char* call);

// Revoked (ncclCommRevoke) but live: no new work, destroy only.
bool comm_revoked(const ncclComm* comm);

}  // namespace braid

#include "src/shim/library_use.h"

#include "src/runtime/group.h"

namespace braid {

Status LibraryUse::check(const char* call) const {
  return check_usable(use_, comm_).context(call);
}

Status check_outside_group(const char* call) {
  if (!group_active()) return Status::ok();
  return BRAID_ERROR(ncclInvalidUsage, "{}: called inside a group (ncclGroupStart): it completes before it returns, "
                     "which a group would defer past the caller's buffers; call it outside", call);
}

bool comm_stopping(const ncclComm* comm) { return comm->stop.load(std::memory_order_relaxed); }

Status stopped_error(const char* call) {
  return BRAID_ERROR(ncclInvalidUsage, "{}: communicator aborted or revoked", call);
}

bool comm_revoked(const ncclComm* comm) { return comm->revoked.load(std::memory_order_relaxed); }

}  // namespace braid

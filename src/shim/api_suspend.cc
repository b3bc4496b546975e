// Entry points of NCCL 2.29's memory offload: ncclCommSuspend,
// ncclCommResume and ncclCommMemStats.
//
// Suspend releases what the communicator allocated to move data: the
// transport's connections (shared-memory slot rings, socket staging), the
// backend's boards, scratch and one-sided connections, and on a GPU its
// device FIFOs and plan memory.  What stays is the bootstrap, the plan
// cache (schedules and their records) and the user's registrations and
// windows.  Resume makes new connections and a new backend as init made
// them (src/runtime/init.h).  Both are collective, as in NCCL (its resume
// ends in a barrier): every rank of the communicator calls them, with no
// work outstanding.  NCCL's statistics say "Gpu": braid counts the memory
// of the communicator's backend, host memory on the host backend.
#include "src/runtime/group.h"
#include "src/runtime/init.h"
#include "src/shim/api.h"

using namespace braid;

namespace {

Status check_quiet(const CommUse& use, ncclComm* comm, const char* function) {
  BRAID_TRY(check_comm(use, comm));
  if (comm->revoked) return BRAID_ERROR(ncclInvalidUsage, "communicator was revoked");
  if (group_active())
    return BRAID_ERROR(ncclInvalidUsage, "{} inside a group is not supported by braid (call it outside)", function);
  return wait_initialized(comm);
}

}  // namespace

BRAID_API ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
  return guarded(comm, "ncclCommSuspend", [&] {
    CommUse use(comm);
    BRAID_TRY(check_quiet(use, comm, "ncclCommSuspend"));
    if (flags & ~NCCL_SUSPEND_MEM)
      return BRAID_ERROR(ncclInvalidArgument, "flags {:#x} (expected 0 or NCCL_SUSPEND_MEM)", flags);
    if (!(flags & NCCL_SUSPEND_MEM) || comm->suspended) return Status::ok();  // nothing (more) to release
    BRAID_TRY(comm_release_buffers(comm));
    comm->suspended = true;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommSuspend, (ncclComm_t, int))

BRAID_API ncclResult_t ncclCommResume(ncclComm_t comm) {
  return guarded(comm, "ncclCommResume", [&] {
    CommUse use(comm);
    BRAID_TRY(check_quiet(use, comm, "ncclCommResume"));
    if (!comm->suspended) return Status::ok();
    // Its exchanges (transports, backend, windows) are in step only if every
    // rank makes all of them: a failure midway breaks the communicator.
    if (Status s = comm_restore_buffers(comm); !s.is_ok()) {
      break_comm(comm, s);
      return s;
    }
    comm->suspended = false;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommResume, (ncclComm_t))

BRAID_API ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  return guarded(comm, "ncclCommMemStats", [&] {
    CommUse use(comm);
    BRAID_TRY(check_comm(use, comm));
    if (!value) return BRAID_ERROR(ncclInvalidArgument, "value pointer is NULL");
    BRAID_TRY(wait_initialized(comm));  // the backend is not changing under us
    const MemoryHeld m = comm_memory(comm);
    switch (int(stat)) {
      case ncclStatGpuMemSuspend: *value = m.releasable; break;
      case ncclStatGpuMemSuspended: *value = comm->suspended ? 1 : 0; break;
      case ncclStatGpuMemPersist: *value = m.persistent; break;
      case ncclStatGpuMemTotal: *value = m.releasable + m.persistent; break;
      default:
        return BRAID_ERROR(ncclInvalidArgument, "stat {} is not an ncclCommMemStat_t (0..3)", int(stat));
    }
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommMemStats, (ncclComm_t, ncclCommMemStat_t, uint64_t*))

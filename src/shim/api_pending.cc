// Entry points that exist for ABI completeness.
//
// Some are fully real on the host backend (host memory allocation, the team
// queries of the device API).  The rest (split/shrink/revoke, scalable init,
// registration, windows, PreMulSum, group simulation, device communicators)
// are not implemented yet: they return ncclInvalidUsage with a message naming
// the function, never a fake success.
#include <cstdlib>
#include <mutex>
#include <set>

#include "src/core/group.h"
#include "src/shim/api.h"

using namespace braid;

namespace {

Status not_yet(const char* function) {
  return BRAID_ERROR(ncclInvalidUsage, "{} is not supported by this braid build yet (host backend, API subset)",
                     function);
}

std::mutex alloc_mutex;
std::set<void*>& allocations() {
  static auto* live = new std::set<void*>;
  return *live;
}

}  // namespace

// --- Memory: the host backend's buffers are host memory, page aligned so they
// meet NCCL_WIN_REQUIRED_ALIGNMENT for later window registration.
BRAID_API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guarded(nullptr, "ncclMemAlloc", [&] {
    if (!ptr) return BRAID_ERROR(ncclInvalidArgument, "ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return BRAID_ERROR(ncclInvalidArgument, "size is 0");
    void* p = nullptr;
    if (posix_memalign(&p, NCCL_WIN_REQUIRED_ALIGNMENT, size) != 0)
      return BRAID_ERROR(ncclSystemError, "cannot allocate {} bytes of host memory", size);
    std::lock_guard<std::mutex> lock(alloc_mutex);
    allocations().insert(p);
    *ptr = p;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))

BRAID_API ncclResult_t ncclMemFree(void* ptr) {
  return guarded(nullptr, "ncclMemFree", [&] {
    if (!ptr) return Status::ok();
    std::lock_guard<std::mutex> lock(alloc_mutex);
    if (allocations().erase(ptr) == 0)
      return BRAID_ERROR(ncclInvalidArgument, "{} was not allocated by ncclMemAlloc", ptr);
    std::free(ptr);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclMemFree, (void* ptr))

// --- Not implemented yet.
BRAID_API ncclResult_t ncclCommInitRankScalable(ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*) {
  return guarded(nullptr, "ncclCommInitRankScalable", [] { return not_yet("ncclCommInitRankScalable"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommInitRankScalable,
                      (ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*))

BRAID_API ncclResult_t ncclCommSplit(ncclComm_t comm, int, int, ncclComm_t* newcomm, ncclConfig_t*) {
  if (newcomm) *newcomm = nullptr;
  return guarded(comm, "ncclCommSplit", [] { return not_yet("ncclCommSplit"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommSplit, (ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*))

BRAID_API ncclResult_t ncclCommShrink(ncclComm_t comm, int*, int, ncclComm_t* newcomm, ncclConfig_t*, int) {
  if (newcomm) *newcomm = nullptr;
  return guarded(comm, "ncclCommShrink", [] { return not_yet("ncclCommShrink"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommShrink, (ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int))

BRAID_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int) {
  return guarded(comm, "ncclCommRevoke", [] { return not_yet("ncclCommRevoke"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t, int))

BRAID_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void*, size_t, void** handle) {
  if (handle) *handle = nullptr;
  return guarded(comm, "ncclCommRegister", [] { return not_yet("ncclCommRegister"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommRegister, (const ncclComm_t, void*, size_t, void**))

BRAID_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void*) {
  return guarded(comm, "ncclCommDeregister", [] { return not_yet("ncclCommDeregister"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t, void*))

BRAID_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void*, size_t, ncclWindow_t* win, int) {
  if (win) *win = nullptr;
  return guarded(comm, "ncclCommWindowRegister", [] { return not_yet("ncclCommWindowRegister"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommWindowRegister, (ncclComm_t, void*, size_t, ncclWindow_t*, int))

BRAID_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t) {
  return guarded(comm, "ncclCommWindowDeregister", [] { return not_yet("ncclCommWindowDeregister"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t, ncclWindow_t))

BRAID_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void*, ncclDataType_t, ncclScalarResidence_t,
                                                ncclComm_t comm) {
  return guarded(comm, "ncclRedOpCreatePreMulSum", [&] {
    if (!op) return BRAID_ERROR(ncclInvalidArgument, "op pointer is NULL");
    return not_yet("ncclRedOpCreatePreMulSum");
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclRedOpCreatePreMulSum,
                      (ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t))

BRAID_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded(comm, "ncclRedOpDestroy", [&] {
    BRAID_TRY(check_comm(comm));
    if (int(op) >= 0 && op < ncclNumOps)
      return BRAID_ERROR(ncclInvalidArgument, "op {} is a built-in reduction and cannot be destroyed", int(op));
    // No op can have been created (PreMulSum is not available yet).
    return BRAID_ERROR(ncclInvalidArgument, "op {} was not created on this communicator", int(op));
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t, ncclComm_t))

BRAID_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  return guarded(nullptr, "ncclGroupSimulateEnd", [] { return not_yet("ncclGroupSimulateEnd"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t*))

// NCCL exports this internal helper too; it re-reads the debug settings.
BRAID_API void ncclResetDebugInitInternal() { log_reset(); }

// Helpers shared by the C entry points.
//
// Every entry point runs its body through `guarded`, which turns a Status
// into an ncclResult_t, records the message for ncclGetLastError, prints it
// at NCCL_DEBUG=WARN, and catches anything thrown so no exception crosses
// the C ABI.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "nccl.h"
#include "src/core/comm.h"
#include "src/core/log.h"
#include "src/core/status.h"

#define BRAID_API extern "C" __attribute__((visibility("default")))

// Defines pnccl<Name> as an alias of nccl<Name> (NCCL's profiling interface).
#define BRAID_PROFILING_ALIAS(ret, name, params) \
  BRAID_API ret p##name params __attribute__((alias(#name)));

namespace braid {

// The process-wide last error (ncclGetLastError(NULL)).
void set_global_last_error(const std::string& message);
std::string global_last_error();

ncclResult_t report(ncclComm* comm, const char* function, Status status);

template <class Body>
ncclResult_t guarded(ncclComm* comm, const char* function, Body&& body) noexcept {
  try {
    return report(comm, function, body());
  } catch (const std::bad_alloc&) {
    return report(comm, function, BRAID_ERROR(ncclSystemError, "out of host memory"));
  } catch (const std::exception& e) {
    return report(comm, function, BRAID_ERROR(ncclInternalError, "unexpected exception: {}", e.what()));
  } catch (...) {
    return report(comm, function, BRAID_ERROR(ncclInternalError, "unexpected exception"));
  }
}

// Argument checks shared by the entry points (NCCL's codes and wording).
Status check_comm(const ncclComm* comm);
Status check_type(ncclDataType_t type);
Status check_op(ncclRedOp_t op);
Status check_root(const ncclComm* comm, int root);
Status check_buffer(const void* buffer, const char* name, size_t count);

// Folds an error the device reported since the last look into the
// communicator's async error (device backends fail asynchronously).
void poll_device_error(ncclComm* comm);

}  // namespace braid

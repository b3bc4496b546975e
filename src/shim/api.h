// Helpers shared by the C entry points.
//
// Every entry point runs its body through `guarded`, which turns a Status
// into an ncclResult_t, records the message for ncclGetLastError, prints it
// at NCCL_DEBUG=WARN, and catches anything thrown so no exception crosses
// the C ABI.
#pragma once

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "nccl.h"
#include "src/runtime/comm.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/ops/datatype.h"

#define BRAID_API extern "C" __attribute__((visibility("default")))

// Defines pnccl<Name> as an alias of nccl<Name> (NCCL's profiling interface).
#define BRAID_PROFILING_ALIAS(ret, name, params) \
  BRAID_API ret p##name params __attribute__((alias(#name)));

namespace braid {

// The process-wide last error (ncclGetLastError(NULL)).
void set_global_last_error(const std::string& message);
std::string global_last_error();

// An entry point's result: its code, and for an error the message
// recorded and printed (report_error, out of line).
ncclResult_t report_error(ncclComm* comm, const char* function, const Status& status);
// `code` as the caller of `function` on `comm` may see it: ncclTimeout
// (2.29) is ncclSystemError for a caller that may have 2.28's header.
ncclResult_t result_for_caller(const ncclComm* comm, const char* function, ncclResult_t code);
inline ncclResult_t report(ncclComm* comm, const char* function, const Status& status) {
  return status.is_ok() ? ncclSuccess : report_error(comm, function, status);
}

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
// The common checks pass inline; their errors are built out of line.
Status check_comm(const ncclComm* comm);
Status type_error(ncclDataType_t type);
inline Status check_type(ncclDataType_t type) {
  return int(type) >= 0 && type < ncclNumTypes ? Status::ok() : type_error(type);
}
// A built-in op, or a PreMulSum op created on this comm for this datatype.
Status check_user_op(const ncclComm* comm, ncclRedOp_t op, ncclDataType_t type);
inline Status check_op(const ncclComm* comm, ncclRedOp_t op, ncclDataType_t type) {
  return int(op) >= 0 && op < ncclNumOps ? Status::ok() : check_user_op(comm, op, type);
}
// The members every versioned NCCL struct (ncclConfig_t, ncclCollConfig_t,
// ncclEncryptionConfig_t, ncclCommProperties) begins with, as the caller's
// release wrote them: they say how much of the rest its struct has.
struct VersionedHeader {
  size_t size = 0;
  unsigned magic = 0, version = 0;
};
template <class T>
VersionedHeader versioned_header(const T* user) {
  VersionedHeader h;
  std::memcpy(&h.size, &user->size, sizeof(h.size));
  std::memcpy(&h.magic, &user->magic, sizeof(h.magic));
  std::memcpy(&h.version, &user->version, sizeof(h.version));
  return h;
}

// A caller's ncclConfig_t of any release since 2.14, read into this
// library's struct (src/shim/api_config.cc): the members the caller's header
// had, the rest at their defaults.  NULL reads as NCCL_CONFIG_INITIALIZER.
Status read_config(const ncclConfig_t* user, ncclConfig_t* out);
// NCCL's environment overrides of a communicator's config, as NCCL applies
// them to every new communicator (its envConfigOverride), for the members
// braid acts on: NCCL_COMM_BLOCKING (0 or 1) sets blocking, whatever the
// config said, and NCCL_NUM_RMA_CTX (1 or more) numRmaCtx.  NCCL_NET, which
// overrides netName, is read with the transports (transport_policy.h).
void apply_nccl_env_to_config(ncclConfig_t* config);
Status check_config(const ncclConfig_t* config);
// The same for ncclCollConfig_t (2.31 and 2.32 structs).
Status read_coll_config(const ncclCollConfig_t* user, ncclCollConfig_t* out);

// Creates a communicator (ncclCommInitRank*, Split, Shrink): checks, queues
// the init in the calling thread's group.  ncclInProgress (a non-blocking
// config) leaves *out set; the init then completes in the background.
// scalable_ids non-empty: ncclCommInitRankScalable's roots (id is unused).
// `parent` (Split, Shrink, Grow): while the call runs the new communicator
// is in parent->deriving, so that an abort of the parent stops its init.
Status init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config,
                 const std::vector<ncclUniqueId>& scalable_ids = {}, ncclComm* parent = nullptr);
// Frees a communicator nothing runs on any more.
void destroy_comm(ncclComm* comm);

// RAII use of a communicator by one API call: an Abort or Destroy from
// another thread does not free it before the call returns (comm_wait_idle).
class CommUse {
 public:
  explicit CommUse(ncclComm* comm) : use_(live_comms(), comm) {}
  bool ok() const { return use_.live(); }

 private:
  LiveComms::Use use_;
};
// check_comm for the communicator `use` holds: acquiring it already looked
// it up among the live ones (one registry lookup per call, not two).
Status comm_error(const ncclComm* comm, bool live);
inline Status check_comm(const CommUse& use, const ncclComm* comm) {
  return use.ok() && !comm->aborting && !comm->finalized ? Status::ok() : comm_error(comm, use.ok());
}
// For the attribute queries (ncclCommCount, UserRank, CuDevice): live and
// not aborted; a finalized communicator still answers them, as NCCL's does.
inline Status check_attributes(const CommUse& use, const ncclComm* comm) {
  return use.ok() && !comm->aborting ? Status::ok() : comm_error(comm, use.ok());
}
// A communicator whose init is over and succeeded, and that has no
// asynchronous error: its bootstrap, transport and backend exist (what a
// call that takes work needs; NCCL's ncclCommEnsureReady).
Status check_initialized(ncclComm* comm);
// For calls that need only what init made (its bootstrap, its backend):
// waits for the communicator's background work (a non-blocking init or
// group), then fails where its init failed or has not run.
Status wait_initialized(ncclComm* comm);
// A communicator that can take work: live, not aborted, finalized,
// revoked or suspended, and without an earlier asynchronous error.
Status check_usable(const CommUse& use, ncclComm* comm);
Status root_error(const ncclComm* comm, int root);
inline Status check_root(const ncclComm* comm, int root) {
  return root >= 0 && root < comm->nranks ? Status::ok() : root_error(comm, root);
}
Status null_buffer_error(const char* name, size_t count);
// `count` elements of `type`, `blocks` times over (a rank's blocks of a
// collective's buffers), must be bytes a call can address: a count that
// wraps (NCCL does not check) would run as a small call on wrong data.
Status count_error(size_t count, ncclDataType_t type, uint64_t blocks);
inline Status check_count(size_t count, ncclDataType_t type, uint64_t blocks) {  // after check_type
  const uint64_t most = (uint64_t(1) << 62) / std::max<uint64_t>(datatype_size(type), 1) / std::max<uint64_t>(blocks, 1);
  return uint64_t(count) <= most ? Status::ok() : count_error(count, type, blocks);
}
inline Status check_buffer(const void* buffer, const char* name, size_t count) {
  return buffer || count == 0 ? Status::ok() : null_buffer_error(name, count);
}
// NCCL_CHECK_MODE's local check (comm->check_pointers) of a host
// communicator's buffer of `blocks` x `block_bytes`: mapped memory of this
// process (a size past the address space is not).
Status check_mapped(const ncclComm* comm, const void* buffer, const char* name, uint64_t block_bytes,
                    uint64_t blocks);

// Folds an error the backend reported since the last look into the
// communicator's async error (device backends fail asynchronously).  On the
// communicator's own thread, where nothing swaps the backend meanwhile (a
// call per collective: no lock).
void poll_backend_error(ncclComm* comm);
// The same from ncclCommGetAsyncError, which a watchdog thread may call
// while the owner suspends or resumes: under backend_mutex.
void poll_backend_error_from_any_thread(ncclComm* comm);

}  // namespace braid

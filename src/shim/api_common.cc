#include <algorithm>
#include <iterator>
#include <mutex>
#include <string_view>

#include "src/base/mapped_memory.h"
#include "src/runtime/device_comm.h"
#include "src/shim/api.h"

namespace braid {
namespace {
std::mutex last_error_mutex;
std::string& last_error_storage() {
  static auto* s = new std::string;  // outlives static destruction (atexit users)
  return *s;
}
}  // namespace

void set_global_last_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(last_error_mutex);
  last_error_storage() = message;
}

std::string global_last_error() {
  std::lock_guard<std::mutex> lock(last_error_mutex);
  return last_error_storage();
}

namespace {

// The functions of NCCL 2.28's header (REFERENCE.md section 1).  Their
// callers may have been built against it.
constexpr std::string_view kNccl228Functions[] = {
    "ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitRankScalable",
    "ncclCommInitAll", "ncclCommFinalize", "ncclCommDestroy", "ncclCommAbort", "ncclCommRevoke", "ncclCommShrink",
    "ncclCommSplit", "ncclCommGetAsyncError", "ncclCommCount", "ncclCommCuDevice", "ncclCommUserRank",
    "ncclCommRegister", "ncclCommDeregister", "ncclCommWindowRegister", "ncclCommWindowDeregister", "ncclMemAlloc",
    "ncclMemFree", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclAllReduce", "ncclBroadcast", "ncclBcast",
    "ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclGather", "ncclScatter", "ncclSend",
    "ncclRecv", "ncclGroupStart", "ncclGroupEnd", "ncclGroupSimulateEnd"};

}  // namespace

ncclResult_t result_for_caller(const ncclComm* comm, const char* function, ncclResult_t code) {
  if (code != ncclTimeout) return code;
  // Only a 2.29 header or later has ncclTimeout: a function it introduced,
  // or a communicator whose config came from such a header.
  if (std::find(std::begin(kNccl228Functions), std::end(kNccl228Functions), function) ==
      std::end(kNccl228Functions))
    return code;
  unsigned version = 0;
  if (comm) comm_if_live(const_cast<ncclComm*>(comm), [&](ncclComm* c) { version = c->client_version; });
  return version >= NCCL_VERSION(2, 29, 0) ? code : ncclSystemError;
}

ncclResult_t report_error(ncclComm* comm, const char* function, const Status& status) {
  if (status.code() == ncclInProgress) return status.code();
  // Named once: many messages already start with the function's name.
  const std::string text = status.to_string(), prefix = fmt::format("{}: ", function);
  const std::string message = text.rfind(prefix, 0) == 0 ? text : prefix + text;
  BRAID_WARN("{}", message);
  set_global_last_error(message);
  if (comm) comm_if_live(comm, [&](ncclComm* c) {
      std::lock_guard<std::mutex> lock(c->error_mutex);
      c->last_error = message;
    });
  return result_for_caller(comm, function, status.code());
}

Status comm_error(const ncclComm* comm, bool live) {
  if (!comm) return BRAID_ERROR(ncclInvalidArgument, "comm argument is NULL");
  if (!live) return BRAID_ERROR(ncclInvalidArgument, "comm {} is not a live communicator (destroyed?)",
                                static_cast<const void*>(comm));
  if (comm->aborting) return BRAID_ERROR(ncclInvalidUsage, "communicator was aborted");
  if (comm->finalized) return BRAID_ERROR(ncclInvalidUsage, "communicator was finalized");
  return Status::ok();
}

Status check_comm(const ncclComm* comm) { return comm_error(comm, comm_is_live(comm)); }

Status check_initialized(ncclComm* comm) {
  const ncclResult_t async = ncclResult_t(comm->async_error.load());
  if (async != ncclSuccess)
    return Status::error(async, fmt::format("communicator has an earlier asynchronous error ({}); abort and recreate it",
                                            async_cause(comm)));
  if (!comm->ready.load(std::memory_order_acquire))  // NCCL's ncclCommEnsureReady says the same
    return BRAID_ERROR(ncclInvalidArgument, "communicator used before its init finished (a non-blocking init that "
                       "returned ncclInProgress, or an init queued in the open group): wait until "
                       "ncclCommGetAsyncError says ncclSuccess");
  return Status::ok();
}

Status wait_initialized(ncclComm* comm) {
  BRAID_TRY(comm_wait_job(comm));
  if (comm->ready.load(std::memory_order_acquire)) return Status::ok();
  const ncclResult_t async = ncclResult_t(comm->async_error.load());
  if (async != ncclSuccess)
    return Status::error(async, fmt::format("the communicator's init failed ({})", async_cause(comm)));
  return BRAID_ERROR(ncclInvalidArgument, "communicator used before its init finished (an init queued in the open "
                     "group): end the group first");
}

Status count_error(size_t count, ncclDataType_t type, uint64_t blocks) {
  return BRAID_ERROR(ncclInvalidArgument, "count {} of {}-byte elements{} is more than 2^62 bytes: no call can address "
                     "them", count, datatype_size(type), blocks > 1 ? fmt::format(", {} blocks of it", blocks) : "");
}

Status type_error(ncclDataType_t type) {
  return BRAID_ERROR(ncclInvalidArgument, "invalid datatype {} (valid: 0..{})", int(type), int(ncclNumTypes) - 1);
}

Status check_user_op(const ncclComm* comm, ncclRedOp_t op, ncclDataType_t type) {
  auto it = comm->user_ops.find(int(op));
  if (int(op) < 0 || it == comm->user_ops.end())
    return BRAID_ERROR(ncclInvalidArgument,
                       "invalid reduction op {} (not a built-in op, nor one created on this communicator, or destroyed)",
                       int(op));
  if (it->second.type != type)
    return BRAID_ERROR(ncclInvalidArgument, "reduction op {} was created for datatype {}, used with datatype {}",
                       int(op), int(it->second.type), int(type));
  return Status::ok();
}

Status root_error(const ncclComm* comm, int root) {
  return BRAID_ERROR(ncclInvalidArgument, "root {} out of range [0, {})", root, comm->nranks);
}

Status null_buffer_error(const char* name, size_t count) {
  return BRAID_ERROR(ncclInvalidArgument, "{} is NULL with count {}", name, count);
}

Status check_mapped(const ncclComm* comm, const void* buffer, const char* name, uint64_t block_bytes,
                    uint64_t blocks) {
  if (!comm->check_pointers || comm->cuda_device >= 0 || !buffer) return Status::ok();
  uint64_t bytes = 0;
  const bool overflows = __builtin_mul_overflow(block_bytes, blocks, &bytes);
  if (!overflows && range_is_mapped(buffer, bytes)) return Status::ok();
  return BRAID_ERROR(ncclInvalidArgument, "{} {} (+{} bytes) is not mapped memory of this process "
                     "(NCCL_CHECK_MODE's local check)", name, buffer, bytes);
}

void poll_backend_error(ncclComm* comm) {
  if (!comm->ready.load(std::memory_order_acquire)) return;  // a non-blocking init is still running
  if (!comm->backend) return;  // suspended: nothing runs
  Status error = comm->backend->poll_error();
  if (error.is_ok() && comm->dev_comms) error = comm->dev_comms->fault();  // a GIN proxy's
  if (!set_async_error(comm, error)) return;
  std::lock_guard<std::mutex> lock(comm->error_mutex);  // ncclGetLastError(comm) says why, as for a failed call
  comm->last_error = fmt::format("ncclCommGetAsyncError: {}", error.to_string());
}

void poll_backend_error_from_any_thread(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(comm->backend_mutex);
  poll_backend_error(comm);
}

}  // namespace braid

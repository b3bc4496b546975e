// Entry points: versions, unique ids, communicator life cycle and queries.
#include <cstdio>
#include <cstring>
#include <thread>

#include "src/base/env.h"
#include "src/base/env_plugin.h"
#include "src/base/log.h"
#include "src/bootstrap/bootstrap_wire.h"
#include "src/runtime/device_comm.h"
#include "src/runtime/group.h"
#include "src/shim/api.h"

using namespace braid;

namespace braid {

namespace {

// Every wait's bound: a value that would make every wait fail at once (0 or
// less) or overflow in milliseconds is refused at init, not obeyed.
Status check_timeout_setting() {
  constexpr int64_t kMostSeconds = int64_t(1) << 31;
  const std::optional<int64_t> seconds = env_number("BRAID_TIMEOUT");
  if (env_is_set("BRAID_TIMEOUT") && (!seconds || *seconds < 1 || *seconds > kMostSeconds))
    return BRAID_ERROR(ncclInvalidArgument, "BRAID_TIMEOUT={} must be a whole number of seconds in [1, {}]",
                       env_string("BRAID_TIMEOUT"), kMostSeconds);
  return Status::ok();
}

}  // namespace

Status init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config,
                 const std::vector<ncclUniqueId>& scalable_ids, ncclComm* parent) {
  if (!out) return BRAID_ERROR(ncclInvalidArgument, "comm pointer is NULL");
  *out = nullptr;
  BRAID_TRY(env_plugin_status());
  if (nranks < 1 || nranks > wire::kMaxRanks)
    return BRAID_ERROR(ncclInvalidArgument, "nranks {} must be in [1, {}]", nranks, wire::kMaxRanks);
  BRAID_TRY(check_timeout_setting());
  if (rank < 0 || rank >= nranks) return BRAID_ERROR(ncclInvalidArgument, "rank {} out of range [0, {})", rank, nranks);
  ncclConfig_t read;
  BRAID_TRY(read_config(config, &read));
  apply_nccl_env_to_config(&read);
  auto comm = std::make_unique<ncclComm>();
  if (read.netName) comm->net_name = read.netName;
  InitCall call;
  call.comm = comm.get();
  call.id = id;
  call.scalable_ids = scalable_ids;
  comm->config = read;  // this library's struct, whatever release the caller's came from
  if (config) std::memcpy(&comm->client_version, &config->version, sizeof(unsigned));
  // Set before the (maybe background) init starts: queries read them.
  comm->rank = rank;
  comm->nranks = nranks;
  comm_register(comm.get());
  auto deriving = [&](bool in) {
    if (!parent) return;
    std::lock_guard<std::mutex> lock(parent->deriving_mutex);
    if (in) parent->deriving.push_back(comm.get());
    else std::erase(parent->deriving, comm.get());
  };
  deriving(true);
  Status s = enqueue(call);
  deriving(false);  // before the communicator can be freed
  if (!s.is_ok() && s.code() != ncclInProgress) {
    comm_unregister(comm.get());
    return s;
  }
  *out = comm.release();
  return s;
}

void destroy_comm(ncclComm* comm) {
  log_write_later_lines();  // an env plugin's (env_plugin.h), at each end as at each start
  profiler_comm_finalize(comm);
  // A revoked, aborted or failed communicator has nothing worth draining to
  // its peers: do not let the transports wait for them on the way out.
  bool broken = comm->stop.load() || comm->async_error.load() != ncclSuccess;
  if (broken && comm->transport) comm->transport->abort();
  comm->transport.reset();
  comm->bootstrap.reset();
  delete comm;
}

}  // namespace braid

namespace {

// Frees comm once no thread runs on it.  A thread that does not let go
// within the timeout keeps the memory (leaked, with a warning) rather than
// having it freed under it.
Status retire(ncclComm* comm, const char* what) {
  int64_t timeout_ms = env_int("BRAID_TIMEOUT") * 1000 + 1000;
  if (!comm_wait_idle(comm, timeout_ms)) {
    BRAID_WARN("{}: work on comm {} did not stop within BRAID_TIMEOUT; its memory is not freed",
               what, static_cast<void*>(comm));
    return BRAID_ERROR(ncclInternalError, "{}: communicator still in use after BRAID_TIMEOUT", what);
  }
  destroy_comm(comm);
  return Status::ok();
}

// Stops everything running on comm: the executor watches `stop`, the
// transports and the bootstrap are woken from their waits.
void stop_comm(ncclComm* comm) {
  comm->aborting = true;
  comm->stop = true;
  if (comm->ready.load(std::memory_order_acquire)) {
    if (comm->dev_comms) comm->dev_comms->stop();  // releases device API waits (2.29's and 2.30's)
    if (comm->backend) comm->backend->abort();  // releases kernels waiting on peers
    if (comm->transport) comm->transport->abort();
  }
  // Also during init's exchanges after the rendezvous (before it, `stop` ends
  // the wait): sequentially consistent against agreed_setup (init.cc).
  if (comm->bootstrap_up.load()) comm->bootstrap->abort();
  // A communicator being made from this one (Split, Shrink, Grow) is
  // stopped with it, as NCCL's childAbortFlag: its init would otherwise
  // wait for ranks that will not come, holding this one's call open.
  std::lock_guard<std::mutex> lock(comm->deriving_mutex);
  for (ncclComm* child : comm->deriving) stop_comm(child);
}

}  // namespace

namespace {

// The version ncclGetVersion reports (docs/compatibility.md): the API
// level of this library's header, or BRAID_NCCL_VERSION for a client that
// requires the library to equal the header it was built with.  Only
// releases this library serves: 2.28.0 up to its own.
Status reported_version(int* version) {
  *version = NCCL_VERSION_CODE;
  const std::string text = env_string("BRAID_NCCL_VERSION");
  if (text.empty()) return Status::ok();
  int major = 0, minor = 0, patch = 0;
  char tail = 0;
  int code = -1;
  if (std::sscanf(text.c_str(), "%d.%d.%d%c", &major, &minor, &patch, &tail) == 3 && major == 2 && minor >= 0 &&
      minor < 100 && patch >= 0 && patch < 100)
    code = NCCL_VERSION(major, minor, patch);
  else if (std::sscanf(text.c_str(), "%d%c", &code, &tail) != 1)
    code = -1;
  if (code < NCCL_VERSION(2, 28, 0) || code > NCCL_VERSION_CODE)
    return BRAID_ERROR(ncclInvalidUsage, "BRAID_NCCL_VERSION={} is not a release braid serves (2.28.0 = {} to {}.{}.{} "
                       "= {})", text, NCCL_VERSION(2, 28, 0), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_VERSION_CODE);
  *version = code;
  return Status::ok();
}

}  // namespace

BRAID_API ncclResult_t ncclGetVersion(int* version) {
  return guarded(nullptr, "ncclGetVersion", [&] {
    if (!version) return BRAID_ERROR(ncclInvalidArgument, "version pointer is NULL");
    return reported_version(version);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetVersion, (int* version))

BRAID_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  return guarded(nullptr, "ncclGetUniqueId", [&] {
    if (!id) return BRAID_ERROR(ncclInvalidArgument, "uniqueId pointer is NULL");
    BRAID_TRY(env_plugin_status());
    static std::once_flag banner;
    std::call_once(banner, [] {
      BRAID_LOG(Version, kInit, "braid {}.{}.{} (NCCL API {}.{}.{}), host backend", BRAID_VERSION_MAJOR,
                BRAID_VERSION_MINOR, BRAID_VERSION_PATCH, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    });
    return bootstrap_create_root(id);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id))

BRAID_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                              ncclConfig_t* config) {
  return guarded(nullptr, "ncclCommInitRankConfig", [&] { return init_rank(comm, nranks, id, rank, config); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommInitRankConfig,
                      (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config))

BRAID_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return guarded(nullptr, "ncclCommInitRank", [&] { return init_rank(comm, nranks, id, rank, nullptr); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank))

BRAID_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return guarded(nullptr, "ncclCommInitAll", [&] {
    if (!comms) return BRAID_ERROR(ncclInvalidArgument, "comms pointer is NULL");
    if (ndev < 1) return BRAID_ERROR(ncclInvalidArgument, "ndev {} must be at least 1", ndev);
    if (devlist)
      for (int i = 0; i < ndev; ++i)
        if (devlist[i] < 0) return BRAID_ERROR(ncclInvalidArgument, "devlist[{}] = {} is not a device", i, devlist[i]);
    BRAID_TRY(env_plugin_status());
    ncclUniqueId id;
    BRAID_TRY(bootstrap_create_root(&id));
    // Every entry is this call's from here: the cleanup below must not take
    // what the caller's array held before (a live communicator) for one of them.
    std::fill(comms, comms + ndev, nullptr);
    // One group: the ranks rendezvous concurrently at its end.
    group_start();
    Status first;
    for (int i = 0; i < ndev && first.is_ok(); ++i) first = init_rank(&comms[i], ndev, id, i, nullptr);
    Status end = group_end();
    if (first.is_ok() && end.is_ok()) return Status::ok();
    for (int i = 0; i < ndev; ++i)
      if (comms[i] && comm_unregister(comms[i])) destroy_comm(comms[i]), comms[i] = nullptr;
    return first.is_ok() ? end : first;
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int* devlist))

BRAID_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded(comm, "ncclCommFinalize", [&] {
    if (!comm) return Status::ok();  // NCCL: finalizing NULL does nothing
    CommUse use(comm);
    BRAID_TRY(check_attributes(use, comm));
    // As NCCL's (ncclCommEnsureReady first): work still in progress on a
    // non-blocking communicator, or an asynchronous error, is the caller's
    // to see to; then a second finalize, or one after a revoke, is refused.
    poll_backend_error(comm);
    const ncclResult_t state = comm_async_state(comm);
    if (state == ncclInProgress)
      return BRAID_ERROR(ncclInvalidArgument, "the communicator's earlier work is still in progress: wait until "
                         "ncclCommGetAsyncError says ncclSuccess");
    if (state != ncclSuccess)
      return Status::error(state, fmt::format("communicator has an asynchronous error ({}); abort it",
                                              async_cause(comm)));
    if (comm->revoked) return BRAID_ERROR(ncclInvalidArgument, "ncclCommFinalize after ncclCommRevoke is invalid");
    if (comm->finalized) return BRAID_ERROR(ncclInvalidArgument, "communicator was finalized already");
    comm->finalized = true;
    comm->ras.finalize_called = true;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))

BRAID_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guarded(nullptr, "ncclCommDestroy", [&] {
    if (!comm) return Status::ok();  // NCCL: destroying NULL does nothing
    // As NCCL's (ncclCommEnsureReady): a non-blocking communicator whose
    // init, group or revoke is still in progress is refused at once, and
    // stays usable; ncclCommAbort is the way to drop it now.
    if (CommUse use(comm); use.ok() && comm_async_state(comm) == ncclInProgress)
      return BRAID_ERROR(ncclInvalidArgument, "the communicator's earlier work is still in progress: wait until "
                         "ncclCommGetAsyncError says it is done, or ncclCommAbort it");
    if (!comm_unregister(comm))
      return BRAID_ERROR(ncclInvalidArgument, "comm {} is not a live communicator (destroyed twice?)",
                         static_cast<void*>(comm));
    comm->ras.destroy_called = true;
    // Calls on it from other threads finish first; if they cannot, they are stopped.
    if (!comm_wait_idle(comm, env_int("BRAID_TIMEOUT") * 1000 + 1000)) stop_comm(comm);
    return retire(comm, "ncclCommDestroy");
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

BRAID_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guarded(nullptr, "ncclCommAbort", [&] {
    if (!comm) return Status::ok();  // NCCL: aborting NULL is a no-op
    if (!comm_unregister(comm))
      return BRAID_ERROR(ncclInvalidArgument, "comm {} is not a live communicator", static_cast<void*>(comm));
    stop_comm(comm);
    return retire(comm, "ncclCommAbort");
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))

BRAID_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return guarded(comm, "ncclCommCount", [&] {
    CommUse use(comm);
    BRAID_TRY(check_attributes(use, comm));
    if (!count) return BRAID_ERROR(ncclInvalidArgument, "count pointer is NULL");
    *count = comm->nranks;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))

BRAID_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guarded(comm, "ncclCommUserRank", [&] {
    CommUse use(comm);
    BRAID_TRY(check_attributes(use, comm));
    if (!rank) return BRAID_ERROR(ncclInvalidArgument, "rank pointer is NULL");
    *rank = comm->rank;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))

BRAID_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guarded(comm, "ncclCommCuDevice", [&] {
    CommUse use(comm);
    BRAID_TRY(check_attributes(use, comm));
    if (!device) return BRAID_ERROR(ncclInvalidArgument, "device pointer is NULL");
    *device = comm->cuda_device;  // -1: a host-backend communicator has no CUDA device
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))

BRAID_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  return guarded(comm, "ncclCommGetAsyncError", [&] {
    if (!comm) return BRAID_ERROR(ncclInvalidArgument, "comm argument is NULL");
    CommUse use(comm);  // an Abort from another thread (a watchdog polls this one) waits for this call
    if (!use.ok()) return BRAID_ERROR(ncclInvalidArgument, "comm is not a live communicator");
    if (!error) return BRAID_ERROR(ncclInvalidArgument, "asyncError pointer is NULL");
    poll_backend_error_from_any_thread(comm);
    *error = result_for_caller(comm, "ncclCommGetAsyncError", comm_async_state(comm));
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * error))

BRAID_API const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the braid developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "timeout (a wait gave up after BRAID_TIMEOUT)";
    default: return "unknown result code";
  }
}
BRAID_PROFILING_ALIAS(const char*, ncclGetErrorString, (ncclResult_t result))

BRAID_API const char* ncclGetLastError(ncclComm_t comm) {
  // Valid until this thread's next call (NCCL gives the same guarantee).
  thread_local std::string text;
  try {
    bool live = comm && comm_if_live(comm, [&](ncclComm* c) {
      std::lock_guard<std::mutex> lock(c->error_mutex);
      text = c->last_error;
    });
    if (!live) text = global_last_error();
  } catch (...) {
    text.clear();
  }
  return text.c_str();
}
BRAID_PROFILING_ALIAS(const char*, ncclGetLastError, (ncclComm_t comm))

BRAID_API void ncclResetDebugInit() { log_reset(); }
BRAID_PROFILING_ALIAS(void, ncclResetDebugInit, ())

// NCCL exports this internal helper too; it re-reads the debug settings.
BRAID_API void ncclResetDebugInitInternal() { log_reset(); }

// Entry points: versions, unique ids, communicator life cycle and queries.
#include <cstring>
#include <thread>

#include "src/core/group.h"
#include "src/core/log.h"
#include "src/shim/api.h"
#include "src/exec/device_backend.h"
#include "src/exec/forward.h"

using namespace braid;

namespace {

Status check_config(const ncclConfig_t* config) {
  if (!config) return Status::ok();
  if (config->magic != 0xcafebeef)
    return BRAID_ERROR(ncclInvalidArgument, "config was not initialised with NCCL_CONFIG_INITIALIZER (bad magic {:#x})",
                       config->magic);
  if (config->size < offsetof(ncclConfig_t, blocking) + sizeof(int))
    return BRAID_ERROR(ncclInvalidArgument, "config size {} is too small", config->size);
  return Status::ok();
}

Status init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, ncclConfig_t* config) {
  if (!out) return BRAID_ERROR(ncclInvalidArgument, "comm pointer is NULL");
  *out = nullptr;
  if (nranks < 1) return BRAID_ERROR(ncclInvalidArgument, "nranks {} must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return BRAID_ERROR(ncclInvalidArgument, "rank {} out of range [0, {})", rank, nranks);
  BRAID_TRY(check_config(config));
  auto comm = std::make_unique<ncclComm>();
  InitCall call;
  call.comm = comm.get();
  call.id = id;
  call.nranks = nranks;
  call.rank = rank;
  if (config) {
    // Copy only the fields the caller's (possibly older, smaller) struct has.
    call.config = ncclConfig_t NCCL_CONFIG_INITIALIZER;
    std::memcpy(&call.config, config, std::min(config->size, sizeof(ncclConfig_t)));
    call.has_config = true;
  }
  comm_register(comm.get());
  Status s = enqueue(call);
  if (!s.is_ok()) {
    comm_unregister(comm.get());
    return s;
  }
  *out = comm.release();
  return Status::ok();
}

void destroy(ncclComm* comm) {
  comm->transport.reset();
  comm->bootstrap.reset();
  delete comm;
}

}  // namespace

BRAID_API ncclResult_t ncclGetVersion(int* version) {
  return guarded(nullptr, "ncclGetVersion", [&] {
    if (!version) return BRAID_ERROR(ncclInvalidArgument, "version pointer is NULL");
    *version = NCCL_VERSION_CODE;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetVersion, (int* version))

BRAID_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  return guarded(nullptr, "ncclGetUniqueId", [&] {
    if (!id) return BRAID_ERROR(ncclInvalidArgument, "uniqueId pointer is NULL");
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
    ncclUniqueId id;
    BRAID_TRY(bootstrap_create_root(&id));
    // One group: the ranks rendezvous concurrently at its end.
    group_start();
    Status first;
    for (int i = 0; i < ndev && first.is_ok(); ++i) first = init_rank(&comms[i], ndev, id, i, nullptr);
    Status end = group_end();
    if (first.is_ok() && end.is_ok()) return Status::ok();
    for (int i = 0; i < ndev; ++i)
      if (comms[i] && comm_unregister(comms[i])) destroy(comms[i]), comms[i] = nullptr;
    return first.is_ok() ? end : first;
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int* devlist))

BRAID_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded(comm, "ncclCommFinalize", [&] {
    BRAID_TRY(check_comm(comm));
    // Host collectives complete before their call returns: nothing is in flight.
    comm->finalized = true;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))

BRAID_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guarded(nullptr, "ncclCommDestroy", [&] {
    if (!comm) return BRAID_ERROR(ncclInvalidArgument, "comm argument is NULL");
    if (!comm_unregister(comm))
      return BRAID_ERROR(ncclInvalidArgument, "comm {} is not a live communicator (destroyed twice?)",
                         static_cast<void*>(comm));
    destroy(comm);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

BRAID_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guarded(nullptr, "ncclCommAbort", [&] {
    if (!comm) return Status::ok();  // NCCL: aborting NULL is a no-op
    if (!comm_unregister(comm))
      return BRAID_ERROR(ncclInvalidArgument, "comm {} is not a live communicator", static_cast<void*>(comm));
    comm->aborting = true;
    if (comm->device) comm->device->abort();
    if (comm->real) comm->real->abort();
    if (comm->transport) comm->transport->abort();
    if (comm->bootstrap) comm->bootstrap->abort();
    destroy(comm);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))

BRAID_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return guarded(comm, "ncclCommCount", [&] {
    BRAID_TRY(check_comm(comm));
    if (!count) return BRAID_ERROR(ncclInvalidArgument, "count pointer is NULL");
    *count = comm->nranks;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))

BRAID_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guarded(comm, "ncclCommUserRank", [&] {
    BRAID_TRY(check_comm(comm));
    if (!rank) return BRAID_ERROR(ncclInvalidArgument, "rank pointer is NULL");
    *rank = comm->rank;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))

BRAID_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guarded(comm, "ncclCommCuDevice", [&] {
    BRAID_TRY(check_comm(comm));
    if (!device) return BRAID_ERROR(ncclInvalidArgument, "device pointer is NULL");
    *device = comm->cuda_device;  // -1: a host-backend communicator has no CUDA device
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))

BRAID_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  return guarded(comm, "ncclCommGetAsyncError", [&] {
    if (!comm) return BRAID_ERROR(ncclInvalidArgument, "comm argument is NULL");
    if (!comm_is_live(comm)) return BRAID_ERROR(ncclInvalidArgument, "comm is not a live communicator");
    if (!error) return BRAID_ERROR(ncclInvalidArgument, "asyncError pointer is NULL");
    poll_device_error(comm);
    *error = ncclResult_t(comm->async_error.load());
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
    default: return "unknown result code";
  }
}
BRAID_PROFILING_ALIAS(const char*, ncclGetErrorString, (ncclResult_t result))

BRAID_API const char* ncclGetLastError(ncclComm_t comm) {
  // Valid until this thread's next call (NCCL gives the same guarantee).
  thread_local std::string text;
  try {
    if (comm && comm_is_live(comm)) {
      std::lock_guard<std::mutex> lock(comm->error_mutex);
      text = comm->last_error;
    } else {
      text = global_last_error();
    }
  } catch (...) {
    text.clear();
  }
  return text.c_str();
}
BRAID_PROFILING_ALIAS(const char*, ncclGetLastError, (ncclComm_t comm))

BRAID_API void ncclResetDebugInit() { log_reset(); }
BRAID_PROFILING_ALIAS(void, ncclResetDebugInit, ())

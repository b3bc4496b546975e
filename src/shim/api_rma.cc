// Entry points of NCCL 2.29's one-sided calls: ncclPutSignal, ncclSignal and
// ncclWaitSignal.  The arguments are checked here the way NCCL checks them;
// the backend does the rest (the host's: src/exec/host/rma.h).  Inside a
// group they run at ncclGroupEnd, writes before waits (src/runtime/group.h).
//
// The stream is accepted and not used on the host backend: a put has left
// this rank when the call returns, and a wait has seen its signals.  The
// CUDA backend enqueues them on it (src/exec/cuda/cuda_rma.h).
#include "src/ops/datatype.h"
#include "src/runtime/group.h"
#include "src/shim/api.h"
#include "src/shim/rma_wait.h"

using namespace braid;

namespace {

int contexts_of(const ncclComm* comm) {
  return comm->config.numRmaCtx == NCCL_CONFIG_UNDEF_INT ? 1 : comm->config.numRmaCtx;
}
int signals_of(const ncclComm* comm) {
  return comm->config.numRmaSig == NCCL_CONFIG_UNDEF_INT ? 1 : comm->config.numRmaSig;
}

Status check_signal(const ncclComm* comm, int peer, int sig, int ctx) {
  if (peer < 0 || peer >= comm->nranks)
    return BRAID_ERROR(ncclInvalidArgument, "peer {} out of range [0, {})", peer, comm->nranks);
  if (contexts_of(comm) == 0)
    return BRAID_ERROR(ncclInvalidUsage, "one-sided RMA is off on this communicator (config numRmaCtx 0)");
  if (ctx < 0 || ctx >= contexts_of(comm))
    return BRAID_ERROR(ncclInvalidArgument, "ctx {} out of range [0, {}) (config numRmaCtx)", ctx, contexts_of(comm));
  if (sig < 0 || sig >= signals_of(comm))
    return BRAID_ERROR(ncclInvalidArgument, "sigIdx {} out of range [0, {}) (config numRmaSig)", sig,
                       signals_of(comm));
  return Status::ok();
}

// One-sided calls need the connections RMA makes at the first window (or
// at init with rmaEagerInit); the backend says if it has RMA at all.
Status check_started(ncclComm* comm, const char* function) {
  if (comm->backend->rma_started()) return Status::ok();
  if (!comm->backend->has_rma())
    return BRAID_ERROR(ncclInvalidUsage, "{}: one-sided RMA is not implemented on the {} backend", function,
                       comm->backend->name());
  return BRAID_ERROR(ncclInvalidUsage, "{} before any window: one-sided RMA starts at the first "
                     "ncclCommWindowRegister (or at init with config rmaEagerInit = 1)", function);
}

Status put_signal(const void* localbuff, size_t count, ncclDataType_t type, int peer, ncclWindow_t win, size_t offset,
                  int sig, int ctx, unsigned flags, ncclComm* comm, cudaStream_t stream) {
  CommUse use(comm);
  BRAID_TRY(check_usable(use, comm));
  BRAID_TRY(check_type(type));
  BRAID_TRY(check_signal(comm, peer, sig, ctx));
  if (flags != 0) return BRAID_ERROR(ncclInvalidArgument, "flags {:#x} must be 0 (reserved)", flags);
  BRAID_TRY(check_buffer(localbuff, "localbuff", count));
  if (!win) return BRAID_ERROR(ncclInvalidArgument, "peerWin is NULL");
  auto window = comm->windows.find(win);
  if (window == comm->windows.end())
    return BRAID_ERROR(ncclInvalidArgument, "peerWin {} was not registered on this communicator (or deregistered)",
                       static_cast<void*>(win));
  const uint64_t bytes = uint64_t(count) * datatype_size(type);
  const uint64_t size = window->second->ranks[peer].size;
  if (offset > size || bytes > size - offset)
    return BRAID_ERROR(ncclInvalidArgument, "{} bytes at peerWinOffset {} overrun rank {}'s part of the window ({} bytes)",
                       bytes, offset, peer, size);
  BRAID_TRY(check_started(comm, "ncclPutSignal"));
  RmaCall call;
  call.peer = peer;
  call.data = localbuff;
  call.bytes = bytes;
  call.to_window = true;
  call.window_seq = window->second->seq;
  call.offset = offset;
  call.ctx = ctx;
  call.signal = sig;
  call.stream = stream;
  return enqueue(comm, call);
}

Status signal(int peer, int sig, int ctx, unsigned flags, ncclComm* comm, cudaStream_t stream) {
  CommUse use(comm);
  BRAID_TRY(check_usable(use, comm));
  BRAID_TRY(check_signal(comm, peer, sig, ctx));
  if (flags != 0) return BRAID_ERROR(ncclInvalidArgument, "flags {:#x} must be 0 (reserved)", flags);
  BRAID_TRY(check_started(comm, "ncclSignal"));
  RmaCall call;
  call.peer = peer;
  call.ctx = ctx;
  call.signal = sig;
  call.stream = stream;
  return enqueue(comm, call);
}

Status wait_signal(int ndesc, const ncclWaitSignalDesc_t* descs, ncclComm* comm, int64_t bound_ms,
                   cudaStream_t stream) {
  CommUse use(comm);
  BRAID_TRY(check_usable(use, comm));
  if (ndesc < 0) return BRAID_ERROR(ncclInvalidArgument, "nDesc {} is negative", ndesc);
  if (ndesc > 0 && !descs) return BRAID_ERROR(ncclInvalidArgument, "signalDescs is NULL with nDesc {}", ndesc);
  RmaCall call;
  call.wait = true;
  call.wait_ms = bound_ms;
  call.stream = stream;
  for (int i = 0; i < ndesc; ++i) {
    const ncclWaitSignalDesc_t& d = descs[i];
    BRAID_TRY(std::move(check_signal(comm, d.peer, d.sigIdx, d.ctx)).context(fmt::format("signalDescs[{}]", i)));
    if (d.opCnt < 0) return BRAID_ERROR(ncclInvalidArgument, "signalDescs[{}]: opCnt {} is negative", i, d.opCnt);
    call.waits.push_back({d.peer, d.ctx, d.sigIdx, uint64_t(d.opCnt)});
  }
  if (call.waits.empty()) return Status::ok();
  BRAID_TRY(check_started(comm, "ncclWaitSignal"));
  return enqueue(comm, call);
}

}  // namespace

Status braid::wait_signals_within(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t* descs, int64_t bound_ms) {
  CommUse use(comm);  // an Abort from another thread waits for this call
  BRAID_TRY(check_comm(use, comm));
  return wait_signal(ndesc, descs, comm, bound_ms, nullptr);
}

BRAID_API ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                                     ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                                     unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclPutSignal", [&] {
    return put_signal(localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm, stream);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclPutSignal, (const void*, size_t, ncclDataType_t, int, ncclWindow_t, size_t,
                                                    int, int, unsigned int, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                                  cudaStream_t stream) {
  return guarded(comm, "ncclSignal", [&] { return signal(peer, sigIdx, ctx, flags, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclSignal, (int, int, int, unsigned int, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                                      cudaStream_t stream) {
  return guarded(comm, "ncclWaitSignal", [&] { return wait_signal(nDesc, signalDescs, comm, 0, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclWaitSignal, (int, ncclWaitSignalDesc_t*, ncclComm_t, cudaStream_t))

// Entry points: collectives, point-to-point and groups.
//
// Each call checks its arguments the way NCCL does (NULL comm or buffers,
// bad datatype/op/root/peer: ncclInvalidArgument, with no side effect) and
// hands the call to the group machinery, which runs it now or at GroupEnd.
#include "src/ops/datatype.h"
#include "src/plan/alg_selection.h"
#include "src/runtime/group.h"
#include "src/runtime/tuner.h"
#include "src/shim/api.h"

using namespace braid;

namespace braid {

Status check_usable(const CommUse& use, ncclComm* comm) {
  BRAID_TRY(check_comm(use, comm));
  if (comm->suspended)
    return BRAID_ERROR(ncclInvalidUsage, "communicator is suspended (ncclCommSuspend): call ncclCommResume first");
  poll_backend_error(comm);
  if (comm->revoked) return BRAID_ERROR(ncclInvalidUsage, "communicator was revoked (ncclCommRevoke); only destroy, abort, split or shrink it");
  return check_initialized(comm);
}

}  // namespace braid

namespace {

struct CollectiveSpec {
  Collective collective;
  bool reduces;
  bool rooted;
};

// A per-call configuration (nccl*Config, 2.31): the algorithms its
// algSelection admits for this collective (src/plan/alg_selection.h).  What
// cannot be honoured is an error under forceAlgSelection, else the call
// runs as if it had no selection.  The CTA counts, cluster size and CTA
// policy shape GPU kernel launches NCCL makes; braid's launch geometry
// follows its schedules, so it reads and checks them and goes on.  The
// profiler tag goes to a v7 profiler plugin's events of the call.
Status apply_coll_config(const ncclCollConfig_t* user, Collective c, CollectiveCall* call) {
  ncclCollConfig_t config;
  BRAID_TRY(read_coll_config(user, &config));
  call->launch_event = config.launchCompletionEvent;
  call->profiler.tag = config.userProfilerTag;
  if (!config.algSelection || !*config.algSelection) return Status::ok();
  uint32_t admitted = 0;
  Status parsed = parse_alg_selection(config.algSelection, c, &admitted);
  if (parsed.is_ok() && (admitted & ~kFastPathsBit)) {  // the fast paths alone do not serve every call
    call->algorithms = admitted;
    return Status::ok();
  }
  Status why = parsed.is_ok() ? BRAID_ERROR(ncclInvalidArgument, "algSelection \"{}\" admits none of braid's {} "
                                            "algorithms", config.algSelection, to_string(c))
                              : std::move(parsed);
  if (config.forceAlgSelection) return std::move(why).context("forceAlgSelection is 1");
  BRAID_INFO(kColl | kTuning, "{}; forceAlgSelection is 0: automatic choice", why.message());
  return Status::ok();
}

// The checks of a collective's own arguments (NCCL's, and
// NCCL_CHECK_MODE's local one).
Status check_collective_args(const CollectiveSpec& spec, const void* sendbuff, const void* recvbuff, size_t count,
                             ncclDataType_t type, ncclRedOp_t op, int root, ncclComm* comm) {
  BRAID_TRY(check_type(type));
  if (spec.reduces) BRAID_TRY(check_op(comm, op, type));
  if (spec.rooted) BRAID_TRY(check_root(comm, root));
  bool is_root = comm->rank == root;
  // NCCL lets non-root ranks pass NULL for the buffer they do not use.
  bool needs_send = !(spec.collective == Collective::Broadcast || spec.collective == Collective::Scatter) || is_root;
  bool needs_recv = !(spec.collective == Collective::Reduce || spec.collective == Collective::Gather) || is_root;
  if (needs_send) BRAID_TRY(check_buffer(sendbuff, "sendbuff", count));
  if (needs_recv) BRAID_TRY(check_buffer(recvbuff, "recvbuff", count));
  BRAID_TRY(check_count(count, type, uint64_t(comm->nranks)));
  const uint64_t block = uint64_t(count) * datatype_size(type);
  if (needs_send)
    BRAID_TRY(check_mapped(comm, sendbuff, "sendbuff", block, input_blocks(spec.collective, comm->nranks)));
  if (needs_recv)
    BRAID_TRY(check_mapped(comm, recvbuff, "recvbuff", block, output_blocks(spec.collective, comm->nranks)));
  return Status::ok();
}

Status enqueue_collective(const CollectiveSpec& spec, const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t type, ncclRedOp_t op, int root, ncclComm* comm, cudaStream_t stream,
                          const ncclCollConfig_t* config) {
  CommUse use(comm);  // an Abort from another thread waits for this call
  BRAID_TRY(check_usable(use, comm));
  Status args = check_collective_args(spec, sendbuff, recvbuff, count, type, op, root, comm);
  CollectiveCall call;
  if (args.is_ok() && config) args = apply_coll_config(config, spec.collective, &call);
  const bool own_selection = call.algorithms != 0;
  // NCCL_ALGO, for a call that selects nothing itself (src/plan/nccl_algo.h).
  if (args.is_ok() && !call.algorithms) call.algorithms = comm->plans->default_algorithms(spec.collective);
  if (!args.is_ok()) {
    // Under the cross-rank check the refused call still goes to it, so that
    // the peers' check fails at once instead of their call waiting for this
    // rank's part (src/runtime/group_check.cc).
    if (comm->check_args) {
      CollectiveCall refused;
      refused.collective = spec.collective;
      refused.refused = true;
      (void)enqueue(comm, refused);
    }
    return args;
  }
  // NCCL: nothing to do once the arguments pass (the configuration's
  // included); under the cross-rank check the ranks still compare it.
  if (count == 0 && !comm->check_args) return Status::ok();
  call.collective = spec.collective;
  call.sendbuff = sendbuff;
  call.recvbuff = recvbuff;
  call.count = count;
  call.type = type;
  call.op = spec.reduces ? op : ncclSum;
  if (spec.reduces) {
    const PreMulSumOp* premul = int(op) >= int(ncclNumOps) ? &comm->user_ops.at(int(op)) : nullptr;  // check_op found it
    call.reduction = normalise_reduction(spec.collective, op, premul, comm->nranks);
  }
  call.root = spec.rooted ? root : 0;
  call.stream = stream;
  if (!own_selection) tuner_choose(comm, &call);  // a tuner plugin's pick (src/runtime/tuner.h)
  return enqueue(comm, call);
}

Status check_p2p_args(bool is_send, void* buffer, size_t count, ncclDataType_t type, ncclComm* comm) {
  BRAID_TRY(check_type(type));
  BRAID_TRY(check_buffer(buffer, is_send ? "sendbuff" : "recvbuff", count));
  BRAID_TRY(check_count(count, type, 1));
  return check_mapped(comm, buffer, is_send ? "sendbuff" : "recvbuff", uint64_t(count) * datatype_size(type), 1);
}

Status enqueue_p2p(bool is_send, void* buffer, size_t count, ncclDataType_t type, int peer, ncclComm* comm,
                   cudaStream_t stream) {
  CommUse use(comm);
  BRAID_TRY(check_usable(use, comm));
  if (peer < 0 || peer >= comm->nranks)
    return BRAID_ERROR(ncclInvalidArgument, "peer {} out of range [0, {})", peer, comm->nranks);
  const Status args = check_p2p_args(is_send, buffer, count, type, comm);
  if (!args.is_ok()) {
    // Under the cross-rank check the refused call still goes to it, so that
    // the peer's matching call fails at once instead of waiting for this
    // one (src/runtime/group_check.cc).
    if (comm->check_args) {
      P2PCall refused;
      refused.is_send = is_send;
      refused.peer = peer;
      refused.refused = true;
      (void)enqueue(comm, refused);
    }
    return args;
  }
  P2PCall call;
  call.is_send = is_send;
  call.buffer = buffer;
  call.count = count;
  call.type = type;
  call.peer = peer;
  call.stream = stream;
  return enqueue(comm, call);
}

// A call refused inside a group fails the group too (group_note_refused).
Status collective(const CollectiveSpec& spec, const void* sendbuff, void* recvbuff, size_t count,
                  ncclDataType_t type, ncclRedOp_t op, int root, ncclComm* comm, cudaStream_t stream,
                  const ncclCollConfig_t* config = nullptr) {
  Status s = enqueue_collective(spec, sendbuff, recvbuff, count, type, op, root, comm, stream, config);
  group_note_refused(s);
  return s;
}

Status p2p(bool is_send, void* buffer, size_t count, ncclDataType_t type, int peer, ncclComm* comm,
           cudaStream_t stream) {
  Status s = enqueue_p2p(is_send, buffer, count, type, peer, comm, stream);
  group_note_refused(s);
  return s;
}

constexpr CollectiveSpec kAllReduce{Collective::AllReduce, true, false};
constexpr CollectiveSpec kReduceScatter{Collective::ReduceScatter, true, false};
constexpr CollectiveSpec kReduce{Collective::Reduce, true, true};
constexpr CollectiveSpec kAllGather{Collective::AllGather, false, false};
constexpr CollectiveSpec kBroadcast{Collective::Broadcast, false, true};
constexpr CollectiveSpec kAlltoAll{Collective::AlltoAll, false, false};
constexpr CollectiveSpec kGather{Collective::Gather, false, true};
constexpr CollectiveSpec kScatter{Collective::Scatter, false, true};

}  // namespace

BRAID_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclAllReduce",
                 [&] { return collective(kAllReduce, sendbuff, recvbuff, count, type, op, 0, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclAllReduce,
                      (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t type,
                                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclReduceScatter",
                 [&] { return collective(kReduceScatter, sendbuff, recvbuff, recvcount, type, op, 0, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclReduceScatter,
                      (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                  ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclReduce",
                 [&] { return collective(kReduce, sendbuff, recvbuff, count, type, op, root, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclReduce,
                      (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t type,
                                     ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclAllGather",
                 [&] { return collective(kAllGather, sendbuff, recvbuff, sendcount, type, ncclSum, 0, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclAllGather,
                      (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclBroadcast",
                 [&] { return collective(kBroadcast, sendbuff, recvbuff, count, type, ncclSum, root, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclBroadcast,
                      (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                                 cudaStream_t stream) {
  return guarded(comm, "ncclBcast",
                 [&] { return collective(kBroadcast, buff, buff, count, type, ncclSum, root, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclBcast, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                    ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclAlltoAll",
                 [&] { return collective(kAlltoAll, sendbuff, recvbuff, count, type, ncclSum, 0, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclAlltoAll,
                      (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclGather",
                 [&] { return collective(kGather, sendbuff, recvbuff, count, type, ncclSum, root, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGather,
                      (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                                   ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclScatter",
                 [&] { return collective(kScatter, sendbuff, recvbuff, count, type, ncclSum, root, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclScatter,
                      (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

// The same collectives with a per-call configuration (2.31); NULL is the plain call.
BRAID_API ncclResult_t ncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                                           const ncclCollConfig_t* config) {
  return guarded(comm, "ncclAllReduceConfig", [&] {
    return collective(kAllReduce, sendbuff, recvbuff, count, type, op, 0, comm, stream, config);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclAllReduceConfig, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                                          ncclComm_t, cudaStream_t, const ncclCollConfig_t*))

BRAID_API ncclResult_t ncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount,
                                               ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                               cudaStream_t stream, const ncclCollConfig_t* config) {
  return guarded(comm, "ncclReduceScatterConfig", [&] {
    return collective(kReduceScatter, sendbuff, recvbuff, recvcount, type, op, 0, comm, stream, config);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclReduceScatterConfig, (const void*, void*, size_t, ncclDataType_t,
                                                              ncclRedOp_t, ncclComm_t, cudaStream_t,
                                                              const ncclCollConfig_t*))

BRAID_API ncclResult_t ncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
                                        const ncclCollConfig_t* config) {
  return guarded(comm, "ncclReduceConfig", [&] {
    return collective(kReduce, sendbuff, recvbuff, count, type, op, root, comm, stream, config);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclReduceConfig, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int,
                                                       ncclComm_t, cudaStream_t, const ncclCollConfig_t*))

BRAID_API ncclResult_t ncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t type,
                                           ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return guarded(comm, "ncclAllGatherConfig", [&] {
    return collective(kAllGather, sendbuff, recvbuff, sendcount, type, ncclSum, 0, comm, stream, config);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclAllGatherConfig, (const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                                          cudaStream_t, const ncclCollConfig_t*))

BRAID_API ncclResult_t ncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                           int root, ncclComm_t comm, cudaStream_t stream,
                                           const ncclCollConfig_t* config) {
  return guarded(comm, "ncclBroadcastConfig", [&] {
    return collective(kBroadcast, sendbuff, recvbuff, count, type, ncclSum, root, comm, stream, config);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclBroadcastConfig, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                                                          cudaStream_t, const ncclCollConfig_t*))

BRAID_API ncclResult_t ncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                          ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return guarded(comm, "ncclAlltoAllConfig", [&] {
    return collective(kAlltoAll, sendbuff, recvbuff, count, type, ncclSum, 0, comm, stream, config);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclAlltoAllConfig, (const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                                         cudaStream_t, const ncclCollConfig_t*))

BRAID_API ncclResult_t ncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                        int root, ncclComm_t comm, cudaStream_t stream,
                                        const ncclCollConfig_t* config) {
  return guarded(comm, "ncclGatherConfig", [&] {
    return collective(kGather, sendbuff, recvbuff, count, type, ncclSum, root, comm, stream, config);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGatherConfig, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                                                       cudaStream_t, const ncclCollConfig_t*))

BRAID_API ncclResult_t ncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                         int root, ncclComm_t comm, cudaStream_t stream,
                                         const ncclCollConfig_t* config) {
  return guarded(comm, "ncclScatterConfig", [&] {
    return collective(kScatter, sendbuff, recvbuff, count, type, ncclSum, root, comm, stream, config);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclScatterConfig, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                                                        cudaStream_t, const ncclCollConfig_t*))

BRAID_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                cudaStream_t stream) {
  return guarded(comm, "ncclSend",
                 [&] { return p2p(true, const_cast<void*>(sendbuff), count, type, peer, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclSend, (const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                cudaStream_t stream) {
  return guarded(comm, "ncclRecv", [&] { return p2p(false, recvbuff, count, type, peer, comm, stream); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclRecv, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

BRAID_API ncclResult_t ncclGroupStart() {
  return guarded(nullptr, "ncclGroupStart", [] {
    group_start();
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGroupStart, ())

BRAID_API ncclResult_t ncclGroupEnd() {
  return guarded(nullptr, "ncclGroupEnd", [] { return group_end(); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGroupEnd, ())

BRAID_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guarded(nullptr, "ncclGroupSimulateEnd", [&] {
    // As NCCL's: NULL is ncclGroupEnd; a bad simInfo still ends the group (group_simulate_end).
    return simInfo ? group_simulate_end(simInfo) : group_end();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))

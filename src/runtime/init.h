// A communicator's init, for one rank: meet the others (the bootstrap),
// agree with them (src/runtime/agreement.h), make the transports, make the
// backend.  Leaves the communicator ready for calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nccl.h"
#include "src/base/status.h"
#include "src/exec/device_backend.h"
#include "src/plan/braid_algo.h"
#include "src/plan/host_path.h"
#include "src/plan/nccl_algo.h"
#include "src/plan/nccl_proto.h"
#include "src/runtime/agreement.h"
#include "src/runtime/cuda_settings.h"
#include "src/runtime/tuner.h"
#include "src/transport/transport.h"

struct ncclComm;

namespace braid {

// What this rank's environment and machine say, before the others are heard.
struct LocalChoices {
  TransportPolicy transport;  // BRAID_TRANSPORT, or NCCL_NET, NCCL_SHM_DISABLE, NCCL_IB_DISABLE
  DeviceProbe device;
  SlotStoresMode slot_stores = SlotStoresMode::Auto;
  std::shared_ptr<const TuningTable> tuning_table;  // BRAID_TUNING_FILE's rows, then the built-in ones
  BraidAlgo braid_algo;        // BRAID_ALGO (src/plan/braid_algo.h)
  std::string nccl_algo_text;  // NCCL_ALGO
  NcclAlgo nccl_algo;          // what it admits of braid's algorithms (src/plan/nccl_algo.h)
  std::string nccl_proto_text;  // NCCL_PROTO
  NcclProto nccl_proto;         // what it admits of braid's protocols (src/plan/nccl_proto.h)
  std::shared_ptr<TunerPlugin> tuner;  // NCCL_TUNER_PLUGIN's (src/runtime/tuner.h), or null
};

// What init decided, kept so that ncclCommResume can make the transport and
// the backend again exactly as init made them.
struct CommSetup {
  LocalChoices local;
  AgreedValues agreed;
  HostPathSettings host;
  CudaSettings cuda;  // where every rank runs the CUDA backend
  TransportContext ctx;  // as at init: the first transport's hash and addresses
};

// comm->rank, nranks and config were set by the caller before this (maybe
// background) init started, so queries never race with it.
Status comm_init(ncclComm* comm, const ncclUniqueId& id);
// The same with several roots (ncclCommInitRankScalable): rank r meets the
// others through ids[root_of_rank(r)] (see bootstrap.h).
Status comm_init_scalable(ncclComm* comm, const std::vector<ncclUniqueId>& ids);

// ncclCommSuspend: once every rank is here (no peer still sends) and no
// one-sided signal is left unread anywhere, the backend and the transport
// are destroyed, releasing their memory.  Collective.
Status comm_release_buffers(ncclComm* comm);
// ncclCommResume: a new transport (new segments, new listeners) and
// backend made as init made them, the windows every rank still has
// announced to it again.  Collective.
Status comm_restore_buffers(ncclComm* comm);
// ncclCommMemStats: what the backend and transport hold (releasable) and
// what stays while suspended (the plan cache).
MemoryHeld comm_memory(const ncclComm* comm);

}  // namespace braid

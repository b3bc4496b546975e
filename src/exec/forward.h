// Forwarding to a real NCCL.
//
// When BRAID_NCCL_LIB names NVIDIA's libnccl.so.2, collectives braid is told
// not to run (BRAID_FORWARD=allreduce,allgather,... or all) go to it, on
// device communicators.  The library is opened with RTLD_DEEPBIND so that its
// internal calls to its own public symbols stay inside it instead of
// resolving back into braid, which exports the same names.  The real
// communicator is created alongside braid's on the first forwarded call: rank
// 0 makes the real unique id and braid's bootstrap carries it to the others.
// Forwarded calls are issued immediately on the caller's stream (inside a
// braid group too: NCCL gives a group's operations no mutual order).
#pragma once

#include <memory>

#include "src/base/status.h"
#include "src/exec/backend.h"
#include "src/plan/call.h"

namespace braid {

struct RealNccl {
  void* handle = nullptr;
  std::string path;
  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  const char* (*GetLastError)(ncclComm_t) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Gather)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Scatter)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
};

// The library BRAID_NCCL_LIB names, loaded once per process.  Fails with a
// clear message when unset, missing, not an NCCL, or braid itself.
Status real_nccl(const RealNccl** out);

// A braid communicator's twin on the real NCCL (destroyed with it).
class RealComm {
 public:
  explicit RealComm(ncclComm_t comm) : comm_(comm) {}
  ~RealComm();
  void abort();
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_;
};

// True when BRAID_FORWARD names this collective (or is "all").
bool forward_wanted(Collective c);

// A communicator's way to the real NCCL.
class Forwarder {
 public:
  // Runs the call on the real NCCL, creating the twin communicator first if
  // needed (collective over the communicator's ranks, like the call itself).
  Status run(const CollectiveCall& call, const BackendContext& ctx);
  void abort() {
    if (real_) real_->abort();
  }

 private:
  std::unique_ptr<RealComm> real_;
};

}  // namespace braid

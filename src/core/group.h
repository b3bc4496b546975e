// Group semantics (ncclGroupStart / ncclGroupEnd), per calling thread.
//
// Outside a group every call is a group of one.  Inside, calls are checked
// and queued; ncclGroupEnd runs queued communicator inits concurrently, then
// all queued work: one queue per communicator (collectives in issue order,
// then that communicator's sends/receives as one concurrent batch), all
// communicators' queues driven together by one cooperative loop.
#pragma once

#include <cstddef>

#include "braid/schedule.h"
#include "nccl.h"
#include "src/core/status.h"

namespace braid {

struct CollectiveCall {
  ncclComm* comm = nullptr;
  Collective collective = Collective::AllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  cudaStream_t stream = nullptr;  // device backends enqueue on it; the host backend ignores it
};

struct P2PCall {
  ncclComm* comm = nullptr;
  bool is_send = false;
  void* buffer = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  int peer = 0;
  cudaStream_t stream = nullptr;
};

struct InitCall {
  ncclComm* comm = nullptr;
  ncclUniqueId id{};
  int nranks = 0;
  int rank = 0;
  ncclConfig_t config{};
  bool has_config = false;
};

void group_start();
// Ends one nesting level; runs the queued work when the outermost ends.
// Fails with ncclInvalidUsage when no group is open.
Status group_end();
bool group_active();

// Queue (inside a group) or run now (outside).
Status enqueue(const CollectiveCall& call);
Status enqueue(const P2PCall& call);
Status enqueue(const InitCall& call);

}  // namespace braid

// Group semantics (ncclGroupStart / ncclGroupEnd), per calling thread.
//
// Outside a group every call is a group of one.  Inside, calls are checked
// and queued; ncclGroupEnd runs queued communicator inits concurrently, then
// all queued work: one queue per communicator (collectives in issue order,
// then that communicator's sends/receives as one concurrent batch), all
// communicators' queues driven together by one cooperative loop.
#pragma once

#include <cstddef>
#include <vector>

#include "braid/chunking.h"
#include "braid/schedule.h"
#include "nccl.h"
#include "src/runtime/comm.h"
#include "src/base/status.h"

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
  // op is a PreMulSum op: its definition, taken when the call was made (NCCL
  // lets the op be destroyed as soon as the call that uses it returns).
  bool has_premul = false;
  PreMulSumOp premul;
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
  std::vector<ncclUniqueId> scalable_ids;  // ncclCommInitRankScalable: all the roots (else `id`)
};

void group_start();
// Ends one nesting level; runs the queued work when the outermost ends.
// Fails with ncclInvalidUsage when no group is open.
Status group_end();
bool group_active();

// Which buffers a rank has for a collective: NCCL lets the ranks that are not
// the root pass NULL for Broadcast/Scatter inputs and Reduce/Gather outputs.
inline bool has_input(const CollectiveCall& c) { return !rooted_input(c.collective) || c.comm->rank == c.root; }
inline bool has_output(const CollectiveCall& c) { return !rooted_output(c.collective) || c.comm->rank == c.root; }

// Runs one group's host-executor work (host buffers) to completion: the
// collectives in order per communicator, then each communicator's send/recv
// batch, all communicators concurrently.
Status run_host_work(std::vector<CollectiveCall> collectives, std::vector<P2PCall> p2ps);

// Queue (inside a group) or run now (outside).
Status enqueue(const CollectiveCall& call);
Status enqueue(const P2PCall& call);
Status enqueue(const InitCall& call);

// ncclGroupSimulateEnd: ends the outermost group like group_end, but instead
// of running the queued collectives and sends/receives it checks them (plans
// a schedule for each), writes an alpha-beta estimate of their time in
// microseconds to sim->estimatedTime, and discards them.  Queued inits run.
Status group_simulate_end(ncclSimInfo_t* sim);

// BRAID_CHECK=1: the ranks of each communicator compare what they queued
// (collective, count, datatype, op, root) through the bootstrap before any
// data moves; any difference fails the group on every rank with
// ncclInvalidUsage.  Does nothing when BRAID_CHECK is 0.
Status check_agreement(const std::vector<CollectiveCall>& collectives);

// The alpha-beta estimate behind group_simulate_end (group_sim.cc); plans a
// schedule for every collective, so a call no schedule can run fails here.
Status estimate_group_us(const std::vector<CollectiveCall>& collectives, const std::vector<P2PCall>& p2ps,
                         double* us);

}  // namespace braid

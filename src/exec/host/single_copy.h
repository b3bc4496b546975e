// Single-copy collectives (host backend): the mapped path and the pull path.
//
// When a call's buffers are reachable from every rank (any buffer when all
// ranks are threads of one process; between processes on one host, buffers
// in mapped windows: ncclCommWindowRegister on ncclMemAlloc memory, see
// host_windows.h), no fragment has to travel through a transport: each
// rank loads its peers' inputs and stores results where they belong, so
// every input byte is read once and every output byte written once,
// instead of being copied into a slot and out again.
//
// The ranks still talk over the transport, in two short messages per peer:
//   1. a descriptor (which window and offset hold my buffers, and the call's
//      signature): "my input is ready, here it is";
//   2. after its share is done, "done": nobody may return (and let the user
//      touch the buffers) before every peer has finished reading and
//      writing them.
// Every rank sees every descriptor, so all decide alike: if some rank's
// buffers are not reachable (or an AlltoAll is in place, where a
// rank would overwrite input a peer has not read yet), all run the
// schedule `fallback` instead; if the signatures differ, all fail.
//
// The pull path is the same protocol for processes whose plain buffers
// nobody can map (src/transport/cross_memory.h): AllGather, AlltoAll and
// Broadcast read their peers' inputs with process_vm_readv instead of
// loads, a kernel copy straight into the output; AllReduce, Reduce and
// ReduceScatter read their share of every peer's input a chunk at a time
// into staging that stays in cache, reduce it there, and write the result
// into the outputs it belongs in, a peer's with process_vm_writev.
// Descriptors carry each rank's pid and addresses, whether it could read
// every peer at init, and rank 0's choice between pulling and the
// schedule's shared-memory slots (src/plan/copy_path.h says why that is
// measured, not fixed); every rank follows rank 0.  A rank whose pull
// fails still says "done", marked failed, so its peers report the error
// instead of waiting for it.
//
// Work is split into one contiguous share per rank, cut on 64-byte lines:
//   AllReduce      my share of every input -> reduced -> every output
//   Reduce         my share of every input -> reduced -> the root's output
//   ReduceScatter  block `me` of every input -> reduced -> my output
//   AllGather      every input -> its block of my output
//   AlltoAll       block `me` of every input -> that rank's block of my output
//   Broadcast      the root's input -> my output
// A reduction (reduce_many) reads a line of every input, folds it in
// registers and stores it to every destination, so it is safe in place: a
// rank only writes the part of a buffer that no other rank reads, after
// reading it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "braid/schedule.h"
#include "nccl.h"
#include "src/exec/host/host_windows.h"
#include "src/exec/host/task.h"
#include "src/plan/host_path.h"
#include "src/transport/transport.h"

namespace braid {

struct SingleCopyGuard;

// What a single-copy task needs of its communicator (the host backend's).
struct SingleCopyContext {
  int rank = 0, nranks = 0;
  int32_t pid = 0;  // this rank's process
  Transport* transport = nullptr;
  const HostWindows* windows = nullptr;
  SingleCopyGuard* guard = nullptr;  // ranks that are threads of one process (below)
  HostPaths* paths = nullptr;    // what the call may do, and where its outcome goes
};

struct SingleCopyArgs {
  SingleCopyContext* ctx = nullptr;
  Collective collective = Collective::AllReduce;
  const void* input = nullptr;  // nullptr where NCCL lets this rank pass none
  void* output = nullptr;
  uint64_t count = 0;  // NCCL's count (per block for multi-block buffers)
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;  // Sum, Prod, Max, Min
  int divide_output_by = 0;  // Avg: divide the result by this (0: no)
  int root = 0;
  int channel = 0;  // for the descriptors and "done" messages
  bool stream_output = false;  // write the outputs with streaming stores (src/plan/output_stores.h)
  std::unique_ptr<Task> fallback;  // the schedule, in case not every rank can go single-copy
};

// The single-copy task for `args`.  `reuse` may hold the single-copy task of an
// earlier call on the same communicator (recycle_task()): it is rebound, so
// a steady stream of calls allocates nothing.
Status make_single_copy_task(SingleCopyArgs args, std::unique_ptr<Task> reuse, std::unique_ptr<Task>* out);

// Takes a finished task apart for reuse: the schedule task goes to
// *schedule_task; if it was a single-copy task, its shell (fallback taken out)
// goes to *single_copy_task, which is left alone otherwise.
void recycle_task(std::unique_ptr<Task> done, std::unique_ptr<Task>* schedule_task,
                  std::unique_ptr<Task>* single_copy_task);

// Ranks that are threads of one process read and write each other's plain
// buffers, which the owner may free as soon as its call returns.  A rank
// that leaves a single-copy call before its end (abort, timeout, a failure)
// marks the communicator's guard and waits until no peer is inside its
// share; a peer that has not started its share then fails instead of
// touching the buffers.  The mark stays: every later single-copy call of the
// communicator fails at once (like NCCL, a communicator that lost a rank
// is only good for ncclCommAbort).  One per communicator, shared by its
// ranks.
struct SingleCopyGuard {
  std::atomic<int> sharing{0};
  std::atomic<bool> abandoned{false};
};
std::shared_ptr<SingleCopyGuard> single_copy_guard_for(uint64_t comm_hash);

// Calls of this process that ran single-copy (pulled ones included, and also
// counted apart), and that fell back to their schedule (tests, and
// BRAID_DEBUG=INFO says which on each call).
struct SingleCopyStats {
  std::atomic<uint64_t> ran{0}, fallback{0}, pulled{0};
  std::atomic<uint64_t> streamed{0};  // mapped (not pulled) calls that streamed their outputs
  std::atomic<uint64_t> slots_finished{0};  // slot calls ended with the "done" exchange (timed oversubscribed)
};
SingleCopyStats& single_copy_stats();

}  // namespace braid

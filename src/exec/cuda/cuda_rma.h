// NCCL 2.29's one-sided calls on the CUDA backend (ncclPutSignal,
// ncclSignal, ncclWaitSignal): enqueued on the call's stream, so they can
// be captured in a CUDA graph.
//
// A put copies the payload into the peer's part of the window at the
// address it is mapped at in this process, with the copy engines
// (cudaMemcpyAsync on the call's stream).  That address exists for a
// symmetric window, ncclMemAlloc memory every rank registered, which the
// runtime maps for every LSA peer (src/runtime/lsa_space.h); other windows
// are refused, by name.  Then a one-thread kernel stores this rank's count
// of signals sent to (peer, ctx, sigIdx), one more, into the peer's counter
// for (this rank, ctx, sigIdx) in the peer's arena (cuda_arena.h), which
// every rank maps: each counter has one writer, so a store does, and no
// atomic crosses the bus.  The kernel starts once the copy has completed
// (stream order): a waiter that sees the count sees the payload, and a
// signal comes after every earlier put of this rank to that peer (NCCL's
// order, and its strict ordering): the communicator's calls run in issue
// order across streams (call_order.h), RMA calls among them.  A group
// enqueues its writes before its waits, as the host backend runs them.
//
// A wait is a one-thread kernel (kernels.cu) that spins, bounded by
// BRAID_TIMEOUT (or the caller's bound) and stopped by an abort or the
// sender's exit, until each counter reached what this rank consumed of it
// plus opCnt, then consumes them.  The consumed counts are in device
// memory, so each replay of a captured graph waits for new signals.  What
// a wait hits is reported by ncclCommGetAsyncError, as the collectives'
// kernels report theirs.
//
// A sender's counts are read and written by its signal kernels one at a
// time, as the call order runs them; a graph's replays are not ordered
// against eager calls (call_order.h), so a replayed signal and an eager one
// to the same (peer, ctx, sigIdx) at once may count as one.
//
// Every rank of a CUDA communicator is on one machine, and every arena is
// mapped (by CUDA IPC or in the process): no connection is made for RMA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <vector>

#include "src/base/status.h"
#include "src/exec/backend.h"
#include "src/plan/call.h"

namespace braid::cuda {

class CudaRma {
 public:
  struct Setup {
    int rank = 0, nranks = 0;
    int signals = 1;  // numRmaSig: a (ctx, sigIdx) pair is ctx x signals + sigIdx
    int device = 0;
    uint64_t offset = 0, pairs = 0;  // CudaArenaLayout's rma_offset and rma_pairs
    std::vector<char*> arenas;      // every rank's arena as mapped here, this rank's own included
    int* error = nullptr;           // the kernels' error words (cuda_kernel_errors.h)
    const int* abort_flag = nullptr;
    const int* exited = nullptr;    // one word per rank
    uint64_t timeout_ns = 0;
  };
  void init(const Setup& setup) { s_ = setup; }

  void window_registered(const WindowInfo& window);
  void window_deregistered(uint64_t seq) { mapped_.erase(seq); }

  // On call.stream; the caller orders the communicator's calls around them.
  Status write(const RmaCall& call) const;
  Status wait(const RmaCall& call) const;
  // Signals that arrived here and no wait consumed (read from the device;
  // ncclCommSuspend refuses to drop them).  0, with a warning, where the
  // read fails.
  uint64_t pending() const;

 private:
  Status pair_of(int ctx, int signal, const char* what, uint64_t* pair) const;
  // Rank r's counters as mapped here (cuda_arena.h), each [peer][pair]:
  // what arrived from each sender, what r consumed of it, what r sent.
  enum Counters { kArrived = 0, kConsumed = 1, kSent = 2 };
  uint64_t* counters(int rank, Counters which, int peer, uint64_t pair) const;

  Setup s_;
  std::map<uint64_t, std::vector<char*>> mapped_;  // symmetric windows by seq: every rank's part, mapped here
};

}  // namespace braid::cuda

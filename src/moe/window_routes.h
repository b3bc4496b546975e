// How one rank reaches every rank's window of a handle (MoE, AlltoAllv): by
// loads and stores where this process maps it, through one-sided RMA where
// it cannot (another host).  This is what lets dispatch and combine span
// hosts without a special NIC, where NVIDIA's stacks tie the low-latency
// mode to IBGDA NICs and the normal one to NVLink.  braid's host RMA runs
// over shared memory on a host and, between hosts, over the communicator's
// net (InfiniBand verbs or a net plugin) or TCP (src/exec/host/rma.h).
//
// Over RMA (the handle's own communicator, NCCL 2.29's host calls), a put
// is ncclPutSignal into the peer's part of the window, and a batch of
// signal words (protocol.h signal_words) one put of their bytes.  An
// agent's small puts are gathered first (PutRuns): rows bound for one block
// from consecutive tokens leave as one message.  The protocol's ordering
// holds because:
//   - braid lands one rank's writes to another in issue order (the window
//     is registered NCCL_WIN_STRICT_ORDERING; src/exec/host/rma.h);
//   - the leader issues a destination's signal words only after every
//     agent's puts to it were issued (protocol.h arrive), so the words land
//     after the rows they count;
//   - an agent's gathered puts are all issued before it arrives;
//   - the receiver learns that a source's words landed by waiting for their
//     signals: each batch of words raises kWordSignal, word_batches(L) per
//     source and call, a number the receiver knows.  Row puts raise
//     kRowSignal, which nobody waits for (ncclPutSignal always raises one).
// A fence is then free: issue order is the ordering point.
//
// Which route a pair takes is agreed: the sender stores only where it maps
// the receiver's window, and the receiver waits for signals from exactly
// the senders that do not (the map every rank publishes at create).
//
// The agents (threads) of one rank share the communicator, whose calls
// NCCL does not allow at once: their RMA calls go one at a time under a
// mutex, which is also what makes "issued before" well defined.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "nccl.h"
#include "src/base/deadline.h"
#include "src/base/status.h"

namespace braid::moe {

class WindowRoutes {
 public:
  // Signal indexes on the handle's communicator: signal words, rows (never
  // waited for), and acknowledgements (a receiver's "read it", for handles
  // whose flow control needs one: alltoallv.h).
  static constexpr int kWordSignal = 0, kRowSignal = 1, kAckSignal = 2, kSignals = 3;

  // mapped[r]: rank r's window as this process maps it, or null.
  // reaches[s * nranks + r]: whether rank s maps rank r's window (agreed).
  WindowRoutes(ncclComm_t comm, ncclWindow_t window, int self, std::vector<char*> mapped, std::vector<uint8_t> reaches);

  // This rank stores into peer's window (else it puts over RMA).
  bool direct(int peer) const { return reaches_[size_t(self_) * nranks_ + size_t(peer)] != 0; }
  // Whether peer loads and stores this rank's window (it may read what this rank leaves there).
  bool reached_by(int peer) const { return reaches_[size_t(peer) * nranks_ + size_t(self_)] != 0; }
  // Where the protocol addresses peer's window: its mapping, or for a peer
  // reached over RMA this rank's own window (the same layout), which put()
  // turns back into an offset.
  char* base(int peer) const { return direct(peer) ? mapped_[size_t(peer)] : mapped_[size_t(self_)]; }
  // Whether every rank stores into every rank's window (no RMA at all).
  bool all_direct() const {
    for (uint8_t r : reaches_)
      if (!r) return false;
    return true;
  }
  // The senders that reach this rank over RMA.
  int rma_sources() const { return int(rma_sources_.size()); }
  // Pauses a poller spins before it yields (base/deadline.h's Waiter): none
  // where the ranks this process maps outnumber the cores, so that a waiter
  // does not spin on a core the rank it waits for needs.
  uint32_t idle_spins() const { return idle_spins_; }

  // An RMA put to a peer that is not direct.  The first failure is kept and
  // makes later puts no-ops: failure() reports it after the agents ran.
  void put(int peer, const void* remote, const void* local, size_t bytes, int signal);
  Status failure() const;

  // Waits until `count` signals `signal` of the call arrived from every
  // rank that reaches this one over RMA, and consumes them, by `deadline`,
  // or until `caller` (the caller's communicator: the handle's own may be
  // split off it) is aborted or revoked.
  Status wait_from_rma_sources(int signal, int32_t count, const Deadline& deadline, const ncclComm* caller);

 private:
  const ncclComm_t comm_;
  const ncclWindow_t window_;
  const int self_;
  const size_t nranks_;
  const std::vector<char*> mapped_;
  const std::vector<uint8_t> reaches_;
  std::vector<int> rma_sources_;
  std::vector<ncclWaitSignalDesc_t> waits_;
  uint32_t idle_spins_ = 0;

  mutable std::mutex mutex_;
  Status failure_;
};

// One agent's RMA puts, gathered: a put whose remote place continues an
// earlier one's to the same peer joins it, so that the rows an agent sends
// to one block leave as one message, not one each.  flush() sends them all;
// the agent calls it before it arrives.  Large puts go as they are.  The
// gathering buffers are kept from call to call (a handle keeps its agents).
class PutRuns {
 public:
  explicit PutRuns(WindowRoutes* routes) : routes_(routes) {}
  void add(int peer, char* remote, const void* local, size_t bytes);
  void flush();

 private:
  static constexpr size_t kAloneBytes = size_t(32) << 10;  // a put this large that joins nothing goes at once
  static constexpr size_t kHeldBytes = size_t(4) << 20;    // flushed past this much gathered

  struct Run {
    int peer;
    char* remote;
    std::vector<char> data;
    char* end() const { return remote + data.size(); }
  };
  WindowRoutes* routes_;
  std::vector<Run> runs_;  // the first live_ are this call's; the rest keep their buffers
  size_t live_ = 0, held_ = 0;
};

}  // namespace braid::moe

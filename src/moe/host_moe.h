// MoE dispatch and combine on braid's host backend (issue 40): the protocol
// of include/braid/moe/ run by threads-as-blocks over host windows.
//
// Why windows that every rank maps, and not the host backend's one-sided
// RMA (ncclPutSignal, src/exec/host/rma.h): the protocol's point is that a
// sender writes rows straight into the receiver's symmetric layout and
// raises signal words that carry a count and an epoch.  Mapped windows run
// exactly that, as a device runs it over NVLink (NCCL's LSA): a put is a
// store, a signal a release store of the word, with nothing in between.
// The RMA engine instead carries every put through a receiver thread that
// copies it a second time, and its signals are additive counters without a
// payload, so the count and epoch would need a second message.  The cost is
// reach: every rank must map every window (threads of one process, or
// processes of one host with ncclMemAlloc memory); create refuses a
// communicator where some rank cannot, on every rank alike.
//
// Ranks on several hosts: a peer whose window this process cannot map is
// reached through one-sided RMA (ncclPutSignal) instead, pair by pair, as
// window_routes.h describes; the protocol is the same.  BRAID_MOE_RMA=1
// takes that route to every other rank, even where windows map.
//
// Everything goes through NCCL's public API (ncclCommSplit, where ranks
// span hosts, for a communicator whose RMA signals are the handle's alone;
// ncclMemAlloc, ncclCommWindowRegister, ncclGetPeerDevicePointer,
// ncclPutSignal and a bounded ncclWaitSignal; the agreements and destroy's
// barrier go over the bootstrap, src/shim/host_exchange.h), so this is also a
// client of braid's window and RMA API, as a device library on NCCL's would
// be.
//
// One call, dispatch: plan (plan.h) -> every block puts its tokens' rows
// into the owners' dispatch halves -> arrives per destination; the leader
// commits (fence, signals with counts) -> the caller waits for every
// (source, local expert) signal, bounded by the timeout -> copies the rows
// into the output layout and writes the counts.  Combine is the same in
// reverse: each block puts the results of its share of the received
// blocks back into their sources' combine halves at the same rows, the
// sources wait for every signal and sum each token's rows with its weights.
//
// Flow control needs no extra message: a rank writes a peer's dispatch
// half for call n+1 only after that peer's combine signal of call n, which
// the peer raises after it finished reading its dispatch half; likewise
// for the combine half.  Hence dispatch and combine must alternate.
//
// A call that fails its own checks on one rank (a bad expert index,
// numTokens out of range, a NULL buffer) fails on every rank, at once: the
// rank still takes part, puts no rows, and its leaders commit kFailedSender
// words (calls.h).  Every rank waits for every word of the call as always,
// then fails if one said so, naming the sender.  Since all words were
// exchanged, the flow control above holds, and the handle takes the next
// dispatch.  (Before, the peers waited for rows until the timeout.)  A call
// that timed out, or whose transport failed, did not exchange every word:
// the handle then refuses further calls, since a peer may still read or
// write the windows.
//
// Zero-copy dispatch (braidMoeGetDispatchBuffer) is the same the other way:
// where dispatch's tokens are this rank's dispatch buffer, the rows for a
// destination that maps the window are not put; the rank writes its pull
// word and the slot -> token list, then signals, and the destination copies
// the rows from the buffer into its output.  The rank's tokens are written
// again only after its next combine returned, which every destination's
// combine signal preceded, each raised after its dispatch finished reading.
//
// Zero-copy combine (braidMoeGetCombineBuffer): where combine's expertOut is
// this rank's combine buffer, in its window, the rows for a source that
// maps the window are not put.  The rank writes, per block, where its rows
// start in the buffer into its pull index, then signals as always; the
// source, once signalled, reads the index and the rows in place.  The rank
// writes the buffer and the index again only after its next dispatch
// returned, which every source's dispatch signal preceded, each raised
// after that source's combine finished reading.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/moe.h"
#include "braid/moe/layout.h"
#include "braid/moe/plan.h"
#include "nccl.h"
#include "src/base/status.h"
#include "src/moe/blocks.h"
#include "src/moe/host_memory.h"
#include "src/moe/moe_backend.h"
#include "src/moe/own_window.h"

namespace braid::moe {

// Every call completes before it returns; the stream is not used.
class HostMoe : public MoeBackend {
 public:
  // Collective over comm's ranks.
  static Status create(ncclComm_t comm, const braidMoeConfig_t& config, std::unique_ptr<MoeBackend>* out);
  ~HostMoe() override;

  Status dispatch(const void* tokens, const int32_t* topk, int32_t ntokens, void* out, int32_t* recv_counts,
                  int64_t* dropped, cudaStream_t stream) override;
  Status combine(const void* expert_out, const float* weights, void* out, cudaStream_t stream) override;
  Status combine_buffer(void** out) override;
  Status dispatch_buffer(void** out) override;
  Status destroy() override;
  Status stats(braidMoeStats_t* out) override;
  ncclComm_t comm() const override { return comm_; }
  const Shape& shape() const override { return shape_; }

 private:
  HostMoe(ncclComm_t comm, int rank, const Shape& shape, const braidMoeConfig_t& config);
  // Waits for every (source, local expert) word of the call, even after
  // one said kFailedSender (the call fails then, but only once every word
  // is in, so that flow control holds for the next call).
  Status wait_all(uint32_t epoch, bool dispatch_half, std::vector<int32_t>* counts, const char* what);
  // Copies and plans the top-k indices; "" (and *plan) or what is wrong
  // with them.
  std::string plan_dispatch(const int32_t* topk, int32_t ntokens, PlanResult* plan);
  // The error of a call that failed its own checks (`problem`), once it
  // took part in the exchange (`waited`: how that went).
  static Status failed_call(const char* call, const std::string& problem, Status waited);
  // A call whose exchange did not complete (a timeout, a transport error:
  // not every word of it came, so a peer may still be reading the windows)
  // breaks the handle: settle() marks it, check_intact() then refuses calls.
  Status settle(Status waited);
  Status check_intact(const char* call) const;
  // Where the results of this rank's row (t, k), k-th choice of token t,
  // came back: its combine half, or the owner's combine buffer (pulled).
  const char* returned_row(int64_t i, bool* pulled) const;
  // Zero-copy: what the call's peers read in this rank's window (host_moe.h
  // says why it is safe), written before the signals.  Dispatch: the pull
  // word per destination and the slot -> token list; combine: the pull
  // index.
  void publish_dispatch_pulls(bool from_buffer);
  void publish_combine_pulls(bool in_buffer);
  // Copies block (src, le)'s received rows into the output; returns the
  // bytes read in src's dispatch buffer (0: they were in the dispatch half).
  uint64_t copy_block_out(int32_t src, int32_t le, char* out) const;
  // Adds the agents' counters of the call to stats_, and clears them.
  void collect_stats();

  const ncclComm_t comm_;
  const int rank_;
  const Shape shape_;
  const WindowLayout window_;
  const OutputLayout layout_;
  const ncclDataType_t dtype_;
  const int timeout_ms_;

  std::unique_ptr<OwnWindow> own_;  // the window, on a communicator split off comm_

  BlockPool pool_;
  std::vector<HostMemory> agents_;  // one per block, kept: their gathering buffers serve every call
  // Per destination, never reset (protocol.h arrive).  Separate words for
  // the two halves since their calls count separately.
  std::vector<uint32_t> dispatch_arrivals_, combine_arrivals_;
  uint64_t dispatch_calls_ = 0, combine_calls_ = 0;
  uint32_t dispatch_epoch_ = 0, combine_epoch_ = 0;
  bool combine_due_ = false;
  bool broken_ = false;  // settle()

  // The last dispatch, for its combine.
  int32_t tokens_ = 0;
  std::vector<int32_t> topk_, slots_, wanted_, sent_, received_;
  std::vector<int64_t> first_row_;
  // Combine's sums: the rows that came back as (address, t * topK + k), in
  // address order; a float sum per token element.
  std::vector<std::pair<uintptr_t, int64_t>> returned_;
  // [nranks]: whether that source reads its results in this rank's buffer;
  // whether that destination reads its rows here.
  std::vector<uint8_t> combine_pulled_, dispatch_pulled_;
  std::vector<float> sums_;

  braidMoeStats_t stats_{};
};

}  // namespace braid::moe

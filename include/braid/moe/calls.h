// MoE dispatch's and combine's senders (issue 40), written once for host C++
// and CUDA (BRAID_HD): which rows one agent puts where, then its arrival on
// every destination and, where it is the leader, the commit.  The host runs
// an agent per block thread (src/moe/host_moe.cc); a CUDA kernel runs one
// per thread block (include/braid/moe.cuh), so both backends send exactly
// this.
//
// Dispatch: agent a of A takes tokens [a*T/A, (a+1)*T/A) and puts each
// routed (token, k) row at its planned slot of block (this rank, local
// expert) in the expert owner's dispatch half, unless the owner pulls it
// (layout.h; it is still signalled).  Combine: agent a takes the
// received blocks a, a+A, ... and puts each block's results back at the
// same rows of block (this rank, local expert) in the source's combine half,
// unless the source pulls them (layout.h; it is still signalled).
// Every agent then arrives on every destination, peers first and this rank
// last, so that a leader commits to the peers before its own copy.
// A call that failed its own checks (CallState::failed) puts nothing and
// still arrives, so the leaders commit kFailedSender words (signal.h): the
// receivers' calls fail at once, and the arrival counters stay in step.
//
// MM is protocol.h's memory model plus window(peer): where this rank
// addresses peer's window (a mapping, an LSA pointer).
#pragma once

#include <stdint.h>

#include "braid/hd.h"
#include "braid/moe/layout.h"
#include "braid/moe/plan.h"
#include "braid/moe/protocol.h"

namespace braid::moe {

// What every agent of one call shares.
struct CallState {
  int32_t rank = 0;
  uint64_t call = 0;  // this kind's call number, 1, 2, ... (protocol.h arrive)
  uint32_t epoch = 0;
  uint32_t* arrivals = nullptr;  // [nranks] this kind's counters, never reset
  bool failed = false;           // this rank's call failed its checks: no rows, kFailedSender words
};

struct DispatchRows {
  const char* tokens;    // [ntokens][hidden]
  const int32_t* topk;   // [ntokens][top_k]
  const int32_t* slots;  // [ntokens][top_k] (plan.h)
  const int32_t* sent;   // [experts] rows sent to each expert (plan.h sent_rows)
  int32_t ntokens;
  const uint8_t* pulled = nullptr;  // [nranks]: that destination reads its rows here (layout.h); nullptr: none
  bool pulled_all = false;          // every destination does (LSA peers, all of them)
};

struct CombineRows {
  const char* expert_out;    // the experts' results in the dispatch output's places
  const int32_t* received;   // [nranks][local experts] rows received per block
  const int64_t* first_row;  // [nranks][local experts] where each block starts in expert_out
  const uint8_t* pulled = nullptr;  // [nranks]: that source reads its results here (layout.h pull); nullptr: none
  bool pulled_all = false;          // every source does (LSA peers, all of them)
};

// Every agent arrives on every destination; the leader commits `counts`
// (per destination, local_experts words) into `signals_at` of its window.
template <class MM>
BRAID_HD void arrive_everywhere(MM& mm, const Shape& s, const CallState& c, uint64_t signals_at,
                                const int32_t* counts, int32_t agents) {
  for (int32_t i = 1; i <= s.nranks; ++i) {
    const int32_t dst = (c.rank + i) % s.nranks;
    if (arrive(mm, &c.arrivals[dst], c.call, uint32_t(agents)))
      commit(mm, dst, reinterpret_cast<uint64_t*>(mm.window(dst) + signals_at), s, c.rank,
             c.failed ? nullptr : counts + int64_t(dst) * s.local_experts, c.epoch);
  }
}

template <class MM>
BRAID_HD void dispatch_agent(MM& mm, const Shape& s, const WindowLayout& w, const CallState& c,
                             const DispatchRows& d, int32_t agent, int32_t agents) {
  const int32_t K = s.top_k;
  const int32_t ntokens = c.failed ? 0 : d.ntokens;
  const int64_t lo = int64_t(ntokens) * agent / agents, hi = int64_t(ntokens) * (agent + 1) / agents;
  for (int64_t t = lo; t < hi; ++t)
    for (int32_t k = 0; k < K; ++k) {
      const int32_t slot = d.slots[t * K + k];
      if (slot == kNoSlot) continue;
      const int32_t e = d.topk[t * K + k], dst = s.owner(e);
      if (d.pulled_all || (d.pulled && d.pulled[dst])) continue;
      put_row(mm, dst, mm.window(dst) + w.dispatch_data, s, c.rank, s.local(e), slot,
              d.tokens + t * s.row_bytes());
    }
  arrive_everywhere(mm, s, c, w.dispatch_signals, d.sent, agents);
}

template <class MM>
BRAID_HD void combine_agent(MM& mm, const Shape& s, const WindowLayout& w, const CallState& c,
                            const CombineRows& r, int32_t agent, int32_t agents) {
  const int32_t L = s.local_experts;
  for (int64_t i = c.failed ? s.blocks() : agent; i < s.blocks(); i += agents) {
    const int32_t src = int32_t(i / L), le = int32_t(i % L);
    if (r.pulled_all || (r.pulled && r.pulled[src])) continue;
    put_rows(mm, src, mm.window(src) + w.combine_data, s, c.rank, le, 0, r.received[i],
             r.expert_out + r.first_row[i] * s.row_bytes());
  }
  arrive_everywhere(mm, s, c, w.combine_signals, r.received, agents);
}

}  // namespace braid::moe

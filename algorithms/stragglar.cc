// StragglAR AllReduce (Devraj et al., arXiv 2505.23523): for a job where one
// known rank, the straggler, reaches the call late.
//
// The buffer is cut into m = n-1 chunks.  Phase 0, among the m fast ranks
// only: a ring ReduceScatter, after which fast rank c holds the partial sum of
// chunk c over the fast ranks.  It needs nothing from the straggler, so it
// runs while the straggler is still away.  Phase 1, once the straggler
// arrives: the rounds of stragglar_rounds() (see stragglar_rounds.cc): in
// round c < m the straggler swaps chunk c with fast rank c and both reduce,
// while the others copy finished chunks among themselves; afterwards the
// straggler helps spread the last chunks.
//
// Lanes: phase 0 runs on lane 0 (channel 0) of the fast ranks, phase 1 on
// lane 1 (channel 1), whose first op waits for lane 0.  The executor runs
// each lane over the buffer tile by tile and dependencies are per tile, so
// the fast ranks finish phase 0 on every tile before they block on the
// straggler: the overlap needs no special support from the executor.
//
// Cost after the straggler arrives, S bytes: R rounds of one S/(n-1) chunk,
// R*(alpha + beta*S/(n-1)), R = n-2+log2 n for every power of two (the
// paper's count, stragglar_rounds_pow2.cc), and otherwise at most one round
// over n-2+ceil(log2 n) for n <= 64 (stragglar_rounds.cc; `braid stragglar
// --rounds`).  Ring needs 2(n-1)(alpha + beta*S/n).  If the straggler
// is not late, phase 0 adds (n-2)(alpha + beta*S/(n-1)).
//
// Any n >= 1 (n = 1 is a copy, n = 2 a single swap) and any straggler rank:
// logical rank i maps to a physical rank so the straggler is logical n-1.
#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include "braid/algorithms.h"
#include "braid/stragglar.h"

namespace braid {
namespace {

ChunkRef input_chunk(uint32_t i) { return {BufferKind::Input, i}; }
ChunkRef output_chunk(uint32_t i) { return {BufferKind::Output, i}; }

class Emitter {
 public:
  Emitter(Schedule* s) : s_(s) {}

  Dep add(int rank, int lane, OpType type, int send_peer, int recv_peer, ChunkRef src, ChunkRef dst,
          std::vector<Dep> deps = {}) {
    Op op = make_op(type, send_peer, recv_peer, src, dst);
    op.deps = std::move(deps);
    std::vector<Op>& ops = s_->ranks[rank].lanes[lane].ops;
    ops.push_back(std::move(op));
    return Dep{uint16_t(lane), uint32_t(ops.size() - 1)};
  }

 private:
  Schedule* s_;
};

constexpr int kPhase0 = 0, kPhase1 = 1;

// The plan depends only on n (the straggler is a relabelling), and searching
// for it takes up to a second at 64 ranks: plan once per n per process, so a
// straggler that changes under BRAID_STRAGGLER=auto or eager costs nothing.
const StragglarRounds& rounds_for(int n) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<const StragglarRounds>> plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto& plan = plans[n];
  if (!plan) plan = std::make_unique<const StragglarRounds>(stragglar_rounds(n));
  return *plan;
}

}  // namespace

Schedule stragglar_allreduce(int n, int straggler) {
  Schedule s;
  s.name = "stragglar_allreduce";
  s.collective = Collective::AllReduce;
  s.nranks = n;
  s.ranks.resize(n);
  if (n <= 0) return s;
  if (straggler < 0 || straggler >= n) straggler = n - 1;
  const int m = n - 1;
  // Logical label -> physical rank: the straggler is logical n-1.
  auto phys = [&](int logical) { return logical == m ? straggler : (logical < straggler ? logical : logical + 1); };
  for (RankProgram& p : s.ranks) {
    p.input_chunks = p.output_chunks = uint32_t(std::max(m, 1));
    p.lanes.resize(2);
    p.lanes[kPhase0].channel = 0;
    p.lanes[kPhase1].channel = 1;
  }
  Emitter e(&s);
  if (n == 1) {
    e.add(0, kPhase0, OpType::Copy, -1, -1, input_chunk(0), output_chunk(0));
    return s;
  }

  // Phase 0: ring ReduceScatter among logical 0..m-1; chunk c ends at rank c.
  // Rank r starts chunk r-1 and each hop adds the local input, so the chunk
  // arriving at r from r-1 after m-1 hops is chunk r, complete.
  std::vector<Dep> phase0_done(m);
  for (int r = 0; r < m; ++r) {
    const int p = phys(r), next = phys((r + 1) % m), prev = phys((r + m - 1) % m);
    if (m == 1) {
      phase0_done[r] = e.add(p, kPhase0, OpType::Copy, -1, -1, input_chunk(0), output_chunk(0));
      continue;
    }
    e.add(p, kPhase0, OpType::Send, next, -1, input_chunk((r + m - 1) % m), {});
    for (int step = 0; step < m - 2; ++step)
      e.add(p, kPhase0, OpType::RecvReduceSend, next, prev, input_chunk((r + 2 * m - 2 - step) % m), {});
    phase0_done[r] = e.add(p, kPhase0, OpType::RecvReduceCopy, -1, prev, input_chunk(r), output_chunk(r));
  }

  // Phase 1, round by round: each rank posts its send before its receive, so
  // the round's exchanges (both swap directions included) cannot wait on
  // each other.  The first phase-1 op of a fast rank waits for its phase 0:
  // it needs its partial sum, and in place its received chunks overwrite
  // inputs that phase 0 reads.
  std::vector<bool> started(n, false);
  auto deps_for = [&](int logical) {
    std::vector<Dep> deps;
    if (logical < m && !started[logical]) deps.push_back(phase0_done[logical]);
    started[logical] = true;
    return deps;
  };
  const StragglarRounds& plan = rounds_for(n);
  for (const std::vector<StragglarTransfer>& round : plan.rounds) {
    for (const StragglarTransfer& x : round) {
      // The straggler sends its own input; everyone else a final (or, in the
      // swap, partial) chunk in its output.
      ChunkRef src = x.from == m ? (x.reduce ? input_chunk(x.chunk) : output_chunk(x.chunk)) : output_chunk(x.chunk);
      e.add(phys(x.from), kPhase1, OpType::Send, phys(x.to), -1, src, {}, deps_for(x.from));
    }
    for (const StragglarTransfer& x : round) {
      ChunkRef dst = output_chunk(x.chunk);
      if (x.reduce) {
        ChunkRef mine = x.to == m ? input_chunk(x.chunk) : output_chunk(x.chunk);
        e.add(phys(x.to), kPhase1, OpType::RecvReduceCopy, -1, phys(x.from), mine, dst, deps_for(x.to));
      } else {
        e.add(phys(x.to), kPhase1, OpType::Recv, -1, phys(x.from), {}, dst, deps_for(x.to));
      }
    }
  }
  return s;
}

double ring_allreduce_model(int n, double bytes, AlphaBeta ab) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * (ab.alpha + ab.beta * bytes / n);
}

double stragglar_post_arrival_model(int n, int rounds, double bytes, AlphaBeta ab) {
  if (n <= 1) return 0;
  return rounds * (ab.alpha + ab.beta * bytes / (n - 1));
}

double stragglar_no_delay_model(int n, int rounds, double bytes, AlphaBeta ab) {
  if (n <= 1) return 0;
  return (n - 2 + rounds) * (ab.alpha + ab.beta * bytes / (n - 1));
}

}  // namespace braid

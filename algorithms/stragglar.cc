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
// Lanes: phase 0 runs on lane 0 (channel 0) of the fast ranks.  The
// executor runs each lane's ops in order, tile by tile, and dependencies are
// per tile; so phase 1 puts in one lane only ops that must wait for each
// other anyway, and says what each op waits for with explicit deps:
//   - the straggler sends from one lane (channel 1), in round order: its own
//     input chunks wait for nothing and stream back to back as it arrives;
//     the final chunks it passes on afterwards wait for their swap;
//   - a fast rank's swap send is a lane of its own (channel 1): it needs
//     only phase 0, so it runs ahead while the straggler is away;
//   - a fast rank's other sends are one lane per destination (channel 2),
//     in round order, each waiting for the receive that brought its chunk.
//     One lane for all of them made tile t+1 of an early round's copy wait
//     for tile t of the last round's, whose chunk comes through a chain of
//     hops behind the straggler: the fast ranks fell behind and finished
//     after the straggler had sent its last byte;
//   - every rank receives on one lane per (peer, channel); a receive waits
//     for phase 0 (in place it overwrites inputs phase 0 reads) and a swap's
//     receive for the swap's send (it overwrites what that send reads).
// One lane for all of phase 1 made every op wait for the one before it: an
// input chunk the straggler could send waited behind a receive, and tile
// t+1 of a fast rank's swap behind the last rounds of tile t, which left the
// straggler's NIC idle for much of phase 1 on link-bound hosts (seen in
// the emulated cluster's runs while this was written; the results of the
// schedule as it is now: perf/results/cluster_stragglar_*.txt).
//
// Compact lanes (StragglarLanes::Compact), for the CUDA backend: phase 1 of
// a rank is two lanes on channel 1, its sends and its receives, each in
// round order, with the same deps.  A GPU runs every lane as thread blocks,
// one per slice, and the ranks sharing a device split a fixed block budget
// by the widest rank's lane count: one lane per connection (12 at 8 ranks)
// left 2 slices a lane where ring gets 32, while most of those lanes idle in
// any round (perf/results/cuda_h100/20261128).  Three lanes (phase 0, sends,
// receives) on two channels keep several times the slices.  Round order in
// both lanes is free of deadlock: a send waits only for receives of earlier
// rounds, and a round's receives for its sends.
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
#include <tuple>
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

constexpr int kPhase0 = 0;
// Phase-1 lanes made up front (copy-sending lanes are appended per
// destination, receiving lanes per peer and channel).
constexpr int kStragglerSends = 1, kSwapSend = 1;
constexpr uint16_t kSwapChannel = 1, kCopyChannel = 2;
// Compact: every phase-1 send on lane 1, every receive on lane 2.
constexpr int kCompactSends = 1, kCompactReceives = 2;

// The plan depends only on n (the straggler is a relabelling), and searching
// for it takes milliseconds at 64 ranks and seconds at several hundred
// (perf/results/stragglar_planning_20261207.txt): plan once per n per
// process, so a straggler that changes under BRAID_STRAGGLER=auto or eager
// costs nothing.
const StragglarRounds& rounds_for(int n) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<const StragglarRounds>> plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto& plan = plans[n];
  if (!plan) plan = std::make_unique<const StragglarRounds>(stragglar_rounds(n));
  return *plan;
}

}  // namespace

Schedule stragglar_allreduce(int n, int straggler, StragglarLanes layout) {
  const bool compact = layout == StragglarLanes::Compact;
  Schedule s;
  s.name = compact ? "stragglar_allreduce_compact" : "stragglar_allreduce";
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
    p.lanes.resize(compact ? kCompactReceives + 1 : kSwapSend + 1);
    p.lanes[kPhase0].channel = 0;
    p.lanes[kSwapSend].channel = kSwapChannel;  // the straggler's sends: kStragglerSends, the same lane
    if (compact) p.lanes[kCompactReceives].channel = kSwapChannel;
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

  // Phase 1 in round order, each round's sends before its receives (the
  // swap's receives wait for its sends), so every lane and every connection
  // carries its ops in round order.
  // (logical rank, peer, channel, sends?) -> lane: one lane per connection.
  std::map<std::tuple<int, int, uint16_t, bool>, int> lane_of;
  auto connection_lane = [&](int logical, int peer, uint16_t channel, bool sends) {
    auto [it, added] = lane_of.try_emplace({logical, peer, channel, sends}, 0);
    if (added) {
      std::vector<Lane>& lanes = s.ranks[phys(logical)].lanes;
      lanes.push_back(Lane{channel, {}});
      it->second = int(lanes.size() - 1);
    }
    return it->second;
  };
  auto channel_of = [&](const StragglarTransfer& x) { return x.from == m || x.reduce ? kSwapChannel : kCopyChannel; };
  std::vector<std::vector<Dep>> final_chunk(n, std::vector<Dep>(m));  // per logical rank: the receive that finished a chunk
  std::vector<Dep> swap_sent(n);                                       // per logical rank: its send of the swap chunk
  std::vector<Dep> straggler_sent(m);                                  // per chunk: the straggler's send of its input
  const StragglarRounds& plan = rounds_for(n);
  for (const std::vector<StragglarTransfer>& round : plan.rounds) {
    for (const StragglarTransfer& x : round) {
      // The straggler sends its own input (swap) or a final chunk; a fast
      // rank its partial sum (swap, after phase 0) or a final chunk (after
      // the receive that brought it).
      const bool from_straggler = x.from == m;
      std::vector<Dep> deps;
      if (!x.reduce) deps.push_back(final_chunk[x.from][x.chunk]);
      else if (!from_straggler) deps.push_back(phase0_done[x.from]);
      const int lane = compact          ? kCompactSends
                       : from_straggler ? kStragglerSends
                       : x.reduce       ? kSwapSend
                                        : connection_lane(x.from, x.to, kCopyChannel, true);
      const ChunkRef src = from_straggler && x.reduce ? input_chunk(x.chunk) : output_chunk(x.chunk);
      const Dep sent = e.add(phys(x.from), lane, OpType::Send, phys(x.to), -1, src, {}, std::move(deps));
      if (x.reduce) (from_straggler ? straggler_sent[x.chunk] : swap_sent[x.from]) = sent;
    }
    for (const StragglarTransfer& x : round) {
      const bool to_straggler = x.to == m;
      std::vector<Dep> deps;
      if (!to_straggler) deps.push_back(phase0_done[x.to]);
      if (x.reduce) deps.push_back(to_straggler ? straggler_sent[x.chunk] : swap_sent[x.to]);
      const int lane = compact ? kCompactReceives : connection_lane(x.to, x.from, channel_of(x), false);
      const ChunkRef dst = output_chunk(x.chunk);
      if (x.reduce) {
        const ChunkRef mine = to_straggler ? input_chunk(x.chunk) : output_chunk(x.chunk);
        final_chunk[x.to][x.chunk] =
            e.add(phys(x.to), lane, OpType::RecvReduceCopy, -1, phys(x.from), mine, dst, std::move(deps));
      } else {
        final_chunk[x.to][x.chunk] = e.add(phys(x.to), lane, OpType::Recv, -1, phys(x.from), {}, dst, std::move(deps));
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

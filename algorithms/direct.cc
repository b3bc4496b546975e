// Direct Gather and Scatter: the root exchanges one block with every other
// rank.  The root's link carries (n-1) blocks, the minimum for these
// collectives; there is nothing for intermediate ranks to add.
// Cost: (n-1)(alpha + beta*m) at the root, m one block.  Any n >= 1, any root.
//
// Direct AllGather and AlltoAll: every rank exchanges its blocks with every
// peer at once, one lane per peer (and one for the local block), instead of
// in a fixed order.  The bytes moved are those of ring AllGather and pairwise
// AlltoAll; what changes is that no rank waits on one particular peer: with
// more ranks than cores, a rank moves data with whichever peers are running
// rather than stalling on the one its next step names.  Each lane sends
// before it receives, on a connection no other lane uses, so in place a
// block is sent before the block from that peer overwrites it.
// Cost: (n-1)(alpha + beta*m) with the alphas overlapped, m one block.
//
// Direct AllReduce and ReduceScatter, and the all-gather-and-fold AllReduce,
// fold in rank order (BRAID_DETERMINISTIC): see the comments above them.
#include "algorithms/builder.h"
#include "braid/algorithms.h"

namespace braid {

Schedule direct_gather(int n, int root) {
  ScheduleBuilder b("direct_gather", Collective::Gather, n, root, 1, n);
  for (int r = 0; r < n; ++r) {
    if (r != root) {
      b.send(r, root, in(0));
      continue;
    }
    b.copy(r, in(0), out(root));
    for (int p = 0; p < n; ++p)
      if (p != root) b.recv(r, p, out(p));
  }
  return b.take();
}

Schedule direct_scatter(int n, int root) {
  ScheduleBuilder b("direct_scatter", Collective::Scatter, n, root, n, 1);
  for (int r = 0; r < n; ++r) {
    if (r != root) {
      b.recv(r, root, out(0));
      continue;
    }
    for (int p = 0; p < n; ++p)
      if (p != root) b.send(r, p, in(p));
    b.copy(r, in(root), out(0));
  }
  return b.take();
}

// AllGather: in place the input is output block `r`, and the local copy
// (a no-op then) counts as a write of it, so it goes first on lane 0 and
// the other lanes send after it (per tile: one fragment's wait).
Schedule direct_allgather(int n) {
  ScheduleBuilder b("direct_allgather", Collective::AllGather, n, -1, 1, n);
  for (int r = 0; r < n; ++r) {
    const Dep copied = b.copy(r, in(0), out(r));
    for (int k = 1; k < n; ++k) {
      const int p = mod(r + k, n), from = mod(r - k, n);
      b.use_lane(r, uint16_t(k - 1));
      b.send(r, p, in(0), k == 1 ? std::vector<Dep>{} : std::vector<Dep>{copied});
      b.recv(r, from, out(from));
    }
  }
  return b.take();
}

// AlltoAll: peer lanes first (the executor polls lanes in order, and the
// local copy never has to wait), the local block on the last lane.
Schedule direct_alltoall(int n) {
  ScheduleBuilder b("direct_alltoall", Collective::AlltoAll, n, -1, n, n);
  for (int r = 0; r < n; ++r) {
    for (int k = 1; k < n; ++k) {
      const int p = mod(r + k, n);
      b.use_lane(r, uint16_t(k - 1));
      b.send(r, p, in(p));
      b.recv(r, p, out(p));
    }
    b.use_lane(r, uint16_t(n - 1));
    b.copy(r, in(r), out(r));
  }
  return b.take();
}

namespace {

// The exchange and fold direct ReduceScatter (the first half of direct
// AllReduce) and allgather_fold share: rank r sends part(p) of its input to
// rank p on lane k-1 (p = r+k: chunk p for direct, the whole input for
// allgather_fold) and receives rank r-k's part(r) into scratch(r-k) there;
// lane n-1 then folds them in rank order into scratch(0) (rank 0's part,
// received, or copied from the input on rank 0: the executors' left operand
// is the reduce's destination), its own part(r) in its turn, and copies the
// result to `result`.  In place, that last copy follows every lane's receive,
// so every send has read the input by then.  Returns the fold's last op.
Dep fold_in_rank_order(ScheduleBuilder& b, int n, int r, ChunkRef (*part)(int), ChunkRef result) {
  b.set_scratch(r, uint32_t(n));
  std::vector<Dep> received(n);
  for (int k = 1; k < n; ++k) {
    const int p = mod(r + k, n), from = mod(r - k, n);
    b.use_lane(r, uint16_t(k - 1));
    b.send(r, p, part(p));
    received[from] = b.recv(r, from, scratch(uint32_t(from)));
  }
  b.use_lane(r, uint16_t(n - 1));
  if (r == 0) b.copy(r, part(0), scratch(0));
  for (int q = 1; q < n; ++q) {
    std::vector<Dep> after;
    if (q == 1 && r != 0) after.push_back(received[0]);  // rank 0's part is the accumulator
    if (q != r) after.push_back(received[q]);
    b.reduce(r, q == r ? part(r) : scratch(uint32_t(q)), scratch(0), std::move(after));
  }
  return b.copy(r, scratch(0), result);
}

ChunkRef chunk_for(int p) { return in(uint32_t(p)); }
ChunkRef whole_input(int) { return in(0); }

}  // namespace

// Direct AllReduce and ReduceScatter in rank order: every rank folds its own
// chunk of every input, x0 (+) x1 (+) ..., from all peers at once (scratch
// holds the n-1 chunks it receives), then AllReduce sends the result to
// every peer.  The bytes of ring (each rank sends and receives (n-1)/n of
// the message per half), two hops, every rank folding 1/n of it; what it
// adds is a pass through scratch.  Cost: 2(alpha + (n-1) beta m/n) with the
// peers' transfers at once, m the message (AllReduce; half for ReduceScatter).
Schedule direct_allreduce(int n) {
  ScheduleBuilder b("direct_allreduce", Collective::AllReduce, n, -1, uint32_t(n), uint32_t(n));
  for (int r = 0; r < n; ++r) {
    if (n == 1) {
      b.copy(r, in(0), out(0));
      continue;
    }
    const Dep folded = fold_in_rank_order(b, n, r, chunk_for, out(uint32_t(r)));
    for (int k = 1; k < n; ++k) {
      const int p = mod(r + k, n), from = mod(r - k, n);
      b.use_lane(r, uint16_t(k - 1));
      b.send(r, p, out(uint32_t(r)), {folded});
      // In place, out(from) is in(from), sent to `from` on lane (from - r) - 1.
      b.recv(r, from, out(uint32_t(from)), {Dep{uint16_t(mod(from - r, n) - 1), 0}});
    }
  }
  return b.take();
}

Schedule direct_reducescatter(int n) {
  ScheduleBuilder b("direct_reducescatter", Collective::ReduceScatter, n, -1, uint32_t(n), 1);
  for (int r = 0; r < n; ++r) {
    if (n == 1) b.copy(r, in(0), out(0));
    else fold_in_rank_order(b, n, r, chunk_for, out(0));
  }
  return b.take();
}

// Rank-order AllReduce in one hop, for small messages: every rank sends its
// whole input to every peer (a lane each, as direct AllGather), receives
// theirs into scratch, and folds all n itself, x0 (+) x1 (+) ..., then
// copies the result to its output (fold_in_rank_order).  (n-1) whole
// messages each way per rank against direct's (n-1)/n of one per hop, but
// one hop, not two, and no second exchange.  Cost: alpha + (n-1) beta m,
// the peers at once.
Schedule allgather_fold_allreduce(int n) {
  ScheduleBuilder b("allgather_fold_allreduce", Collective::AllReduce, n, -1, 1, 1);
  for (int r = 0; r < n; ++r) fold_in_rank_order(b, n, r, whole_input, out(0));
  return b.take();
}

}  // namespace braid

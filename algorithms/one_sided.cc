// One-shot and two-shot collectives on one-sided ops: ranks that can load
// and store each other's buffers (threads of one process, processes of one
// host, GPUs of one NVLink domain) move every byte once, straight from the
// buffer it is in to the buffer it belongs in, instead of through a
// transport's slots (a copy in and a copy out per hop).
//
// Every schedule here opens with a "ready" round: each rank signals every
// peer and waits for every peer's signal, so that no rank touches a peer's
// buffers before the peer is in the call (and has said where they are).  It
// closes with a round that keeps each rank in the call until its peers are
// done with its buffers: a "done" round, or the signals that announce data
// a peer then reads from its own memory.  Both rounds are what the verifier
// checks (schedule.h).
//
// A rank has a lane per peer (its signals, waits and puts to that peer,
// all at once: one thread block each on a GPU) and a local lane (copies,
// and reductions, which must not run at once on one destination).
//
//   oneshot AllReduce   every rank puts its input into every peer's scratch
//                       slot, then folds the slots in rank order: (n-1)
//                       blocks written remotely per rank; small messages.
//                       Rank order makes every output bitwise alike.
//   twoshot AllReduce   rank r reduces block r of every input (gets), then
//                       puts the result into block r of every output:
//                       2(n-1)/n of the buffer in and out per rank, the
//                       bandwidth minimum; large messages.
//   twoshot_ordered AllReduce, oneshot_ordered ReduceScatter
//                       the same, each block folded in rank order (x0 first,
//                       then x1, ...: BRAID_DETERMINISTIC), so every rank
//                       gets from rank 0, then rank 1, ... where the plain
//                       ones start at their next peer; in place, rank r > 1
//                       first saves its own block to scratch (1/n of the
//                       buffer), which the fold of x0 and x1 would
//                       overwrite.
//   oneshot AllGather   puts the input into block r of every output.
//   oneshot ReduceScatter  gets block r of every input, reducing.
//   oneshot Broadcast   the root puts into every output (ready signals to
//                       the root, done signals from it: no all-to-all round).
//   oneshot AlltoAll    puts block q into q's scratch slot r, then copies the
//                       slots out: staged, because in place a direct store
//                       into q's block r would race with q reading it.
// Cost: 2 signal rounds (2 alpha, the peers in parallel) plus the bytes
// above.  Any n >= 1 (with one rank, only local copies remain).
#include "algorithms/builder.h"
#include "braid/algorithms.h"

namespace braid {
namespace {

// Rank r's lanes: one per peer, then the local lane.
class Lanes {
 public:
  Lanes(ScheduleBuilder& b, int r, int n) : b_(b), r_(r), n_(n) {}
  int peer(int k) const { return mod(r_ + k, n_); }  // k = 1 .. n-1
  // Ops from now on go to peer k's lane, or the local lane.
  ScheduleBuilder& on_peer(int k) { return b_.use_lane(r_, uint16_t(k - 1)), b_; }
  ScheduleBuilder& on_local() { return b_.use_lane(r_, uint16_t(n_ - 1)), b_; }
  // Signal and wait for peer k, on its lane (a round: ready, data or
  // done); returns the wait.
  Dep round(int k, std::vector<Dep> after = {}) {
    on_peer(k);
    b_.signal(r_, peer(k), std::move(after));
    return b_.wait(r_, peer(k));
  }
  // Ready rounds with every peer; returns the waits, by peer rank.
  std::vector<Dep> ready_rounds() {
    std::vector<Dep> ready(size_t(n_), Dep{});
    for (int k = 1; k < n_; ++k) ready[size_t(peer(k))] = round(k);
    return ready;
  }

 private:
  ScheduleBuilder& b_;
  int r_, n_;
};

// Rank r's block r of every input (in(r)) reduced into `dst`, on the local
// lane: its peers' from the next one on, its own second (`ordered` false),
// or in rank order.  The first fold reads both operands where they are
// (GetReduceCopy) when its right operand is rank r's own block; rank 0's
// fold starts with its own, copied, and a rank past 1 keeps its own block
// in scratch(0), since dst may be in(r) (schedule.h's in place) and the
// folds before its turn would overwrite it.  `ready` by peer rank.
// Returns the last op.
Dep reduce_block(ScheduleBuilder& b, Lanes& lanes, int r, int n, ChunkRef dst, const std::vector<Dep>& ready,
                 bool ordered) {
  lanes.on_local();
  if (n == 1) return b.copy(r, in(0), dst);
  if (!ordered || r == 1) {
    const int first = ordered ? 0 : lanes.peer(1);
    Dep reduced = b.get_reduce_copy(r, first, in(uint32_t(r)), dst, {ready[size_t(first)]});
    for (int k = 2; k < n; ++k) {
      const int q = ordered ? k : lanes.peer(k);
      reduced = b.get_reduce(r, q, in(uint32_t(r)), dst, {ready[size_t(q)]});
    }
    return reduced;
  }
  if (r == 0) {
    Dep reduced = b.copy(r, in(0), dst);
    for (int q = 1; q < n; ++q) reduced = b.get_reduce(r, q, in(0), dst, {ready[size_t(q)]});
    return reduced;
  }
  b.set_scratch(r, 1);
  b.copy(r, in(uint32_t(r)), scratch(0));
  Dep reduced = b.get(r, 0, in(uint32_t(r)), dst, {ready[0]});
  for (int q = 1; q < n; ++q)
    reduced = q == r ? b.reduce(r, scratch(0), dst) : b.get_reduce(r, q, in(uint32_t(r)), dst, {ready[size_t(q)]});
  return reduced;
}

// Two-shot AllReduce: rank r reduces block r, then puts it into every
// peer's output.
Schedule twoshot(const char* name, int n, bool ordered) {
  ScheduleBuilder b(name, Collective::AllReduce, n, -1, n, n);
  for (int r = 0; r < n; ++r) {
    Lanes lanes(b, r, n);
    const std::vector<Dep> ready = lanes.ready_rounds();
    const Dep reduced = reduce_block(b, lanes, r, n, out(uint32_t(r)), ready, ordered);
    for (int k = 1; k < n; ++k) {
      lanes.on_peer(k).put(r, lanes.peer(k), out(uint32_t(r)), out(uint32_t(r)), {reduced});
      lanes.round(k);  // done
    }
  }
  return b.take();
}

Schedule oneshot_reducescatter(const char* name, int n, bool ordered) {
  ScheduleBuilder b(name, Collective::ReduceScatter, n, -1, n, 1);
  for (int r = 0; r < n; ++r) {
    Lanes lanes(b, r, n);
    const std::vector<Dep> ready = lanes.ready_rounds();
    const Dep reduced = reduce_block(b, lanes, r, n, out(0), ready, ordered);
    for (int k = 1; k < n; ++k) lanes.round(k, {reduced});  // done
  }
  return b.take();
}

}  // namespace

Schedule oneshot_allreduce(int n) {
  ScheduleBuilder b("oneshot_allreduce", Collective::AllReduce, n, -1, 1, 1);
  for (int r = 0; r < n; ++r) {
    Lanes lanes(b, r, n);
    b.set_scratch(r, uint32_t(n));
    std::vector<Dep> landed;  // every peer's data signal
    for (int k = 1; k < n; ++k) {
      lanes.round(k);  // ready: the peer's scratch slots are free
      b.put(r, lanes.peer(k), in(0), scratch(r));
      landed.push_back(lanes.round(k));
    }
    lanes.on_local().copy(r, in(0), scratch(r));
    b.copy(r, scratch(0), out(0), landed);
    for (int q = 1; q < n; ++q) b.reduce(r, scratch(q), out(0));
  }
  return b.take();
}

Schedule twoshot_allreduce(int n) { return twoshot("twoshot_allreduce", n, false); }

Schedule twoshot_ordered_allreduce(int n) { return twoshot("twoshot_ordered_allreduce", n, true); }

Schedule oneshot_allgather(int n) {
  ScheduleBuilder b("oneshot_allgather", Collective::AllGather, n, -1, 1, n);
  for (int r = 0; r < n; ++r) {
    Lanes lanes(b, r, n);
    // In place the input is output block r: the (no-op) copy counts as a
    // write of it, so the puts that read it come after.
    const Dep copied = lanes.on_local().copy(r, in(0), out(r));
    for (int k = 1; k < n; ++k) {
      lanes.round(k);  // ready
      b.put(r, lanes.peer(k), in(0), out(r), {copied});
      lanes.round(k);  // done
    }
  }
  return b.take();
}

Schedule oneshot_reducescatter(int n) { return oneshot_reducescatter("oneshot_reducescatter", n, false); }

Schedule oneshot_ordered_reducescatter(int n) {
  return oneshot_reducescatter("oneshot_ordered_reducescatter", n, true);
}

Schedule oneshot_broadcast(int n, int root) {
  ScheduleBuilder b("oneshot_broadcast", Collective::Broadcast, n, root, 1, 1);
  Lanes lanes(b, root, n);
  const Dep copied = lanes.on_local().copy(root, in(0), out(0));  // first: in place it writes the input
  for (int k = 1; k < n; ++k) {
    lanes.on_peer(k).wait(root, lanes.peer(k));
    b.put(root, lanes.peer(k), in(0), out(0), {copied});
    b.signal(root, lanes.peer(k));
  }
  for (int r = 0; r < n; ++r) {
    if (r == root) continue;
    b.signal(r, root);
    b.wait(r, root);
  }
  return b.take();
}

Schedule oneshot_alltoall(int n) {
  ScheduleBuilder b("oneshot_alltoall", Collective::AlltoAll, n, -1, n, n);
  for (int r = 0; r < n; ++r) {
    Lanes lanes(b, r, n);
    b.set_scratch(r, uint32_t(n));
    std::vector<Dep> landed;
    for (int k = 1; k < n; ++k) {
      lanes.round(k);  // ready
      b.put(r, lanes.peer(k), in(lanes.peer(k)), scratch(r));
      landed.push_back(lanes.round(k));
    }
    lanes.on_local().copy(r, in(r), scratch(r));
    for (int q = 0; q < n; ++q) b.copy(r, scratch(q), out(q), q == 0 ? landed : std::vector<Dep>{});
  }
  return b.take();
}

}  // namespace braid

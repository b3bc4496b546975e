// Chain reductions: every element folded in rank order, for reproducible
// floating-point results (BRAID_DETERMINISTIC's large messages and Reduce;
// algorithms/direct.cc and one_sided.cc fold the others).
//
// Floating-point addition is not associative, so a reduction's bits depend
// on the order it adds the ranks' inputs in.  Ring starts each chunk's sum
// at a different rank, recursive doubling adds pairs of partial sums, and
// which of them runs depends on the message size: the same element, reduced
// in calls of different sizes or at another offset, can come out different.
// Here every element is the left fold x0 (+) x1 (+) ... (+) x(n-1), computed
// in the element type, which is also what the host's one-shot boards, its
// single-copy exchange and the CUDA backend's LL path compute.  The result
// then depends only on the element's n inputs.
//
// The fold runs down a chain 0 -> 1 -> ... -> n-1: rank k receives the
// partial sum of ranks 0..k-1, adds its input (the received value is the
// left operand, as the executors take it) and passes it on.  Fragments
// pipeline down the chain.  Then:
//  - AllReduce: rank n-1 sends the result back up the chain, n-1 -> n-2 ->
//    ... -> 0, on the links' other direction, overlapping the fold;
//  - ReduceScatter: rank n-1 sends each block to its owner;
//  - Reduce: rank n-1 sends the result to the root.
// Each link carries the whole message once per direction: n/(n-1) times
// ring's bytes on a duplex chain, and 2(n-1) hops of latency.  The message
// is cut into n chunks, as ring's, so that the fold of one chunk runs while
// an earlier one travels back (one chunk pipelined only by fragments ran at
// half ring's speed at 256 KiB on 4 processes: perf/results/
// deterministic_20261203.txt).
//
// Cost for an m-byte buffer moved as T fragments (n chunks, each cut to
// the transport's fragment size): (T + 2(n-1))(alpha + beta m/T) for
// AllReduce, whose fold and return use the links' two directions at once,
// so about beta m for T >> n where ring needs 2(n-1)/n beta m on one
// direction; (T + n - 1)(alpha + beta m/T) for ReduceScatter and Reduce,
// against ring's (n-1)/n beta m.  On a CPU every rank but the ends also
// reduces and forwards the whole message, n/(n-1) times ring's work.
// Any n >= 1.
//
// In place, the ops that write an output chunk wait (per fragment) for the
// op of the same rank that reads its input alias.
#include "algorithms/builder.h"
#include "braid/algorithms.h"

namespace braid {

Schedule chain_allreduce(int n) {
  const uint32_t k = uint32_t(n);  // chunks: the fold of one pipelines with the return of another
  ScheduleBuilder b("chain_allreduce", Collective::AllReduce, n, -1, k, k);
  const int last = n - 1;
  for (int r = 0; r < n; ++r) {
    if (n == 1) {
      for (uint32_t c = 0; c < k; ++c) b.copy(r, in(c), out(c));
      continue;
    }
    if (r == last) {  // the fold ends here; each chunk goes back up at once
      for (uint32_t c = 0; c < k; ++c) {
        b.recv_reduce_copy(r, r - 1, in(c), out(c));
        b.send(r, r - 1, out(c));
      }
      continue;
    }
    std::vector<Dep> folded;
    for (uint32_t c = 0; c < k; ++c)
      folded.push_back(r == 0 ? b.send(r, 1, in(c)) : b.recv_reduce_send(r, r - 1, in(c), r + 1));
    b.use_lane(r, 1);
    for (uint32_t c = 0; c < k; ++c) {
      if (r == 0) b.recv(r, 1, out(c), {folded[c]});
      else b.recv_copy_send(r, r + 1, out(c), r - 1, {folded[c]});
    }
  }
  return b.take();
}

Schedule chain_reducescatter(int n) {
  ScheduleBuilder b("chain_reducescatter", Collective::ReduceScatter, n, -1, n, 1);
  const int last = n - 1;
  for (int r = 0; r < n; ++r) {
    if (n == 1) {
      b.copy(r, in(0), out(0));
      continue;
    }
    std::vector<Dep> folded;  // the op reading each input block
    for (int j = 0; j < n; ++j) {
      if (r == 0) folded.push_back(b.send(r, 1, in(j)));
      else if (r < last) folded.push_back(b.recv_reduce_send(r, r - 1, in(j), r + 1));
      else if (j == last) b.recv_reduce_copy(r, r - 1, in(j), out(0));
      else b.recv_reduce_send(r, r - 1, in(j), j);
    }
    if (r == last) continue;
    b.use_lane(r, 1);  // in place, the output is input block r
    b.recv(r, last, out(0), {folded[size_t(r)]});
  }
  return b.take();
}

Schedule chain_reduce(int n, int root) {
  const uint32_t k = uint32_t(n);
  ScheduleBuilder b("chain_reduce", Collective::Reduce, n, root, k, k);
  const int last = n - 1;
  for (int r = 0; r < n; ++r) {
    std::vector<Dep> folded;
    for (uint32_t c = 0; c < k; ++c) {
      if (n == 1) b.copy(r, in(c), out(c));
      else if (r == 0) folded.push_back(b.send(r, 1, in(c)));
      else if (r < last) folded.push_back(b.recv_reduce_send(r, r - 1, in(c), r + 1));
      else if (r == root) b.recv_reduce_copy(r, r - 1, in(c), out(c));
      else b.recv_reduce_send(r, r - 1, in(c), root);
    }
    if (r != root || r == last) continue;
    b.use_lane(r, 1);
    for (uint32_t c = 0; c < k; ++c) b.recv(r, last, out(c), {folded[c]});
  }
  return b.take();
}

}  // namespace braid

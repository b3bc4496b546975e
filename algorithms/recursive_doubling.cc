// Recursive doubling AllReduce: latency-optimal for small messages.
//
// With p = 2^k ranks, in step j every rank swaps its partial result with the
// rank whose index differs in bit j and reduces: log2(p) steps, each moving
// the whole (small) buffer.  For n not a power of two the first 2*rem ranks
// (rem = n - p) pair up first: each even one hands its input to its odd
// neighbour, which joins the power-of-two exchange, and gets the result back
// at the end.  Both sides of an exchange send before they receive, so one
// buffered chunk per connection suffices.  Reductions are commutative in
// every NCCL type, so partners end with bit-identical results.
//
// Cost: log2(p)(alpha + beta*m), plus 2(alpha + beta*m) for the fold when
// n is not a power of two.  Any n >= 1.
#include "algorithms/builder.h"
#include "braid/algorithms.h"

namespace braid {

Schedule recursive_doubling_allreduce(int n) {
  ScheduleBuilder b("rd_allreduce", Collective::AllReduce, n, -1, 1, 1);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  // Rank of the exchange member `v` (0 <= v < p).
  auto member = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  for (int r = 0; r < n; ++r) {
    if (r < 2 * rem && r % 2 == 0) {  // folded out: hand over, wait for the result
      b.send(r, r + 1, in(0));
      b.recv(r, r + 1, out(0));
      continue;
    }
    int v;
    if (r < 2 * rem) {
      b.recv_reduce_copy(r, r - 1, in(0), out(0));
      v = r / 2;
    } else {
      b.copy(r, in(0), out(0));
      v = r - rem;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
      int partner = member(v ^ mask);
      b.send(r, partner, out(0));
      b.recv_reduce_copy(r, partner, out(0), out(0));
    }
    if (r < 2 * rem) b.send(r, r - 1, out(0));
  }
  return b.take();
}

}  // namespace braid

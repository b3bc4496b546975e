// Pairwise AlltoAll: n steps; in step k rank r exchanges with p = (k - r)
// mod n.  That pairing is symmetric (p's partner in step k is r), so every
// pair meets exactly once and each rank sends before it receives: one
// buffered chunk per connection is enough, and block p is sent before the
// block from p overwrites it, which makes the schedule correct in place.
// When p == r the block is copied locally.
//
// Cost: (n-1)(alpha + beta*m), m one per-peer block.  Any n >= 1.
#include "algorithms/builder.h"
#include "braid/algorithms.h"

namespace braid {

Schedule pairwise_alltoall(int n) {
  ScheduleBuilder b("pairwise_alltoall", Collective::AlltoAll, n, -1, n, n);
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < n; ++k) {
      const int p = mod(k - r, n);
      if (p == r) {
        b.copy(r, in(r), out(r));
      } else {
        b.send(r, p, in(p));
        b.recv(r, p, out(p));
      }
    }
  }
  return b.take();
}

}  // namespace braid

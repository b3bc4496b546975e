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

}  // namespace braid

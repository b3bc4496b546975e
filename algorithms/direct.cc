// Direct Gather and Scatter: the root exchanges one block with every other
// rank.  The root's link carries (n-1) blocks, the minimum for these
// collectives; there is nothing for intermediate ranks to add.
// Cost: (n-1)(alpha + beta*m) at the root, m one block.  Any n >= 1, any root.
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

}  // namespace braid

// Binomial trees for Broadcast and Reduce: ceil(log2 n) rounds.
//
// Ranks are renumbered relative to the root (v = rank - root mod n).  The
// parent of v clears v's lowest set bit; the children of v are v + 2^j for
// every 2^j below that bit.  Broadcast forwards down the tree, largest
// subtree first (the first child is fed by a fused recv-copy-send); Reduce
// gathers up the tree, smallest subtree first, accumulating in a scratch
// chunk (non-root ranks have no output buffer) and fusing the last child's
// reduction with the send to the parent.
//
// Cost: ceil(log2 n)(alpha + beta*m) on the critical path.  Any n >= 1, any root.
#include <vector>

#include "algorithms/builder.h"
#include "braid/algorithms.h"

namespace braid {
namespace {

struct TreeNode {
  int parent = -1;            // actual rank, -1 for the root
  std::vector<int> children;  // actual ranks, largest subtree first
};

TreeNode binomial_node(int n, int root, int r) {
  TreeNode node;
  const int v = mod(r - root, n);
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      node.parent = mod(v - mask + root, n);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) node.children.push_back(mod(v + mask + root, n));
  return node;
}

}  // namespace

Schedule binomial_broadcast(int n, int root) {
  ScheduleBuilder b("binomial_broadcast", Collective::Broadcast, n, root, 1, 1);
  for (int r = 0; r < n; ++r) {
    TreeNode node = binomial_node(n, root, r);
    size_t first = 0;
    if (r == root) {
      b.copy(r, in(0), out(0));
    } else if (node.children.empty()) {
      b.recv(r, node.parent, out(0));
    } else {
      b.recv_copy_send(r, node.parent, out(0), node.children[0]);
      first = 1;
    }
    // The root sends from its input, which the copy just read into cache
    // (a large output is written around the cache).
    const ChunkRef from = r == root ? in(0) : out(0);
    for (size_t c = first; c < node.children.size(); ++c) b.send(r, node.children[c], from);
  }
  return b.take();
}

Schedule binomial_reduce(int n, int root) {
  ScheduleBuilder b("binomial_reduce", Collective::Reduce, n, root, 1, 1);
  for (int r = 0; r < n; ++r) {
    TreeNode node = binomial_node(n, root, r);
    std::vector<int> kids(node.children.rbegin(), node.children.rend());  // smallest subtree first
    if (r == root) {
      if (kids.empty()) b.copy(r, in(0), out(0));
      for (size_t c = 0; c < kids.size(); ++c) b.recv_reduce_copy(r, kids[c], c == 0 ? in(0) : out(0), out(0));
      continue;
    }
    if (kids.empty()) {
      b.send(r, node.parent, in(0));
      continue;
    }
    if (kids.size() > 1) b.set_scratch(r, 1);
    for (size_t c = 0; c + 1 < kids.size(); ++c) b.recv_reduce_copy(r, kids[c], c == 0 ? in(0) : scratch(0), scratch(0));
    b.recv_reduce_send(r, kids.back(), kids.size() == 1 ? in(0) : scratch(0), node.parent);
  }
  return b.take();
}

}  // namespace braid

// Stage 2: heuristic ordering.  Given each chunk's links, decide when each
// link transfer happens, so each link's (and port's) sends get an order.
//
// List scheduling: a transfer is ready when the transfers it depends on have
// arrived (the one that brought the chunk; for AllReduce's ReduceScatter
// phase, every child's partial sum).  Repeatedly the ready transfer that can
// start earliest on its link and ports is placed there, ties going to the
// one with the longest remaining path (critical path first, as in TACCL).
// Cost: O(transfers^2) scans, a few milliseconds at thousands of transfers.
#include <algorithm>
#include <limits>

#include "synth/problem.h"

namespace braid::synth {

double order_transfers(const Problem& p, const Routes& routes, bool allreduce, std::vector<Transfer>* out) {
  const Topology& t = *p.topo;
  const int n = t.nranks();
  std::vector<Transfer>& xs = *out;
  xs.clear();
  for (size_t c = 0; c < routes.size(); ++c) {
    // Index tree edges by their head so parents and children are found.
    std::vector<int> ag_into(n, -1), rs_from(n, -1);
    std::vector<std::vector<int>> children(n);
    for (int e : routes[c]) children[t.links[e].src].push_back(e);
    const int src = p.chunks[c].src;
    if (allreduce) {
      for (int e : routes[c]) {
        const Link& l = t.links[e];
        rs_from[l.dst] = int(xs.size());
        xs.push_back({int(c), t.link_index(l.dst, l.src), true, {}});
      }
      for (int e : routes[c]) {  // the partial sum leaves v after v's children arrive
        int v = t.links[e].dst;
        for (int f : children[v]) xs[rs_from[v]].preds.push_back(rs_from[t.links[f].dst]);
      }
    }
    // AllGather edges in BFS order from the source, so parents come first.
    std::vector<int> order, frontier{src};
    while (!frontier.empty()) {
      std::vector<int> next;
      for (int u : frontier)
        for (int e : children[u]) order.push_back(e), next.push_back(t.links[e].dst);
      frontier = next;
    }
    for (int e : order) {
      const Link& l = t.links[e];
      Transfer x{int(c), e, false, {}};
      if (l.src != src) x.preds.push_back(ag_into[l.src]);
      else if (allreduce)
        for (int f : children[src]) x.preds.push_back(rs_from[t.links[f].dst]);
      ag_into[l.dst] = int(xs.size());
      xs.push_back(std::move(x));
    }
  }
  const size_t m = xs.size();
  std::vector<std::vector<int>> succ(m);
  for (size_t i = 0; i < m; ++i)
    for (int q : xs[i].preds) succ[q].push_back(int(i));
  // Remaining path cost (critical path) by a reverse topological pass.
  std::vector<int> indeg(m), topo_order;
  for (size_t i = 0; i < m; ++i) indeg[i] = int(xs[i].preds.size());
  for (size_t i = 0; i < m; ++i)
    if (!indeg[i]) topo_order.push_back(int(i));
  for (size_t k = 0; k < topo_order.size(); ++k)
    for (int s : succ[topo_order[k]])
      if (--indeg[s] == 0) topo_order.push_back(s);
  std::vector<double> priority(m, 0);
  for (auto it = topo_order.rbegin(); it != topo_order.rend(); ++it) {
    double best = 0;
    for (int s : succ[*it]) best = std::max(best, priority[s]);
    priority[*it] = p.cost(xs[*it].link) + best;
  }
  std::vector<double> link_free(t.links.size(), 0), port_free(t.ports.size(), 0), ready(m, 0);
  std::vector<int> waiting(m);
  std::vector<int> candidates;
  for (size_t i = 0; i < m; ++i) {
    waiting[i] = int(xs[i].preds.size());
    if (!waiting[i]) candidates.push_back(int(i));
  }
  double makespan = 0;
  for (size_t placed = 0; placed < m; ++placed) {
    int best = -1;
    double best_start = std::numeric_limits<double>::infinity();
    size_t best_pos = 0;
    for (size_t k = 0; k < candidates.size(); ++k) {
      int i = candidates[k];
      const Link& l = t.links[xs[i].link];
      double s = std::max(ready[i], link_free[xs[i].link]);
      for (int port : l.ports) s = std::max(s, port_free[port]);
      if (s < best_start - 1e-12 || (s < best_start + 1e-12 && best >= 0 && priority[i] > priority[best] + 1e-12)) {
        best = i, best_start = s, best_pos = k;
      }
    }
    candidates.erase(candidates.begin() + best_pos);
    Transfer& x = xs[best];
    const Link& l = t.links[x.link];
    x.start = best_start;
    x.end = x.arrive = best_start + p.cost(x.link);  // alpha holds the link too (the simulator's model)
    x.seq = int(placed);
    link_free[x.link] = x.end;
    for (int port : l.ports) port_free[port] = x.end;
    makespan = std::max(makespan, x.arrive);
    for (int s : succ[best]) {
      ready[s] = std::max(ready[s], x.arrive);
      if (--waiting[s] == 0) candidates.push_back(s);
    }
  }
  return makespan;
}

}  // namespace braid::synth

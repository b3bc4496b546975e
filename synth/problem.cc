// Building the routing problem from a topology and a sketch: which links a
// chunk may take (the sketch's allowed links, then only those on a shortest
// path from its source to one of its destinations), and which rank
// permutations (symmetry_offsets) leave the problem unchanged.
//
// Shortest paths are taken two ways, and a link on either kind is a
// candidate: fewest hops (TACCL's rule), and least time (alpha + beta *
// chunk per link).  Hops alone would never let a chunk relay over two fast
// links instead of crossing one slow one, and on a topology whose links
// differ in speed that made schedules slower than ring.  Where every link
// costs the same the two sets are the same, so the MILP does not grow.
//
// Cost: per source rank, a BFS and a Dijkstra each way per destination:
// O(ranks^2 * links log ranks), well under a second at 64 ranks.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <set>

#include "synth/problem.h"

namespace braid::synth {
namespace {

bool sketch_allows(const Topology& t, const Sketch& s, const Link& l, int chunk_src) {
  const int g = t.gpus_per_node;
  int nu = l.src / g, nv = l.dst / g, lu = l.src % g, lv = l.dst % g;
  if (nu == nv) {
    if (!s.intra_switch) return true;
    for (const auto& sw : s.switches)
      if (std::count(sw.begin(), sw.end(), lu) && std::count(sw.begin(), sw.end(), lv)) return true;
    return false;
  }
  if (nu != chunk_src / g) return false;  // a chunk leaves only its own node
  switch (s.inter) {
    case Sketch::InterConn::FullyConnected: break;
    case Sketch::InterConn::DirectMap:
      if (lu != lv) return false;
      break;
    case Sketch::InterConn::Custom: {
      auto it = s.internode_conn.find(lu);
      if (it == s.internode_conn.end() || !std::count(it->second.begin(), it->second.end(), lv)) return false;
      break;
    }
  }
  if (!s.gpus_to_sender_rev_map.empty()) {
    auto it = s.gpus_to_sender_rev_map.find(lu);
    if (it == s.gpus_to_sender_rev_map.end() || !std::count(it->second.begin(), it->second.end(), chunk_src % g))
      return false;
  }
  return true;
}

std::vector<int> bfs(int n, const std::vector<std::vector<int>>& adj, int from) {
  std::vector<int> d(n, -1);
  std::deque<int> q{from};
  d[from] = 0;
  while (!q.empty()) {
    int u = q.front();
    q.pop_front();
    for (int v : adj[u])
      if (d[v] < 0) d[v] = d[u] + 1, q.push_back(v);
  }
  return d;
}

// Least time from `from` to every rank over `edges` (link indices), walking
// them forwards, or backwards for the time *to* `from`; infinity where none.
std::vector<double> dijkstra(const Problem& p, const std::vector<int>& edges, int from, bool backwards) {
  const Topology& t = *p.topo;
  std::vector<std::vector<int>> out(size_t(t.nranks()));
  for (int e : edges) out[size_t(backwards ? t.links[e].dst : t.links[e].src)].push_back(e);
  std::vector<double> d(size_t(t.nranks()), std::numeric_limits<double>::infinity());
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> q;
  q.push({d[size_t(from)] = 0, from});
  while (!q.empty()) {
    auto [du, u] = q.top();
    q.pop();
    if (du > d[size_t(u)]) continue;
    for (int e : out[size_t(u)]) {
      const int v = backwards ? t.links[e].src : t.links[e].dst;
      if (du + p.cost(e) < d[size_t(v)]) q.push({d[size_t(v)] = du + p.cost(e), v});
    }
  }
  return d;
}

}  // namespace

double Problem::cost(int link) const { return topo->links[link].alpha_us + load(link); }
double Problem::load(int link) const { return topo->links[link].beta_us_per_mb * chunk_mb; }

int Problem::chunk_index(int src, int dst, int j) const {
  const int n = topo->nranks();
  return alltoall ? (src * n + dst) * chunkup + j : src * chunkup + j;
}

int Problem::map_chunk(const std::vector<int>& g, int c) const {
  const Chunk& k = chunks[c];
  return chunk_index(g[k.src], alltoall ? g[k.dst] : -1, k.j);
}

bool build_problem(const Topology& t, const Sketch& s, bool alltoall, double chunk_mb, Problem* p, std::string* error) {
  const int n = t.nranks();
  if (t.nodes != s.nnodes)
    return *error = fmt::format("the sketch is for {} nodes, the topology {} has {}", s.nnodes, t.name, t.nodes), false;
  if (n < 2) return *error = "synthesis needs at least 2 ranks", false;
  p->topo = &t;
  p->sketch = &s;
  p->alltoall = alltoall;
  p->chunkup = s.input_chunkup;
  p->chunk_mb = chunk_mb;
  p->chunks.clear();
  for (int src = 0; src < n; ++src)
    for (int dst = 0; dst < (alltoall ? n : 1); ++dst)
      for (int j = 0; j < s.input_chunkup; ++j) {
        Chunk c{src, alltoall ? dst : -1, j, {}};
        if (alltoall) {
          if (dst != src) c.dests = {dst};
        } else {
          for (int d = 0; d < n; ++d)
            if (d != src) c.dests.push_back(d);
        }
        p->chunks.push_back(std::move(c));
      }
  p->candidates.assign(p->chunks.size(), {});
  // Allowed links depend on the chunk only through its source rank.
  for (int src = 0; src < n; ++src) {
    std::vector<int> allowed;
    std::vector<std::vector<int>> adj(n), radj(n);
    for (size_t i = 0; i < t.links.size(); ++i)
      if (sketch_allows(t, s, t.links[i], src)) {
        allowed.push_back(int(i));
        adj[t.links[i].src].push_back(t.links[i].dst);
        radj[t.links[i].dst].push_back(t.links[i].src);
      }
    std::vector<int> from_src = bfs(n, adj, src);
    std::vector<std::vector<int>> to_dst(n);
    for (int d = 0; d < n; ++d) to_dst[d] = bfs(n, radj, d);
    const std::vector<double> time_from_src = dijkstra(*p, allowed, src, false);
    std::vector<std::vector<double>> time_to_dst(n);
    for (int d = 0; d < n; ++d) time_to_dst[d] = dijkstra(*p, allowed, d, true);
    auto on_fastest = [&](int i, int d) {  // link i lies on a least-time path from src to d
      const Link& l = t.links[i];
      const double via = time_from_src[l.src] + p->cost(i) + time_to_dst[d][l.dst];
      return std::isfinite(via) && via <= time_from_src[d] * (1 + 1e-9);
    };
    for (size_t c = 0; c < p->chunks.size(); ++c) {
      const Chunk& k = p->chunks[c];
      if (k.src != src) continue;
      std::set<int> on_path;
      for (int d : k.dests) {
        if (from_src[d] < 0)
          return *error = fmt::format("the sketch leaves rank {} unreachable from rank {}", d, src), false;
        for (int i : allowed) {
          const Link& l = t.links[i];
          if ((from_src[l.src] >= 0 && to_dst[d][l.dst] >= 0 && from_src[l.src] + 1 + to_dst[d][l.dst] == from_src[d]) ||
              on_fastest(i, d))
            on_path.insert(i);
        }
      }
      p->candidates[c].assign(on_path.begin(), on_path.end());
    }
  }
  // Symmetries: keep a rank rotation only if it maps every chunk's candidate
  // links onto the image chunk's candidates at the same cost.
  p->symmetries.clear();
  for (auto [offset, group] : s.symmetry_offsets) {
    if (group > n || n % group != 0 || offset % group == 0) continue;
    std::vector<int> g(n);
    for (int r = 0; r < n; ++r) g[r] = (r / group) * group + (r % group + offset) % group;
    bool ok = true;
    for (size_t c = 0; c < p->chunks.size() && ok; ++c) {
      int gc = p->map_chunk(g, int(c));
      const auto& img = p->candidates[gc];
      for (int e : p->candidates[c]) {
        int ge = t.link_index(g[t.links[e].src], g[t.links[e].dst]);
        if (ge < 0 || !std::binary_search(img.begin(), img.end(), ge) ||
            std::abs(p->cost(ge) - p->cost(e)) > 1e-9 || t.links[ge].ports.size() != t.links[e].ports.size()) {
          ok = false;
          break;
        }
      }
    }
    if (ok) p->symmetries.push_back(std::move(g));
  }
  return true;
}

}  // namespace braid::synth

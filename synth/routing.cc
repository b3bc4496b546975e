// Stage 1: routing.  Which links each chunk takes.
//
// The MILP (after TACCL's, written for CBC):
//   x[c][e] in {0,1}  chunk c crosses link e (e among c's candidate links)
//   t[c][v] >= 0      time chunk c is at rank v
//   T                 completion time (minimised)
//   each destination of c has exactly one incoming x; other ranks at most one;
//   x[c][(u,v)] <= sum x[c][(*,u)]         (u forwards only what it received)
//   t[c][v] >= t[c][u] + cost(e) - M (1 - x[c][e])
//   T >= t[c][d] for destinations;  T >= sum_c cost(e) x[c][e] per link;
//   T >= sum over links through a port of their costs (switch ports, NICs)
//   (a transfer holds its link for alpha + beta: the simulator's model; the
//   merging of stage 3 is not foreseen here)
//   uc-min / uc-max switches: +/- a small weight per distinct pair used.
// Symmetry is variable aliasing: (c, e) and (g(c), g(e)) share one column
// (union-find), and per-chunk rows are written for one chunk per orbit.
// A greedy, load-balancing shortest-path tree per chunk gives the first
// incumbent (CBC's MIP start) and the big-M bound: M = T_heuristic + max cost.
//
// Size: columns ~ sum of candidate links over chunks / |symmetry group|;
// CBC's branch and bound is exponential in the worst case, hence the time
// limit with the best solution kept.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <unordered_map>

#include "synth/milp.h"
#include "synth/problem.h"

namespace braid::synth {
namespace {

struct UnionFind {
  std::vector<int> parent;
  int add() {
    parent.push_back(int(parent.size()));
    return parent.back();
  }
  int find(int a) {
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
  }
  void join(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

// Heuristic tree for chunk c: destinations in BFS order, each attached by the
// candidate link with the least load so far (ties: the lower link index).
std::vector<int> greedy_tree(const Problem& p, int c, std::vector<double>* link_load) {
  const Topology& t = *p.topo;
  const Chunk& k = p.chunks[c];
  const int n = t.nranks();
  std::vector<std::vector<int>> in(n);
  for (int e : p.candidates[c]) in[t.links[e].dst].push_back(e);
  // Distance from the source over candidate links.
  std::vector<int> dist(n, -1);
  std::deque<int> q{k.src};
  dist[k.src] = 0;
  std::vector<std::vector<int>> out(n);
  for (int e : p.candidates[c]) out[t.links[e].src].push_back(e);
  while (!q.empty()) {
    int u = q.front();
    q.pop_front();
    for (int e : out[u])
      if (dist[t.links[e].dst] < 0) dist[t.links[e].dst] = dist[u] + 1, q.push_back(t.links[e].dst);
  }
  std::vector<int> parent_link(n, -1);
  std::vector<bool> have(n, false);
  have[k.src] = true;
  auto attach = [&](int v) {
    // Walk back from v to something we have, picking the lightest links.
    std::vector<int> chain;
    while (!have[v]) {
      int best = -1;
      for (int e : in[v]) {
        int u = t.links[e].src;
        if (dist[u] != dist[v] - 1) continue;
        if (best < 0 || (*link_load)[e] + (have[u] ? 0 : 1e-3) < (*link_load)[best] + (have[t.links[best].src] ? 0 : 1e-3))
          best = e;
      }
      if (best < 0) return false;
      chain.push_back(best);
      have[v] = true;
      parent_link[v] = best;
      v = t.links[best].src;
    }
    for (int e : chain) (*link_load)[e] += p.load(e);
    return true;
  };
  std::vector<int> dests = k.dests;
  std::stable_sort(dests.begin(), dests.end(), [&](int a, int b) { return dist[a] < dist[b]; });
  for (int d : dests)
    if (!attach(d)) return {};
  std::vector<int> tree;
  for (int v = 0; v < n; ++v)
    if (parent_link[v] >= 0) tree.push_back(parent_link[v]);
  return tree;
}

// Checks that `edges` form a tree from the source reaching every destination,
// and drops branches that reach no destination.
bool clean_tree(const Problem& p, int c, std::vector<int>* edges) {
  const Topology& t = *p.topo;
  const Chunk& k = p.chunks[c];
  const int n = t.nranks();
  std::vector<int> in_count(n, 0);
  for (int e : *edges) in_count[t.links[e].dst]++;
  for (int v = 0; v < n; ++v)
    if (in_count[v] > 1) return false;
  std::vector<bool> reached(n, false);
  reached[k.src] = true;
  bool grew = true;
  while (grew) {
    grew = false;
    for (int e : *edges)
      if (reached[t.links[e].src] && !reached[t.links[e].dst]) reached[t.links[e].dst] = grew = true;
  }
  for (int d : k.dests)
    if (!reached[d]) return false;
  std::vector<bool> is_dest(n, false);
  for (int d : k.dests) is_dest[d] = true;
  bool pruned = true;
  while (pruned) {
    pruned = false;
    for (size_t i = 0; i < edges->size(); ++i) {
      int v = t.links[(*edges)[i]].dst;
      bool forwards = false;
      for (int e : *edges) forwards = forwards || t.links[e].src == v;
      if (!reached[t.links[(*edges)[i]].src] || (!is_dest[v] && !forwards)) {
        edges->erase(edges->begin() + i);
        pruned = true;
        break;
      }
    }
  }
  return true;
}

}  // namespace

bool route_chunks(const Problem& p, const SynthOptions& o, Routes* routes, RoutingStats* stats, std::string* error) {
  const Topology& t = *p.topo;
  const int nchunks = int(p.chunks.size());
  const int n = t.nranks();
  // Orbits of chunks under the symmetries.
  UnionFind chunk_uf;
  for (int c = 0; c < nchunks; ++c) chunk_uf.add();
  for (const auto& g : p.symmetries)
    for (int c = 0; c < nchunks; ++c) chunk_uf.join(c, p.map_chunk(g, c));
  std::vector<bool> representative(nchunks);
  for (int c = 0; c < nchunks; ++c) representative[c] = chunk_uf.find(c) == c;

  // Column slots with aliasing: x for (chunk, link), t for (chunk, rank).
  UnionFind uf;
  std::unordered_map<int64_t, int> x_slot, t_slot;
  auto xkey = [&](int c, int e) { return int64_t(c) * int64_t(t.links.size()) + e; };
  auto tkey = [&](int c, int v) { return int64_t(c) * n + v; };
  for (int c = 0; c < nchunks; ++c)
    for (int e : p.candidates[c]) {
      x_slot[xkey(c, e)] = uf.add();
      int v = t.links[e].dst;
      if (!t_slot.count(tkey(c, v))) t_slot[tkey(c, v)] = uf.add();
    }
  for (const auto& g : p.symmetries)
    for (int c = 0; c < nchunks; ++c) {
      int gc = p.map_chunk(g, c);
      for (int e : p.candidates[c]) {
        int ge = t.link_index(g[t.links[e].src], g[t.links[e].dst]);
        uf.join(x_slot.at(xkey(c, e)), x_slot.at(xkey(gc, ge)));
        uf.join(t_slot.at(tkey(c, t.links[e].dst)), t_slot.at(tkey(gc, t.links[ge].dst)));
      }
    }

  // Heuristic routes for the representatives, spread over their orbits.
  std::vector<double> link_load(t.links.size(), 0);
  std::vector<int> slot_value(uf.parent.size(), 0);
  for (int c = 0; c < nchunks; ++c) {
    if (!representative[c]) continue;
    std::vector<int> tree = greedy_tree(p, c, &link_load);
    if (tree.empty() && !p.chunks[c].dests.empty()) return *error = fmt::format("no route for chunk {} of rank {}", p.chunks[c].j, p.chunks[c].src), false;
    for (int e : tree) slot_value[uf.find(x_slot.at(xkey(c, e)))] = 1;
  }
  Routes heuristic(nchunks);
  for (int c = 0; c < nchunks; ++c)
    for (int e : p.candidates[c])
      if (slot_value[uf.find(x_slot.at(xkey(c, e)))]) heuristic[c].push_back(e);
  for (int c = 0; c < nchunks; ++c)
    if (!clean_tree(p, c, &heuristic[c]))
      return *error = "internal: the symmetric heuristic routes are not trees (symmetry_offsets inconsistent?)", false;

  // The relaxed objective of a set of routes (also the MIP start's T).
  auto evaluate = [&](const Routes& r, std::vector<std::vector<double>>* times) {
    std::vector<double> lload(t.links.size(), 0), pload(t.ports.size(), 0);
    double T = 0;
    times->assign(nchunks, std::vector<double>(n, 0));
    for (int c = 0; c < nchunks; ++c) {
      for (int e : r[c]) {
        lload[e] += p.cost(e);
        for (int port : t.links[e].ports) pload[port] += p.cost(e);
      }
      // Tree edges in BFS order from the source.
      std::vector<bool> done(n, false);
      done[p.chunks[c].src] = true;
      bool grew = true;
      while (grew) {
        grew = false;
        for (int e : r[c]) {
          const Link& l = t.links[e];
          if (done[l.src] && !done[l.dst]) (*times)[c][l.dst] = (*times)[c][l.src] + p.cost(e), done[l.dst] = grew = true;
        }
      }
      for (int d : p.chunks[c].dests) T = std::max(T, (*times)[c][d]);
    }
    for (double v : lload) T = std::max(T, v);
    for (double v : pload) T = std::max(T, v);
    return T;
  };
  std::vector<std::vector<double>> heuristic_times;
  const double T0 = evaluate(heuristic, &heuristic_times);
  stats->heuristic_objective = T0;
  *routes = heuristic;
  if (!o.use_milp) return true;
  if (!milp_available()) return *error = "the routing MILP needs COIN-OR CBC (or use the heuristic)", false;

  // Columns.
  Milp m;
  double max_cost = 0, min_load = 1e300;
  for (int c = 0; c < nchunks; ++c)
    for (int e : p.candidates[c]) max_cost = std::max(max_cost, p.cost(e)), min_load = std::min(min_load, p.load(e));
  const double M = T0 + max_cost;
  std::vector<int> column_of_root(uf.parent.size(), -1);
  std::vector<double> start;
  auto column = [&](int slot, bool binary) {
    int root = uf.find(slot);
    if (column_of_root[root] < 0) {
      column_of_root[root] = m.add_col(0, binary ? 1 : T0, 0, binary);
      start.push_back(0);
    }
    return column_of_root[root];
  };
  const int T = m.add_col(0, T0, 1, false);
  start.push_back(T0);
  auto X = [&](int c, int e) { return column(x_slot.at(xkey(c, e)), true); };
  auto Tm = [&](int c, int v) { return column(t_slot.at(tkey(c, v)), false); };
  for (int c = 0; c < nchunks; ++c)
    for (int e : p.candidates[c]) {
      start[X(c, e)] = std::count(heuristic[c].begin(), heuristic[c].end(), e) ? 1 : 0;
      start[Tm(c, t.links[e].dst)] = heuristic_times[c][t.links[e].dst];
    }
  // Per-chunk rows, one chunk per orbit.
  for (int c = 0; c < nchunks; ++c) {
    if (!representative[c]) continue;
    const Chunk& k = p.chunks[c];
    std::map<int, std::vector<int>> in_links;
    for (int e : p.candidates[c]) in_links[t.links[e].dst].push_back(e);
    std::vector<bool> is_dest(n, false);
    for (int d : k.dests) is_dest[d] = true;
    for (auto& [v, links] : in_links) {
      std::vector<std::pair<int, double>> terms;
      for (int e : links) terms.push_back({X(c, e), 1});
      m.add_row(terms, is_dest[v] ? 'E' : 'L', 1);
      if (is_dest[v]) m.add_row({{T, 1}, {Tm(c, v), -1}}, 'G', 0);
    }
    for (int e : p.candidates[c]) {
      const Link& l = t.links[e];
      if (l.src != k.src) {
        std::vector<std::pair<int, double>> terms{{X(c, e), 1}};
        for (int f : in_links[l.src]) terms.push_back({X(c, f), -1});
        m.add_row(terms, 'L', 0);
      }
      // t[v] - t[u] - M x >= cost - M   (t[src] = 0)
      std::vector<std::pair<int, double>> terms{{Tm(c, l.dst), 1}, {X(c, e), -M}};
      if (l.src != k.src) terms.push_back({Tm(c, l.src), -1});
      m.add_row(terms, 'G', p.cost(e) - M);
    }
  }
  // Bandwidth rows: per link and per port.
  std::vector<std::vector<std::pair<int, double>>> link_terms(t.links.size()), port_terms(t.ports.size());
  for (int c = 0; c < nchunks; ++c)
    for (int e : p.candidates[c]) {
      link_terms[e].push_back({X(c, e), -p.cost(e)});
      for (int port : t.links[e].ports) port_terms[port].push_back({X(c, e), -p.cost(e)});
    }
  for (auto* group : {&link_terms, &port_terms})
    for (auto& terms : *group) {
      if (terms.empty()) continue;
      terms.push_back({T, 1});
      m.add_row(terms, 'G', 0);
    }
  // uc-min / uc-max: a small weight per distinct GPU pair used on the switch.
  if (p.sketch->intra_switch) {
    const double eps = 1e-3 * min_load;
    const int g = t.gpus_per_node;
    for (size_t e = 0; e < t.links.size(); ++e) {
      const Link& l = t.links[e];
      if (l.src / g != l.dst / g) continue;
      std::string strategy;
      for (size_t w = 0; w < p.sketch->switches.size(); ++w) {
        const auto& sw = p.sketch->switches[w];
        if (std::count(sw.begin(), sw.end(), l.src % g) && std::count(sw.begin(), sw.end(), l.dst % g))
          strategy = p.sketch->switch_strategy[w];
      }
      if (strategy.empty()) continue;
      std::vector<int> xs;
      for (int c = 0; c < nchunks; ++c)
        if (std::binary_search(p.candidates[c].begin(), p.candidates[c].end(), int(e))) xs.push_back(X(c, int(e)));
      if (xs.empty()) continue;
      std::sort(xs.begin(), xs.end());
      xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
      bool used = false;
      for (int x : xs) used = used || start[x] > 0.5;
      int y = m.add_col(0, 1, strategy == "uc-min" ? eps : -eps, true);
      start.push_back(used ? 1 : 0);
      if (strategy == "uc-min") {
        for (int x : xs) m.add_row({{y, 1}, {x, -1}}, 'G', 0);
      } else {
        std::vector<std::pair<int, double>> terms{{y, 1}};
        for (int x : xs) terms.push_back({x, -1});
        m.add_row(terms, 'L', 0);
      }
    }
  }
  stats->columns = m.cols();
  stats->rows = m.rows();
  if (o.progress)
    o.progress(fmt::format("routing MILP: {} columns, {} rows, {} symmetries; heuristic T = {:.2f} us; limit {:.0f} s",
                           m.cols(), m.rows(), p.symmetries.size(), T0, o.time_limit_s));
  // CBC 2.10 can crash in its preprocessing (CglPreProcess::postProcess)
  // when the time limit stops it there, as a 1 s limit on a loaded machine
  // did; the heuristic start makes preprocessing dispensable.
  m.set_parameter("preprocess", "off");
  Milp::Result result;
  std::string solver_error;
  if (!m.solve(o.time_limit_s, start, o.solver_log, &result, &solver_error)) {
    // The heuristic routes stay: they are a valid (if worse) answer.
    if (o.progress) o.progress("routing MILP: " + solver_error + "; keeping the heuristic routes");
    return true;
  }
  stats->milp_used = true;
  stats->optimal = result.optimal;
  stats->objective = result.values[T];
  stats->bound = result.bound;
  stats->seconds = result.seconds;
  Routes solved(nchunks);
  for (int c = 0; c < nchunks; ++c) {
    for (int e : p.candidates[c])
      if (result.values[X(c, e)] > 0.5) solved[c].push_back(e);
    if (!clean_tree(p, c, &solved[c])) {
      if (o.progress) o.progress("routing MILP: solution is not a tree (numerics); keeping the heuristic routes");
      stats->milp_used = false;
      return true;
    }
  }
  if (o.progress)
    o.progress(fmt::format("routing MILP: T = {:.2f} us (bound {:.2f}, {}) in {:.1f} s", result.values[T], result.bound,
                           result.optimal ? "optimal" : "time limit", result.seconds));
  *routes = std::move(solved);
  return true;
}

}  // namespace braid::synth

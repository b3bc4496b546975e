// Stage 3: contiguity on inter-node links (TACCL section 5.3).
//
// A transfer holds its link for alpha + beta*chunk.  On a high-alpha link
// (the network), k chunks sent as one message cost alpha + k*beta instead of
// k*(alpha + beta), at the price of every chunk waiting for the last one to
// be ready.  Given stage 2's order on every link and port, this MILP decides
// which consecutive transfers of each inter-node link go as one message,
// minimising the makespan:
//   S_i, A_i    start and arrival of transfer i (its message's)
//   z_ab        a and b (consecutive on the link and on its ports) merged
//   S_i >= A_p for what i waits for;  A_i >= S_i + alpha + beta otherwise
//   merged pairs share S and A, and the message's bytes add up through W
//   (W_i >= S_i + alpha + beta_i, W_b >= W_a + beta_b, A_i >= W_i);
//   consecutive transfers of a link or port: S_b >= A_a unless merged;
//   T >= A_i; minimise T + a small weight on the sum of arrivals (so no
//   merge that delays a chunk for nothing).
// Stage 2's times with no merge are CBC's first incumbent; M = T_stage2 +
// the largest cost bounds every time difference.  Only pairs lowering can
// send as one op over a contiguous chunk range at both ends are candidates
// (mergeable()).  The result is renumbered by a topological sort of the
// merged messages (earliest start first), which keeps lowering's invariant:
// everything a transfer waits for comes earlier in `seq`.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>

#include "synth/milp.h"
#include "synth/problem.h"

namespace braid::synth {
namespace {

bool inter_node(const Topology& t, int link) {
  const Link& l = t.links[link];
  return l.src / t.gpus_per_node != l.dst / t.gpus_per_node;
}

// The chunk index a transfer reads at its sender (lower.cc's placement).
// AllGather-shaped: output chunk src*u+j at both ends.  ReduceScatter phase:
// the input until the sender has a partial sum, then the output.  AlltoAll:
// input chunk dst*u+j at the source; relays and receivers use scratch slots
// that lowering allocates contiguously for a merged message.
struct SendRef {
  int kind = 0;  // 0 output, 1 input, 2 relay scratch
  int index = 0;
};
SendRef send_ref(const Problem& p, const Transfer& x) {
  const Chunk& k = p.chunks[x.chunk];
  const int u = p.chunkup;
  if (p.alltoall)
    return p.topo->links[x.link].src == k.src ? SendRef{1, k.dst * u + k.j} : SendRef{2, 0};
  if (x.reduce) return {x.preds.empty() ? 1 : 0, k.src * u + k.j};
  return {0, k.src * u + k.j};
}

}  // namespace

bool mergeable(const Problem& p, const std::vector<Transfer>& xs, int a, int b) {
  const Transfer &x = xs[a], &y = xs[b];
  if (x.link != y.link || x.reduce != y.reduce) return false;
  SendRef ra = send_ref(p, x), rb = send_ref(p, y);
  if (ra.kind != rb.kind) return false;
  if (ra.kind == 2)  // relay scratch: lowering reserves adjacent slots where the chunks arrive singly
    return !inter_node(*p.topo, xs[x.preds.at(0)].link) && !inter_node(*p.topo, xs[y.preds.at(0)].link);
  // Distinct chunks one apart at every step make a chain a contiguous range.
  return std::abs(ra.index - rb.index) == 1;
}

bool merge_contiguous(const Problem& p, const SynthOptions& o, std::vector<Transfer>* out, ContiguityStats* st,
                      std::string* error) {
  const Topology& t = *p.topo;
  std::vector<Transfer>& xs = *out;
  const int m = int(xs.size());
  double T0 = 0, max_cost = 0;
  for (const Transfer& x : xs) T0 = std::max(T0, x.arrive), max_cost = std::max(max_cost, p.cost(x.link));
  st->before_us = st->after_us = T0;

  // Per link and per port: its transfers in stage 2's order.
  std::vector<std::vector<int>> by_link(t.links.size()), by_port(t.ports.size());
  std::vector<int> order(m);
  for (int i = 0; i < m; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return xs[a].seq < xs[b].seq; });
  for (int i : order) {
    by_link[xs[i].link].push_back(i);
    for (int port : t.links[xs[i].link].ports) by_port[port].push_back(i);
  }
  auto adjacent_on_ports = [&](int a, int b) {
    for (int port : t.links[xs[a].link].ports) {
      const std::vector<int>& q = by_port[port];
      auto it = std::find(q.begin(), q.end(), a);
      if (it + 1 == q.end() || *(it + 1) != b) return false;
    }
    return true;
  };
  std::map<std::pair<int, int>, int> pair_col;  // (a, b) -> z column, filled below
  std::vector<std::pair<int, int>> pairs;
  for (size_t e = 0; e < t.links.size(); ++e) {
    if (!inter_node(t, int(e))) continue;
    const std::vector<int>& q = by_link[e];
    for (size_t k = 0; k + 1 < q.size(); ++k)
      if (adjacent_on_ports(q[k], q[k + 1]) && mergeable(p, xs, q[k], q[k + 1])) pairs.push_back({q[k], q[k + 1]});
  }
  st->candidate_pairs = int(pairs.size());
  if (pairs.empty()) return true;
  if (!milp_available()) return *error = "the contiguity MILP needs COIN-OR CBC (or --no-contiguity)", false;

  Milp milp;
  const double ub = T0 * (1 + 1e-9) + 1e-6, M = ub + max_cost, w_sum = 1e-3 / m;
  std::vector<double> start;
  auto col = [&](double lb, double hi, double obj, bool integer, double value) {
    start.push_back(value);
    return milp.add_col(lb, hi, obj, integer);
  };
  const int T = col(0, ub, 1, false, T0);
  std::vector<int> S(m), A(m), W(m, -1);
  for (int i = 0; i < m; ++i) {
    S[i] = col(0, ub, 0, false, xs[i].start);
    A[i] = col(0, ub, w_sum, false, xs[i].arrive);
  }
  for (auto [a, b] : pairs)
    for (int i : {a, b})
      if (W[i] < 0) W[i] = col(0, ub, 0, false, xs[i].arrive);
  for (auto ab : pairs) pair_col[ab] = col(0, 1, 0, true, 0);
  for (int i = 0; i < m; ++i) {
    for (int q : xs[i].preds) milp.add_row({{S[i], 1}, {A[q], -1}}, 'G', 0);
    int end = W[i] >= 0 ? W[i] : A[i];
    milp.add_row({{end, 1}, {S[i], -1}}, 'G', p.cost(xs[i].link));
    if (W[i] >= 0) milp.add_row({{A[i], 1}, {W[i], -1}}, 'G', 0);
    milp.add_row({{T, 1}, {A[i], -1}}, 'G', 0);
  }
  for (auto [ab, z] : pair_col) {
    auto [a, b] = ab;
    for (auto [u, v] : {std::pair{S[a], S[b]}, {S[b], S[a]}, {A[a], A[b]}, {A[b], A[a]}})
      milp.add_row({{u, 1}, {v, -1}, {z, M}}, 'L', M);  // equal when merged
    milp.add_row({{W[b], 1}, {W[a], -1}, {z, -M}}, 'G', p.load(xs[b].link) - M);
  }
  for (const auto* group : {&by_link, &by_port})
    for (const std::vector<int>& q : *group)
      for (size_t k = 0; k + 1 < q.size(); ++k) {
        auto it = pair_col.find({q[k], q[k + 1]});
        std::vector<std::pair<int, double>> terms{{S[q[k + 1]], 1}, {A[q[k]], -1}};
        if (it != pair_col.end()) terms.push_back({it->second, M});
        milp.add_row(terms, 'G', 0);
      }
  st->columns = milp.cols();
  st->rows = milp.rows();
  if (o.progress)
    o.progress(fmt::format("contiguity MILP: {} candidate pairs on inter-node links, {} columns, {} rows; "
                           "stage 2 T = {:.2f} us; limit {:.0f} s",
                           pairs.size(), milp.cols(), milp.rows(), T0, o.contiguity_time_limit_s));
  Milp::Result r;
  std::string solver_error;
  if (!milp.solve(o.contiguity_time_limit_s, start, o.solver_log, &r, &solver_error)) {
    if (o.progress) o.progress("contiguity MILP: " + solver_error + "; no merging");
    return true;
  }
  st->milp_used = true;
  st->optimal = r.optimal;
  st->seconds = r.seconds;
  const double T1 = r.values[T];
  if (!(T1 < T0 - 1e-6 * std::max(1.0, T0))) {
    if (o.progress) o.progress(fmt::format("contiguity MILP: no shorter makespan ({:.1f} s); no merging", r.seconds));
    return true;
  }

  // Messages: chains of merged pairs, each led by its first transfer.
  std::vector<int> leader(m);
  for (int i : order) leader[i] = i;
  for (auto [ab, z] : pair_col)
    if (r.values[z] > 0.5) leader[ab.second] = ab.first;
  for (int i : order) leader[i] = leader[leader[i]];  // `order` visits a chain front to back
  // Topological order of messages, earliest start first.
  std::vector<std::vector<int>> succ(m);
  std::vector<int> indeg(m, 0);
  auto edge = [&](int a, int b) {
    a = leader[a], b = leader[b];
    if (a == b) return;
    succ[a].push_back(b), ++indeg[b];
  };
  for (int i = 0; i < m; ++i)
    for (int q : xs[i].preds) edge(q, i);
  for (const auto* group : {&by_link, &by_port})
    for (const std::vector<int>& q : *group)
      for (size_t k = 0; k + 1 < q.size(); ++k) edge(q[k], q[k + 1]);
  for (int i = 0; i < m; ++i)
    if (leader[i] != i && std::count_if(xs[i].preds.begin(), xs[i].preds.end(), [&](int q) { return leader[q] == leader[i]; }))
      return true;  // a message waiting for itself (cannot happen for a feasible solution): no merging
  using Key = std::pair<double, int>;  // (start, stage 2 seq)
  std::priority_queue<std::pair<Key, int>, std::vector<std::pair<Key, int>>, std::greater<>> ready;
  for (int i = 0; i < m; ++i)
    if (leader[i] == i && indeg[i] == 0) ready.push({{r.values[S[i]], xs[i].seq}, i});
  std::vector<std::vector<int>> members(m);
  for (int i : order) members[leader[i]].push_back(i);
  std::vector<int> new_seq(m, -1);
  int next = 0;
  while (!ready.empty()) {
    int g = ready.top().second;
    ready.pop();
    for (int i : members[g]) new_seq[i] = next++;
    for (int s : succ[g])
      if (--indeg[s] == 0) ready.push({{r.values[S[s]], xs[s].seq}, s});
  }
  if (next != m) return true;  // a cycle (numerics): keep stage 2's plan
  st->merged = 0;
  for (int i = 0; i < m; ++i) {
    Transfer& x = xs[i];
    x.seq = new_seq[i];
    x.joins_previous = leader[i] != i;
    st->merged += x.joins_previous;
    x.start = r.values[S[leader[i]]];
    x.end = x.arrive = r.values[A[i]];
  }
  st->after_us = T1;
  if (o.progress)
    o.progress(fmt::format("contiguity MILP: T = {:.2f} us (bound {:.2f}, {}), {} transfers joined a message, {:.1f} s",
                           T1, r.bound, r.optimal ? "optimal" : "time limit", st->merged, r.seconds));
  return true;
}

}  // namespace braid::synth

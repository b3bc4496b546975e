// Stage 3: contiguity on inter-node links (TACCL section 5.3).
//
// A transfer holds its link for alpha + beta*chunk.  On a high-alpha link
// (the network), k chunks sent as one message cost alpha + k*beta instead of
// k*(alpha + beta), at the price of every chunk waiting for the last one to
// be ready.  Given stage 2's order on every link and port, the MILP decides
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
// For fixed merges the best times are a longest-path pass over the messages
// (time_messages; a message takes its last transfer's place on its link's
// ports, the transfers it passes going first).  A greedy pass tries each
// candidate pair in link order and keeps a merge when it shortens the
// makespan (or, at equal makespan, the sum of arrivals): the answer without
// CBC, and, over the pairs adjacent on their ports too (the MILP keeps
// every port's order), CBC's first incumbent.  The better of the two is
// kept; neither is worse than no merging.  M = T_stage2 + the largest cost
// bounds every time difference.  Only pairs lowering can send as one op over
// a contiguous chunk range at both ends are candidates (mergeable()).  The result is renumbered by a topological sort
// of the messages (earliest start first), which keeps lowering's invariant:
// everything a transfer waits for comes earlier in `seq`.
// Cost: greedy O(pairs * (transfers + edges)); the MILP is bounded by
// --contiguity-time-limit.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <utility>

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

namespace {

// Stage 2's fixed order: per link and per port its transfers; the waits for
// data; and who follows whom on a link or port (the MILP's order).
struct Order {
  std::vector<std::vector<int>> sequences;  // per link, then per port
  std::vector<std::pair<int, int>> waits, follows;
};

Order fixed_order(const Problem& p, const std::vector<Transfer>& xs) {
  const Topology& t = *p.topo;
  const int m = int(xs.size());
  std::vector<int> by_seq(m);
  for (int i = 0; i < m; ++i) by_seq[i] = i;
  std::sort(by_seq.begin(), by_seq.end(), [&](int a, int b) { return xs[a].seq < xs[b].seq; });
  Order o;
  o.sequences.resize(t.links.size() + t.ports.size());
  for (int i : by_seq) {
    o.sequences[xs[i].link].push_back(i);
    for (int port : t.links[xs[i].link].ports) o.sequences[t.links.size() + port].push_back(i);
  }
  for (int i = 0; i < m; ++i)
    for (int q : xs[i].preds) o.waits.push_back({q, i});
  for (const std::vector<int>& q : o.sequences)
    for (size_t k = 0; k + 1 < q.size(); ++k) o.follows.push_back({q[k], q[k + 1]});
  return o;
}

// Earliest times of every message for the merges in `leader` (each transfer's
// message is led by leader[i]), per transfer; false if the merges wait on
// themselves.  Kahn's algorithm over messages, `key` choosing among ready ones.
struct Timing {
  double makespan = 0, sum_arrivals = 0;
  std::vector<double> start, arrive;
  std::vector<int> message_order;  // leaders, in a topological order
};
template <typename Key>
bool time_messages(const Problem& p, const std::vector<Transfer>& xs, const Order& o, const std::vector<int>& leader,
                   Key key, Timing* out) {
  const int m = int(xs.size());
  std::vector<double> cost(m, 0), ready(m, 0);
  for (int i = 0; i < m; ++i) {
    if (leader[i] == i) cost[i] += p.topo->links[xs[i].link].alpha_us;
    cost[leader[i]] += p.load(xs[i].link);
  }
  std::vector<std::vector<int>> succ(m);
  std::vector<int> indeg(m, 0);
  auto edge = [&](int ga, int gb) { succ[ga].push_back(gb), ++indeg[gb]; };
  for (auto [a, b] : o.waits) {
    if (leader[a] == leader[b]) return false;  // a chunk waiting for its own message
    edge(leader[a], leader[b]);
  }
  // On a link or port a message takes the place of its last transfer (what
  // it waits for is ready by then); the transfers it passes go first.
  std::vector<char> last(m, 0), seen(m, 0);
  for (size_t e = 0; e < p.topo->links.size(); ++e)
    for (auto it = o.sequences[e].rbegin(); it != o.sequences[e].rend(); ++it)
      if (!seen[leader[*it]]) seen[leader[*it]] = last[*it] = 1;
  for (const std::vector<int>& q : o.sequences) {
    int previous = -1;
    for (int i : q) {
      if (!last[i]) continue;
      if (previous >= 0) edge(previous, leader[i]);
      previous = leader[i];
    }
  }
  using Item = std::pair<decltype(key(0, 0.0)), int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  int messages = 0;
  for (int i = 0; i < m; ++i) {
    if (leader[i] != i) continue;
    ++messages;
    if (indeg[i] == 0) queue.push({key(i, 0.0), i});
  }
  out->start.assign(m, 0);
  out->arrive.assign(m, 0);
  out->message_order.clear();
  while (!queue.empty()) {
    int g = queue.top().second;
    queue.pop();
    out->message_order.push_back(g);
    out->start[g] = ready[g];
    out->arrive[g] = ready[g] + cost[g];
    for (int h : succ[g]) {
      ready[h] = std::max(ready[h], out->arrive[g]);
      if (--indeg[h] == 0) queue.push({key(h, ready[h]), h});
    }
  }
  if (int(out->message_order.size()) != messages) return false;
  out->makespan = out->sum_arrivals = 0;
  for (int i = 0; i < m; ++i) {
    out->start[i] = out->start[leader[i]], out->arrive[i] = out->arrive[leader[i]];
    out->makespan = std::max(out->makespan, out->arrive[i]);
    out->sum_arrivals += out->arrive[i];
  }
  return true;
}

// Shorter makespan, or the same with earlier arrivals overall.
bool better(const Timing& a, const Timing& b) {
  const double eps_t = 1e-9 * std::max(1.0, b.makespan), eps_sum = 1e-9 * std::max(1.0, b.sum_arrivals);
  if (a.makespan < b.makespan - eps_t) return true;
  return a.makespan < b.makespan + eps_t && a.sum_arrivals < b.sum_arrivals - eps_sum;
}

int any_key(int, double) { return 0; }

// Each message's transfers, first (its leader) to last.
std::vector<std::vector<int>> messages_of(const Problem& p, const Order& o, const std::vector<int>& leader) {
  std::vector<std::vector<int>> members(leader.size());
  for (size_t e = 0; e < p.topo->links.size(); ++e)
    for (int i : o.sequences[e]) members[leader[i]].push_back(i);
  return members;
}

// The MILP of the header over the candidate `pairs`, from the merges in
// `leader` (with their times) as the incumbent.  On success, `leader` holds
// CBC's merges.
bool solve_milp(const Problem& p, const SynthOptions& opt, const std::vector<Transfer>& xs, const Order& o,
                const std::vector<std::pair<int, int>>& pairs, double T0, const Timing& incumbent,
                std::vector<int>* leader, ContiguityStats* st) {
  const int m = int(xs.size());
  double max_cost = 0;
  for (const Transfer& x : xs) max_cost = std::max(max_cost, p.cost(x.link));
  Milp milp;
  const double ub = T0 * (1 + 1e-9) + 1e-6, M = ub + max_cost, w_sum = 1e-3 / m;
  std::vector<double> start;
  auto col = [&](double hi, double obj, bool integer, double value) {
    start.push_back(value);
    return milp.add_col(0, hi, obj, integer);
  };
  const int T = col(ub, 1, false, incumbent.makespan);
  std::vector<int> S(m), A(m), W(m, -1);
  for (int i = 0; i < m; ++i) {
    S[i] = col(ub, 0, false, incumbent.start[i]);
    A[i] = col(ub, w_sum, false, incumbent.arrive[i]);
  }
  // W: when i's bytes are through (its message's alpha and bytes up to it).
  std::vector<double> through(m);
  for (const std::vector<int>& message : messages_of(p, o, *leader)) {
    double at = message.empty() ? 0 : incumbent.start[message[0]] + p.topo->links[xs[message[0]].link].alpha_us;
    for (int i : message) through[i] = at += p.load(xs[i].link);
  }
  std::map<std::pair<int, int>, int> z;
  for (auto [a, b] : pairs)
    for (int i : {a, b})
      if (W[i] < 0) W[i] = col(ub, 0, false, through[i]);
  for (auto ab : pairs) z[ab] = col(1, 0, true, (*leader)[ab.second] == (*leader)[ab.first] ? 1 : 0);
  for (int i = 0; i < m; ++i) {
    int end = W[i] >= 0 ? W[i] : A[i];
    milp.add_row({{end, 1}, {S[i], -1}}, 'G', p.cost(xs[i].link));
    if (W[i] >= 0) milp.add_row({{A[i], 1}, {W[i], -1}}, 'G', 0);
    milp.add_row({{T, 1}, {A[i], -1}}, 'G', 0);
  }
  for (auto [a, b] : o.waits) milp.add_row({{S[b], 1}, {A[a], -1}}, 'G', 0);
  for (auto [ab, col_z] : z) {
    auto [a, b] = ab;
    for (auto [u, v] : {std::pair{S[a], S[b]}, {S[b], S[a]}, {A[a], A[b]}, {A[b], A[a]}})
      milp.add_row({{u, 1}, {v, -1}, {col_z, M}}, 'L', M);  // equal when merged
    milp.add_row({{W[b], 1}, {W[a], -1}, {col_z, -M}}, 'G', p.load(xs[b].link) - M);
  }
  for (auto [a, b] : o.follows) {
    auto it = z.find({a, b});
    std::vector<std::pair<int, double>> terms{{S[b], 1}, {A[a], -1}};
    if (it != z.end()) terms.push_back({it->second, M});
    milp.add_row(terms, 'G', 0);
  }
  st->columns = milp.cols();
  st->rows = milp.rows();
  if (opt.progress)
    opt.progress(fmt::format("contiguity MILP: {} candidate pairs, {} columns, {} rows; greedy T = {:.2f} us; limit {:.0f} s",
                             pairs.size(), milp.cols(), milp.rows(), incumbent.makespan, opt.contiguity_time_limit_s));
  // CBC 2.10's preprocessing can crash (CglPreProcess::postProcess) when the
  // time limit stops it on this model; the incumbent makes it dispensable.
  milp.set_parameter("preprocess", "off");
  Milp::Result r;
  std::string solver_error;
  if (!milp.solve(opt.contiguity_time_limit_s, start, opt.solver_log, &r, &solver_error)) {
    if (opt.progress) opt.progress("contiguity MILP: " + solver_error + "; keeping the greedy merges");
    return false;
  }
  st->milp_used = true;
  st->optimal = r.optimal;
  st->seconds = r.seconds;
  if (opt.progress)
    opt.progress(fmt::format("contiguity MILP: T = {:.2f} us (objective {:.2f} with the arrivals term, bound {:.2f}, {}) "
                             "in {:.1f} s", r.values[T], r.objective, r.bound, r.optimal ? "optimal" : "time limit", r.seconds));
  std::vector<int> solved(m);
  for (int i = 0; i < m; ++i) solved[i] = i;
  for (const std::vector<int>& q : o.sequences)
    for (size_t k = 0; k + 1 < q.size(); ++k) {
      auto it = z.find({q[k], q[k + 1]});
      if (it != z.end() && r.values[it->second] > 0.5) solved[q[k + 1]] = solved[q[k]];
    }
  *leader = std::move(solved);
  return true;
}

}  // namespace

void merge_contiguous(const Problem& p, const SynthOptions& opt, std::vector<Transfer>* out, ContiguityStats* st) {
  const Topology& t = *p.topo;
  std::vector<Transfer>& xs = *out;
  const int m = int(xs.size());
  const Order o = fixed_order(p, xs);
  std::vector<int> none(m);
  for (int i = 0; i < m; ++i) none[i] = i;
  Timing stage2;
  if (!time_messages(p, xs, o, none, any_key, &stage2)) return;  // cannot happen: stage 2's order is acyclic
  st->before_us = st->after_us = stage2.makespan;

  // Candidates: consecutive on an inter-node link.
  std::vector<int> next_on_ports(m, -2);  // b if b follows i on every port of i's link, -1 if none, -2 no ports
  for (size_t s = t.links.size(); s < o.sequences.size(); ++s) {
    const std::vector<int>& q = o.sequences[s];
    for (size_t k = 0; k < q.size(); ++k) {
      int b = k + 1 < q.size() ? q[k + 1] : -1;
      int& n = next_on_ports[q[k]];
      n = n == -2 || n == b ? b : -1;
    }
  }
  std::vector<std::pair<int, int>> pairs;
  for (size_t e = 0; e < t.links.size(); ++e) {
    if (!inter_node(t, int(e))) continue;
    const std::vector<int>& q = o.sequences[e];
    for (size_t k = 0; k + 1 < q.size(); ++k) {
      if (mergeable(p, xs, q[k], q[k + 1])) pairs.push_back({q[k], q[k + 1]});
    }
  }
  st->candidate_pairs = int(pairs.size());
  if (pairs.empty()) return;

  // Greedy: each pair in link order, kept when it helps.
  auto greedy = [&](const std::vector<std::pair<int, int>>& candidates, std::vector<int>* leader, Timing* best) {
    *leader = none, *best = stage2;
    Timing trial;
    for (auto [a, b] : candidates) {
      (*leader)[b] = (*leader)[a];
      if (time_messages(p, xs, o, *leader, any_key, &trial) && better(trial, *best)) *best = trial;
      else (*leader)[b] = b;
    }
  };
  std::vector<int> leader;
  Timing best;
  greedy(pairs, &leader, &best);
  if (opt.progress)
    opt.progress(fmt::format("contiguity greedy: T = {:.2f} us from {:.2f}", best.makespan, stage2.makespan));
  // The MILP keeps every link's and port's order, so it takes the pairs that
  // are adjacent on their ports too, from the greedy answer over those.
  std::vector<std::pair<int, int>> adjacent;
  for (auto [a, b] : pairs)
    if (next_on_ports[a] == -2 || next_on_ports[a] == b) adjacent.push_back({a, b});
  if (opt.use_milp && milp_available() && !adjacent.empty()) {
    std::vector<int> solved;
    Timing incumbent, trial;
    greedy(adjacent, &solved, &incumbent);
    if (solve_milp(p, opt, xs, o, adjacent, stage2.makespan, incumbent, &solved, st) &&
        time_messages(p, xs, o, solved, any_key, &trial) && better(trial, best))
      best = trial, leader = solved;
  }
  if (!better(best, stage2)) return;

  // Renumber: messages earliest start first, in a topological order.
  Timing final_times;
  auto by_start = [&](int g, double ready) { return std::pair{ready, xs[g].seq}; };
  if (!time_messages(p, xs, o, leader, by_start, &final_times)) return;
  const std::vector<std::vector<int>> members = messages_of(p, o, leader);
  int next = 0;
  st->merged = 0;
  for (int g : final_times.message_order)
    for (int i : members[g]) {
      Transfer& x = xs[i];
      x.seq = next++;
      x.joins_previous = i != g;
      st->merged += x.joins_previous;
      x.start = final_times.start[i];
      x.end = x.arrive = final_times.arrive[i];
    }
  st->after_us = final_times.makespan;
  if (opt.progress)
    opt.progress(fmt::format("contiguity: T = {:.2f} us from {:.2f}, {} transfers joined a message", st->after_us,
                             st->before_us, st->merged));
}

}  // namespace braid::synth

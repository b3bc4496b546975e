// The schedule verifier (see verify.h): symbolic execution, not numbers.
//
// A chunk's content is the set of (source rank, input chunk) pairs reduced into
// it; a copy collective's chunk holds exactly one.  Every buffer chunk of every
// rank is a "cell"; in place, aliased input and output chunks are the same
// cell, so a schedule that overwrites input it still needs is caught.  The run
// follows the executors (src/ops/op_step.h): each lane runs its ops in order,
// an op waits for its deps, then moves its chunks as one message (a frame, when
// there are several); a step needs its incoming message to be there and room
// (fewer than `slots` queued) on its outgoing connection.  Lanes that can never
// move again are a deadlock.  Each connection has one sending and one receiving
// lane, so the outcome does not depend on the order we step lanes in.
//
// The executor runs the op list once per tile; the run does two tiles so a
// schedule that only deadlocks once a second tile is queued is caught.
// Content is tracked for the first tile (every tile moves the same chunks).
// `slots` is the schedule's own (Schedule::slots) unless the caller says.
// Races are checked within a tile (tiles touch disjoint bytes) using the
// order of lanes and deps on one rank; with one-sided ops (Put, Get) also
// across ranks, through messages (signals), and so is the rule that a rank
// touches a peer's buffers only while the peer is in the call.
#include "braid/verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <tuple>

namespace braid {
namespace {

constexpr int kTiles = 2;

bool is_rooted(Collective c) {
  return c == Collective::Broadcast || c == Collective::Reduce || c == Collective::Gather ||
         c == Collective::Scatter;
}
// NCCL lets non-root ranks pass NULL for the buffers they do not use.
bool has_input(const Schedule& s, int rank) {
  bool rooted_input = s.collective == Collective::Broadcast || s.collective == Collective::Scatter;
  return !rooted_input || rank == s.root;
}
bool has_output(const Schedule& s, int rank) {
  bool rooted_output = s.collective == Collective::Reduce || s.collective == Collective::Gather;
  return !rooted_output || rank == s.root;
}
uint32_t blocks_of(Collective c, BufferKind b, int n) {
  bool input = b == BufferKind::Input;
  switch (c) {
    case Collective::ReduceScatter:
    case Collective::Scatter: return input ? n : 1;
    case Collective::AllGather:
    case Collective::Gather: return input ? 1 : n;
    case Collective::AlltoAll: return n;
    default: return 1;
  }
}
uint32_t chunks_of(const RankProgram& p, BufferKind b) {
  return b == BufferKind::Input ? p.input_chunks : b == BufferKind::Output ? p.output_chunks : p.scratch_chunks;
}
bool has_buffer(const Schedule& s, int rank, BufferKind b) {
  return b == BufferKind::Scratch || (b == BufferKind::Input ? has_input(s, rank) : has_output(s, rank));
}
std::string ref_name(ChunkRef ref, uint32_t offset = 0) {
  return fmt::format("{}[{}]", to_string(ref.buffer), ref.index + offset);
}

class Errors {
 public:
  explicit Errors(size_t max) : max_(std::max<size_t>(max, 1)) {}
  template <typename... Args>
  void add(fmt::format_string<Args...> f, Args&&... args) {
    if (errors_.size() < max_) errors_.push_back(fmt::format(f, std::forward<Args>(args)...));
  }
  bool full() const { return errors_.size() >= max_; }
  bool any() const { return !errors_.empty(); }
  std::vector<std::string> take() { return std::move(errors_); }

 private:
  size_t max_;
  std::vector<std::string> errors_;
};

std::string where(const Schedule& s, int r, size_t l, size_t i) {
  const Op& op = s.ranks[r].lanes[l].ops[i];
  std::string what = to_string(op.type);
  if (op_uses_recv_peer(op.type)) what += fmt::format(" from {}", op.recv_peer);
  if (op_uses_send_peer(op.type)) what += fmt::format(" to {}", op.send_peer);
  if (op_reads_src(op.type) || op_gets(op.type)) what += " src " + ref_name(op.src);
  if (op_writes_dst(op.type) || op_puts(op.type)) what += " dst " + ref_name(op.dst);
  return fmt::format("rank {} lane {} op {} ({})", r, l, i, what);
}

// ---------------------------------------------------------------- structure

void check_structure(const Schedule& s, const VerifyOptions& o, Errors& e) {
  const int n = s.nranks;
  if (n < 1) return e.add("nranks is {}; need at least 1", n);
  if (int(s.ranks.size()) != n) return e.add("{} rank programs for nranks {}", s.ranks.size(), n);
  if (is_rooted(s.collective) && (s.root < 0 || s.root >= n))
    e.add("{} needs a root in [0, {}), got {}", to_string(s.collective), n, s.root);
  if (o.slots < 1) e.add("slots is {}; a connection must buffer at least one chunk", o.slots);
  if (!s.in_place && !s.out_of_place) e.add("schedule claims neither in-place nor out-of-place placement");
  if (e.any()) return;
  for (int r = 0; r < n; ++r) {
    const RankProgram& p = s.ranks[r];
    std::map<std::pair<int, int>, size_t> sender, receiver;  // (peer, channel) -> lane
    for (size_t l = 0; l < p.lanes.size(); ++l) {
      const Lane& lane = p.lanes[l];
      for (size_t i = 0; i < lane.ops.size(); ++i) {
        const Op& op = lane.ops[i];
        if (uint8_t(op.type) > uint8_t(kLastOpType)) {
          e.add("rank {} lane {} op {}: invalid op type {}", r, l, i, int(op.type));
          continue;
        }
        std::string at = where(s, r, l, i);
        if (op.count == 0 && op.type != OpType::Nop) e.add("{}: count is 0", at);
        if (message_chunks(op) == 0 && op.count != 1)
          e.add("{}: count is {}; a signal carries no chunks (count 1)", at, op.count);
        // A message claims its connection; a one-sided op only names its peer.
        bool peers_ok = true;
        auto check_peer = [&](bool used, bool message, int peer, const char* field, auto& lanes_by_conn,
                              const char* verb) {
          if (!used) {
            if (peer != -1) e.add("{}: has {} {} but does not {}", at, field, peer, verb);
            return;
          }
          if (peer < 0 || peer >= n) {
            peers_ok = false;
            return e.add("{}: {} {} is not a rank in [0, {})", at, field, peer, n);
          }
          if (peer == r) {
            peers_ok = false;
            return e.add("{}: {} itself (use copy)", at, field);
          }
          if (!message) return;
          auto [it, fresh] = lanes_by_conn.emplace(std::pair{peer, int(lane.channel)}, l);
          if (!fresh && it->second != l)
            e.add("{}: lanes {} and {} both {} rank {} on channel {}", at, it->second, l, verb, peer, lane.channel);
        };
        check_peer(op_uses_send_peer(op.type), op_sends(op.type), op.send_peer, "send_peer", sender, "send");
        check_peer(op_uses_recv_peer(op.type), op_receives(op.type), op.recv_peer, "recv_peer", receiver, "receive");
        // `owner`: the rank whose buffer the ref names (a peer's, for one-sided ops).
        auto check_ref = [&](bool used, ChunkRef ref, bool dst, int owner) {
          const char* role = dst ? "dst" : "src";
          if (!used) return;
          if (uint8_t(ref.buffer) > uint8_t(BufferKind::Scratch))
            return e.add("{}: {} has invalid buffer {}", at, role, int(ref.buffer));
          const RankProgram& q = s.ranks[owner];
          const std::string whose = owner == r ? "the" : fmt::format("rank {}'s", owner);
          uint64_t end = uint64_t(ref.index) + std::max<uint32_t>(op.count, 1);
          if (end > chunks_of(q, ref.buffer))
            e.add("{}: {} chunks [{}, {}) are outside {} {} buffer's {} chunks", at, role, ref.index, end, whose,
                  to_string(ref.buffer), chunks_of(q, ref.buffer));
          if (!has_buffer(s, owner, ref.buffer))
            e.add("{}: rank {} has no {} buffer in a {} rooted at {}", at, owner, to_string(ref.buffer),
                  to_string(s.collective), s.root);
          if (dst && ref.buffer == BufferKind::Input)
            e.add("{}: writes {} input buffer", at, whose);
        };
        check_ref(op_reads_src(op.type), op.src, false, r);
        check_ref(op_writes_dst(op.type), op.dst, true, r);
        if (peers_ok) check_ref(op_gets(op.type), op.src, false, op.recv_peer);
        if (peers_ok) check_ref(op_puts(op.type), op.dst, true, op.send_peer);
        for (const Dep& d : op.deps)
          if (d.lane >= p.lanes.size() || d.op >= p.lanes[d.lane].ops.size())
            e.add("{}: depends on lane {} op {}, which does not exist", at, d.lane, d.op);
      }
    }
  }
}

// Chunks per block, the same for input and output on every rank that has
// them; 0 (with errors) when the layout is irregular or the collective custom.
uint32_t check_layout(const Schedule& s, Errors& e) {
  if (s.collective == Collective::Custom) return 0;
  uint32_t per_block = 0;
  bool ok = true;
  for (int r = 0; r < s.nranks; ++r) {
    for (BufferKind b : {BufferKind::Input, BufferKind::Output}) {
      uint32_t chunks = chunks_of(s.ranks[r], b), blocks = blocks_of(s.collective, b, s.nranks);
      if (chunks % blocks != 0) {
        e.add("rank {}: {} chunks of the {} buffer do not split into its {} blocks", r, chunks, to_string(b), blocks);
        ok = false;
        continue;
      }
      if (!has_buffer(s, r, b)) continue;
      if (chunks == 0) {
        e.add("rank {}: the {} buffer has no chunks", r, to_string(b));
        ok = false;
      } else if (per_block == 0) {
        per_block = chunks / blocks;
      } else if (chunks / blocks != per_block) {
        e.add("rank {}: the {} buffer has {} chunks per block, expected {} like the other buffers", r, to_string(b),
              chunks / blocks, per_block);
        ok = false;
      }
    }
  }
  return ok ? per_block : 0;
}

// ------------------------------------------------------------------- order

// One op of the schedule.
struct OpId {
  int rank = 0;
  size_t lane = 0, op = 0;
};

// Happens-before among ops (one tile), as vector clocks over lanes: lane
// order and deps within a rank and, across ranks when `messages`, each
// message's send before its receive (the k-th message of a connection).
class OpOrder {
 public:
  // The ops of `ranks`.  Returns false when the order has a cycle: with
  // `report_cycles`, a dependency cycle (one rank) is reported; one through
  // messages is a deadlock, which the simulation reports.
  bool build(const Schedule& s, const std::vector<int>& ranks, bool messages, bool report_cycles, Errors& e) {
    slot_.assign(s.nranks, -1);
    lane_base_.assign(ranks.size() + 1, 0);
    base_.assign(1, 0);
    for (size_t k = 0; k < ranks.size(); ++k) {
      slot_[ranks[k]] = int(k);
      lane_base_[k + 1] = lane_base_[k] + s.ranks[ranks[k]].lanes.size();
      for (const Lane& lane : s.ranks[ranks[k]].lanes) base_.push_back(base_.back() + lane.ops.size());
    }
    const size_t lanes = lane_base_.back(), nodes = base_.back();
    if (double(nodes) * double(lanes) > kMaxClockEntries) {
      e.add("too large to order: {} ops on {} lanes (one-sided ops are verified up to {} op-lane pairs)", nodes,
            lanes, kMaxClockEntries);
      return false;
    }
    std::vector<std::vector<size_t>> succ(nodes), pred(nodes);
    auto edge = [&](size_t a, size_t b) { succ[a].push_back(b), pred[b].push_back(a); };
    std::map<std::tuple<int, int, int>, std::pair<std::vector<size_t>, std::vector<size_t>>> conns;
    for (int r : ranks) {
      const RankProgram& p = s.ranks[r];
      for (size_t l = 0; l < p.lanes.size(); ++l)
        for (size_t i = 0; i < p.lanes[l].ops.size(); ++i) {
          const Op& op = p.lanes[l].ops[i];
          const size_t v = node({r, l, i});
          if (i > 0) edge(node({r, l, i - 1}), v);
          for (const Dep& d : op.deps) edge(node({r, d.lane, d.op}), v);
          if (messages && op_sends(op.type)) conns[{r, op.send_peer, p.lanes[l].channel}].first.push_back(v);
          if (messages && op_receives(op.type)) conns[{op.recv_peer, r, p.lanes[l].channel}].second.push_back(v);
        }
    }
    for (const auto& [conn, ends] : conns)
      for (size_t k = 0; k < std::min(ends.first.size(), ends.second.size()); ++k) edge(ends.first[k], ends.second[k]);
    clock_.assign(nodes, std::vector<uint32_t>(lanes, 0));
    std::vector<size_t> indegree(nodes), ready;
    for (size_t v = 0; v < nodes; ++v)
      if ((indegree[v] = pred[v].size()) == 0) ready.push_back(v);
    size_t done = 0;
    while (!ready.empty()) {
      size_t v = ready.back();
      ready.pop_back();
      ++done;
      auto [l, i] = lane_op(v);
      clock_[v][l] = std::max<uint32_t>(clock_[v][l], uint32_t(i + 1));
      for (size_t w : succ[v]) {
        for (size_t k = 0; k < lanes; ++k) clock_[w][k] = std::max(clock_[w][k], clock_[v][k]);
        if (--indegree[w] == 0) ready.push_back(w);
      }
    }
    if (done == nodes) return true;
    if (!report_cycles) return false;
    // Walk back through unfinished predecessors until a node repeats.
    size_t v = 0;
    while (indegree[v] == 0) ++v;
    std::vector<size_t> path;
    std::vector<int> seen(nodes, -1);
    while (seen[v] < 0) {
      seen[v] = int(path.size());
      path.push_back(v);
      for (size_t u : pred[v])
        if (indegree[u] > 0) {
          v = u;
          break;
        }
    }
    std::string cycle;
    for (size_t k = path.size(); k-- > size_t(seen[v]);) {
      auto [l, i] = lane_op(path[k]);
      cycle += fmt::format("lane {} op {} -> ", l - lane_base_[0], i);
    }
    auto [l, i] = lane_op(v);
    e.add("rank {}: dependency cycle: {}lane {} op {}", ranks[0], cycle, l - lane_base_[0], i);
    return false;
  }

  // Does op a complete before op b starts?  (Both among the built ranks.)
  bool before(OpId a, OpId b) const { return clock_[node(b)][global_lane(a)] >= a.op + 1; }

 private:
  static constexpr double kMaxClockEntries = 64e6;
  size_t global_lane(OpId x) const { return lane_base_[slot_[x.rank]] + x.lane; }
  size_t node(OpId x) const { return base_[global_lane(x)] + x.op; }
  // (global lane, op) of a node.
  std::pair<size_t, size_t> lane_op(size_t v) const {
    size_t l = std::upper_bound(base_.begin(), base_.end(), v) - base_.begin() - 1;
    return {l, v - base_[l]};
  }
  std::vector<int> slot_;          // per rank of the schedule: its place among the built ranks, or -1
  std::vector<size_t> lane_base_;  // per built rank: its first global lane
  std::vector<size_t> base_;       // per global lane: its first node (and the end)
  std::vector<std::vector<uint32_t>> clock_;  // per op: ops of each lane known complete
};

// ------------------------------------------------------------------- cells

// Maps a rank's chunks to storage cells, with the placement's aliasing.
struct Cells {
  std::vector<uint32_t> input, output, scratch;
  uint32_t count = 0;

  Cells(const Schedule& s, int r, bool in_place, uint32_t per_block) {
    const RankProgram& p = s.ranks[r];
    auto fresh = [&](std::vector<uint32_t>& v, uint32_t n) {
      for (uint32_t i = 0; i < n; ++i) v.push_back(count++);
    };
    fresh(input, p.input_chunks);
    fresh(output, p.output_chunks);
    fresh(scratch, p.scratch_chunks);
    if (!in_place || per_block == 0 || !has_input(s, r) || !has_output(s, r)) return;
    const uint32_t c = per_block;
    switch (s.collective) {
      case Collective::AllGather:
      case Collective::Gather:  // input is output block `r`
        for (uint32_t i = 0; i < c; ++i) output[r * c + i] = input[i];
        break;
      case Collective::ReduceScatter:
      case Collective::Scatter:  // output is input block `r`
        for (uint32_t j = 0; j < c; ++j) output[j] = input[r * c + j];
        break;
      case Collective::Custom: break;
      default:  // same bytes
        output = input;
        break;
    }
  }
  uint32_t operator()(ChunkRef ref, uint32_t offset) const {
    const auto& v = ref.buffer == BufferKind::Input ? input : ref.buffer == BufferKind::Output ? output : scratch;
    return v[ref.index + offset];
  }
};

// Races on rank q's chunks: two accesses, at least one a write, that
// `order` does not order.  The accesses are q's own ops' and, with
// one-sided ops, its peers' Puts and Gets into q's buffers (then `order`
// spans every rank).  `reported` carries over between placements so a race
// is named once.
using RaceSet = std::set<std::tuple<int, int, size_t, size_t, int, size_t, size_t>>;
void check_races(const Schedule& s, int q, const OpOrder& order, const std::vector<Cells>& cells,
                 bool one_sided, const std::string& placement, RaceSet& reported, Errors& e) {
  struct Access {
    OpId id;
    bool write;
    ChunkRef ref;
    uint32_t offset;
  };
  std::vector<std::vector<Access>> by_cell(cells[q].count);
  auto add = [&](OpId id, const Op& op, bool write, ChunkRef ref) {
    for (uint32_t k = 0; k < std::max<uint32_t>(op.count, 1); ++k)
      by_cell[cells[q](ref, k)].push_back({id, write, ref, k});
  };
  for (int r = 0; r < s.nranks; ++r) {
    if (r != q && !one_sided) continue;
    const RankProgram& p = s.ranks[r];
    for (size_t l = 0; l < p.lanes.size(); ++l)
      for (size_t i = 0; i < p.lanes[l].ops.size(); ++i) {
        const Op& op = p.lanes[l].ops[i];
        if (r == q && op_reads_src(op.type)) add({r, l, i}, op, false, op.src);
        if (r == q && op_writes_dst(op.type)) add({r, l, i}, op, true, op.dst);
        if (op_gets(op.type) && op.recv_peer == q) add({r, l, i}, op, false, op.src);
        if (op_puts(op.type) && op.send_peer == q) add({r, l, i}, op, true, op.dst);
      }
  }
  auto owned = [&](const Access& x) { return x.id.rank == q ? std::string() : fmt::format("rank {}'s ", q); };
  for (const auto& accesses : by_cell)
    for (size_t a = 0; a < accesses.size(); ++a)
      for (size_t b = a + 1; b < accesses.size(); ++b) {
        const Access &x = accesses[a], &y = accesses[b];
        if ((x.id.rank == y.id.rank && x.id.lane == y.id.lane) || !(x.write || y.write)) continue;
        if (order.before(x.id, y.id) || order.before(y.id, x.id)) continue;
        if (!reported.insert({q, x.id.rank, x.id.lane, x.id.op, y.id.rank, y.id.lane, y.id.op}).second) continue;
        e.add("{}{} {} {}{} and {} {} {}{} are not ordered by deps{}", placement,
              where(s, x.id.rank, x.id.lane, x.id.op), x.write ? "writes" : "reads", owned(x),
              ref_name(x.ref, x.offset), where(s, y.id.rank, y.id.lane, y.id.op), y.write ? "writes" : "reads",
              owned(y), ref_name(y.ref, y.offset), one_sided ? " or signals" : "");
      }
}

// A rank may touch a peer's buffers only while the peer is in the call
// (schedule.h): after a Wait for the peer's signal on its own rank (which
// is also how an executor learns where the peer's buffers are), and before
// some op of the peer (so the peer cannot return, and let its caller reuse
// the buffers, while the access is still running).
void check_peer_lifetimes(const Schedule& s, const std::vector<OpOrder>& rank_orders, const OpOrder& all,
                          Errors& e) {
  for (int r = 0; r < s.nranks && !e.full(); ++r) {
    const RankProgram& p = s.ranks[r];
    std::map<int, std::vector<OpId>> waits;  // per peer: this rank's Waits for its signals
    for (size_t l = 0; l < p.lanes.size(); ++l)
      for (size_t i = 0; i < p.lanes[l].ops.size(); ++i)
        if (p.lanes[l].ops[i].type == OpType::Wait) waits[p.lanes[l].ops[i].recv_peer].push_back({r, l, i});
    for (size_t l = 0; l < p.lanes.size(); ++l)
      for (size_t i = 0; i < p.lanes[l].ops.size(); ++i) {
        const Op& op = p.lanes[l].ops[i];
        if (!op_one_sided(op.type)) continue;
        const int q = op_puts(op.type) ? op.send_peer : op.recv_peer;
        const OpId access{r, l, i};
        const std::vector<OpId>& from_q = waits[q];
        if (std::none_of(from_q.begin(), from_q.end(), [&](OpId w) { return rank_orders[r].before(w, access); }))
          e.add("{}: touches rank {}'s buffers before waiting for a signal from it (a rank's buffers are known, and "
                "free to use, only once it has signalled)",
                where(s, r, l, i), q);
        bool held = false;
        for (size_t lq = 0; lq < s.ranks[q].lanes.size() && !held; ++lq)
          if (!s.ranks[q].lanes[lq].ops.empty())
            held = all.before(access, {q, lq, s.ranks[q].lanes[lq].ops.size() - 1});
        if (!held)
          e.add("{}: rank {} may leave the call before this access ends: no op of rank {} comes after it (signal "
                "rank {} after the access, and have it wait)",
                where(s, r, l, i), q, q, q);
      }
  }
}

// -------------------------------------------------------------- simulation

using Parts = std::vector<std::pair<int, uint32_t>>;  // sorted (rank, input chunk)

// Shared and immutable: copying a chunk's content is cheap however many ranks it sums.
struct Content {
  enum Kind : uint8_t { Unwritten, Valid, Poisoned } kind = Unwritten;  // Poisoned: an error was reported
  std::shared_ptr<const Parts> parts;                                     // non-empty when Valid
  // The left fold of ranks 0, 1, ..., k's inputs in that order (rank 0's
  // input alone is one).
  bool in_rank_order = false;

  static Content valid(Parts p, bool in_rank_order) {
    return {Valid, std::make_shared<const Parts>(std::move(p)), in_rank_order};
  }
  static Content poisoned() { return {Poisoned, nullptr}; }
  uint32_t position(uint32_t per_block) const { return (*parts)[0].second % per_block; }
};

std::string describe(const Parts& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size() && i < 6; ++i)
    out += fmt::format("{}rank {} input[{}]", i ? ", " : "", parts[i].first, parts[i].second);
  if (parts.size() > 6) out += fmt::format(", ... ({} in all)", parts.size());
  return out.empty() ? "nothing" : out;
}

class Simulation {
 public:
  Simulation(const Schedule& s, const VerifyOptions& o, uint32_t per_block, bool in_place, Errors& e)
      : s_(s), slots_(size_t(o.slots)), c_(per_block), rank_order_(o.rank_order), e_(e),
        prefix_(in_place ? "in place: " : "out of place: ") {
    for (int r = 0; r < s.nranks; ++r) {
      cells_.emplace_back(s, r, in_place, per_block);
      std::vector<Content> state(cells_.back().count);
      for (uint32_t i = 0; i < s.ranks[r].input_chunks && has_input(s, r); ++i)
        state[cells_.back().input[i]] = Content::valid({{r, i}}, r == 0);
      state_.push_back(std::move(state));
      lanes_.emplace_back(s.ranks[r].lanes.size());
    }
  }

  const std::vector<Cells>& cells() const { return cells_; }
  const std::string& prefix() const { return prefix_; }

  // Runs every lane to completion; false (with an error) on deadlock.
  bool run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < s_.nranks; ++r)
        for (size_t l = 0; l < lanes_[r].size(); ++l)
          while (step(r, l)) progress = true;
    }
    std::string blocked;
    size_t count = 0;
    for (int r = 0; r < s_.nranks; ++r)
      for (size_t l = 0; l < lanes_[r].size(); ++l)
        if (!finished(r, l) && count++ < 6) blocked += "; " + why_blocked(r, l);
    if (count == 0) return true;
    e_.add("deadlock with {} slot(s) per connection: {} lane(s) stuck{}{}", slots_, count, blocked,
           count > 6 ? "; ..." : "");
    return false;
  }

  // Every output chunk holds what the collective defines.
  void check_outputs() {
    if (c_ == 0) return;
    for (int r = 0; r < s_.nranks && !e_.full(); ++r) {
      if (!has_output(s_, r)) continue;
      for (uint32_t j = 0; j < s_.ranks[r].output_chunks; ++j) {
        const Content& got = state_[r][cells_[r].output[j]];
        Parts want = expected(r, j);
        if (got.kind == Content::Poisoned) continue;
        if (got.kind == Content::Unwritten) {
          e_.add("{}rank {} output[{}] is never written; it should hold {}", prefix_, r, j, describe(want));
          continue;
        }
        const Parts& have = *got.parts;
        if (have == want && rank_order_ && want.size() > 1 && !got.in_rank_order)
          e_.add("{}rank {} output[{}] holds every rank's input, but not folded in rank order (the left fold "
                 "x0 (+) x1 (+) ... that BRAID_DETERMINISTIC needs)", prefix_, r, j);
        if (have == want) continue;
        Parts missing, extra;
        std::set_difference(want.begin(), want.end(), have.begin(), have.end(), std::back_inserter(missing));
        std::set_difference(have.begin(), have.end(), want.begin(), want.end(), std::back_inserter(extra));
        e_.add("{}rank {} output[{}] ends wrong: missing {}; unexpected {}", prefix_, r, j, describe(missing),
               describe(extra));
      }
    }
  }

 private:
  struct LaneState {
    size_t op = 0;
    uint32_t chunk = 0;
    int tile = 0;
    uint64_t completed = 0;
  };
  using Message = std::vector<Content>;  // the chunks one op moves at once
  using Queue = std::deque<Message>;

  Parts expected(int r, uint32_t j) const {
    const uint32_t c = c_, block = j / c, pos = j % c;
    Parts want;
    auto all_ranks = [&](uint32_t chunk) {
      for (int q = 0; q < s_.nranks; ++q) want.push_back({q, chunk});
    };
    switch (s_.collective) {
      case Collective::AllReduce:
      case Collective::Reduce: all_ranks(j); break;
      case Collective::ReduceScatter: all_ranks(r * c + j); break;
      case Collective::AllGather:
      case Collective::Gather: want.push_back({int(block), pos}); break;
      case Collective::Broadcast: want.push_back({s_.root, j}); break;
      case Collective::AlltoAll: want.push_back({int(block), r * c + pos}); break;
      case Collective::Scatter: want.push_back({s_.root, r * c + j}); break;
      case Collective::Custom: break;
    }
    return want;
  }

  const Lane& lane(int r, size_t l) const { return s_.ranks[r].lanes[l]; }
  bool finished(int r, size_t l) const { return lanes_[r][l].tile >= kTiles || lane(r, l).ops.empty(); }
  Queue& queue(int from, int to, int channel) { return queues_[{from, to, channel}]; }

  const Dep* unmet_dep(int r, const Op& op, int tile) const {
    for (const Dep& d : op.deps) {
      const LaneState& other = lanes_[r][d.lane];
      if (other.completed < uint64_t(tile) * lane(r, d.lane).ops.size() + d.op + 1) return &d;
    }
    return nullptr;
  }

  std::string why_blocked(int r, size_t l) {
    const LaneState& st = lanes_[r][l];
    const Op& op = lane(r, l).ops[st.op];
    std::string at = fmt::format("{} tile {}", where(s_, r, l, st.op), st.tile);
    if (const Dep* d = st.chunk == 0 ? unmet_dep(r, op, st.tile) : nullptr)
      return fmt::format("{} waits for lane {} op {}", at, d->lane, d->op);
    const int ch = lane(r, l).channel;
    if (op_receives(op.type) && queue(op.recv_peer, r, ch).empty())
      return fmt::format("{} waits for data from rank {} (channel {})", at, op.recv_peer, ch);
    return fmt::format("{} waits for room to rank {} (channel {})", at, op.send_peer, ch);
  }

  // Moves one message of lane l's current op (all its chunks); false if it
  // cannot.
  bool step(int r, size_t l) {
    if (finished(r, l)) return false;
    LaneState& st = lanes_[r][l];
    const Op& op = lane(r, l).ops[st.op];
    if (st.chunk == 0 && unmet_dep(r, op, st.tile)) return false;
    const int ch = lane(r, l).channel;
    Queue* in = op_receives(op.type) ? &queue(op.recv_peer, r, ch) : nullptr;
    Queue* out = op_sends(op.type) ? &queue(r, op.send_peer, ch) : nullptr;
    if ((in && in->empty()) || (out && out->size() >= slots_)) return false;
    const bool signal = message_chunks(op) == 0;  // a message without chunks
    const uint32_t count = signal ? 0 : std::max<uint32_t>(op.count, 1), moved = count;
    Message received(moved), sent(moved);
    if (in) {
      received = std::move(in->front());  // check_matching made it `moved` chunks long
      in->pop_front();
    }
    for (uint32_t k = 0; k < moved && st.tile == 0; ++k) sent[k] = apply(r, l, st.op, st.chunk + k, std::move(received[k]));
    if (out) out->push_back(std::move(sent));
    if ((st.chunk += moved) < count) return true;
    st.chunk = 0;
    ++st.completed;
    if (++st.op == lane(r, l).ops.size()) st.op = 0, ++st.tile;
    return true;
  }

  // The symbolic effect of chunk k of an op; returns what it sends.
  Content apply(int r, size_t l, size_t i, uint32_t k, Content received) {
    const Op& op = lane(r, l).ops[i];
    // `q`: the rank whose chunk it is (a peer's, for one-sided ops).
    auto whose = [&](int q) { return q == r ? std::string() : fmt::format("rank {}'s ", q); };
    auto read = [&](ChunkRef ref, int q = -1) {
      q = q < 0 ? r : q;
      Content c = state_[q][cells_[q](ref, k)];
      if (c.kind == Content::Unwritten) {
        e_.add("{}{} reads {}{} before anything was written to it", prefix_, where(s_, r, l, i), whose(q),
               ref_name(ref, k));
        c.kind = Content::Poisoned;
      }
      return c;
    };
    auto combine = [&](Content a, const Content& b) {
      if (a.kind != Content::Valid || b.kind != Content::Valid) return Content::poisoned();
      if (c_ && a.position(c_) != b.position(c_)) {
        e_.add("{}{} reduces chunks from different positions ({} with {})", prefix_, where(s_, r, l, i),
               describe(*a.parts), describe(*b.parts));
        return Content::poisoned();
      }
      Parts both, twice;
      std::merge(a.parts->begin(), a.parts->end(), b.parts->begin(), b.parts->end(), std::back_inserter(both));
      for (size_t k = 1; k < both.size(); ++k)
        if (both[k] == both[k - 1]) twice.push_back(both[k]);
      if (!twice.empty()) {
        e_.add("{}{} counts {} twice", prefix_, where(s_, r, l, i), describe(twice));
        return Content::poisoned();
      }
      // In rank order: `a` (the executors' left operand) folds ranks 0..k
      // and `b` is rank k+1's input alone.
      const bool ordered = a.in_rank_order && b.parts->size() == 1 && (*b.parts)[0].first == a.parts->back().first + 1;
      return Content::valid(std::move(both), ordered);
    };
    auto write = [&](ChunkRef ref, Content c, int q = -1) {
      q = q < 0 ? r : q;
      // A user chunk's length depends on its position in a block; data from
      // another position would not fit it when the count is uneven.
      if (c_ && c.kind == Content::Valid && ref.buffer != BufferKind::Scratch &&
          c.position(c_) != (ref.index + k) % c_) {
        e_.add("{}{} writes {} into {}{}, a chunk of another position", prefix_, where(s_, r, l, i),
               describe(*c.parts), whose(q), ref_name(ref, k));
        c = Content::poisoned();
      }
      state_[q][cells_[q](ref, k)] = std::move(c);
    };
    switch (op.type) {
      case OpType::Send: return read(op.src);
      case OpType::Recv: write(op.dst, std::move(received)); return {};
      case OpType::RecvCopySend: write(op.dst, received); return received;
      case OpType::RecvReduceSend: return combine(std::move(received), read(op.src));
      case OpType::RecvReduceCopy: write(op.dst, combine(std::move(received), read(op.src))); return {};
      case OpType::RecvReduceCopySend: {
        Content v = combine(std::move(received), read(op.src));
        write(op.dst, v);
        return v;
      }
      case OpType::Copy: write(op.dst, read(op.src)); return {};
      case OpType::Reduce: write(op.dst, combine(read(op.dst), read(op.src))); return {};
      case OpType::Put: write(op.dst, read(op.src), op.send_peer); return {};
      case OpType::Get: write(op.dst, read(op.src, op.recv_peer)); return {};
      case OpType::GetReduce: write(op.dst, combine(read(op.dst), read(op.src, op.recv_peer))); return {};
      case OpType::GetReduceCopy: write(op.dst, combine(read(op.src, op.recv_peer), read(op.src))); return {};
      case OpType::Nop:
      case OpType::Signal:
      case OpType::Wait: return {};
    }
    return {};
  }

  const Schedule& s_;
  size_t slots_;
  uint32_t c_;
  bool rank_order_;
  Errors& e_;
  std::string prefix_;
  std::vector<Cells> cells_;
  std::vector<std::vector<Content>> state_;  // per rank, per cell
  std::vector<std::vector<LaneState>> lanes_;
  std::map<std::tuple<int, int, int>, Queue> queues_;  // (from, to, channel)
};

// Every connection carries as many chunks out as in, and (unless every
// chunk is its own message) in messages of the same sizes, in order: one
// lane sends on it and one receives (check_structure), so the k-th message
// sent is the k-th received.
void check_matching(const Schedule& s, const VerifyOptions& o, Errors& e) {
  struct Traffic {
    std::vector<uint32_t> sent, received;  // message sizes in lane order
    uint64_t sent_chunks = 0, received_chunks = 0;
  };
  std::map<std::tuple<int, int, int>, Traffic> conns;  // (from, to, channel)
  for (int r = 0; r < s.nranks; ++r)
    for (const Lane& lane : s.ranks[r].lanes)
      for (const Op& op : lane.ops) {
        const uint32_t chunks = message_chunks(op);
        if (op_sends(op.type)) {
          Traffic& t = conns[{r, op.send_peer, lane.channel}];
          t.sent.push_back(chunks), t.sent_chunks += chunks;
        }
        if (op_receives(op.type)) {
          Traffic& t = conns[{op.recv_peer, r, lane.channel}];
          t.received.push_back(chunks), t.received_chunks += chunks;
        }
      }
  for (const auto& [conn, t] : conns) {
    auto [from, to, channel] = conn;
    if (t.sent_chunks != t.received_chunks) {
      e.add("rank {} sends {} chunk(s) to rank {} on channel {}, but rank {} receives {} from rank {} there", from,
            t.sent_chunks, to, channel, to, t.received_chunks, from);
      continue;
    }
    if (t.sent.size() != t.received.size() && std::equal(t.sent.begin(), t.sent.begin() + std::min(t.sent.size(),
                                                         t.received.size()), t.received.begin()))
      e.add("rank {} sends {} message(s) to rank {} on channel {}, but rank {} receives {} (signals are messages)",
            from, t.sent.size(), to, channel, to, t.received.size());
    for (size_t k = 0; k < std::min(t.sent.size(), t.received.size()); ++k)
      if (t.sent[k] != t.received[k]) {
        e.add("message {} from rank {} to rank {} on channel {}: {} chunk(s) sent as one, but received by an op of {}"
              " (a signal's message has none)",
              k, from, to, channel, t.sent[k], t.received[k]);
        break;
      }
  }
}

}  // namespace

VerifyResult verify(const Schedule& s, const VerifyOptions& given) {
  VerifyOptions options = given;
  if (options.slots == 0) options.slots = s.slots;
  Errors e(options.max_errors);
  bool deadlock = false;
  check_structure(s, options, e);
  if (!e.any()) check_matching(s, options, e);
  uint32_t per_block = e.any() ? 0 : check_layout(s, e);
  std::vector<OpOrder> orders(e.any() ? 0 : s.nranks);
  for (int r = 0; r < int(orders.size()); ++r) orders[r].build(s, {r}, false, true, e);
  // One-sided ops order accesses across ranks, through signals: one order
  // over every rank (a cycle there is a deadlock, which the run reports).
  const bool one_sided = !e.any() && has_one_sided_ops(s);
  OpOrder all;
  std::vector<int> every_rank(s.nranks);
  for (int r = 0; r < s.nranks; ++r) every_rank[r] = r;
  const bool all_ordered = one_sided && all.build(s, every_rank, true, false, e);
  if (all_ordered) check_peer_lifetimes(s, orders, all, e);
  if (!e.any()) {
    // A custom collective defines no aliasing: it is checked out of place only.
    bool custom = s.collective == Collective::Custom;
    RaceSet races;
    for (bool in_place : {false, true}) {
      bool claimed = custom ? !in_place : in_place ? s.in_place : s.out_of_place;
      if (!claimed || e.full()) continue;
      Simulation sim(s, options, per_block, in_place, e);
      for (int r = 0; r < s.nranks && (!one_sided || all_ordered); ++r)
        check_races(s, r, one_sided ? all : orders[r], sim.cells(), one_sided, in_place ? sim.prefix() : "", races,
                    e);
      if (!sim.run()) {
        deadlock = true;
        break;  // the same deadlock in either placement
      }
      sim.check_outputs();
    }
  }
  VerifyResult result;
  result.errors = e.take();
  result.ok = result.errors.empty();
  result.deadlock = deadlock;
  return result;
}

bool folds_in_rank_order(const Schedule& s) { return verify(s, {.max_errors = 1, .rank_order = true}).ok; }

VerifyResult verify_fitting_slots(Schedule* s, int max_slots) {
  // Deadlock freedom is monotone in the slots: search the least that works.
  s->slots = kMinSlots;
  VerifyResult r = verify(*s);
  if (r.ok || !r.deadlock || max_slots <= kMinSlots) return r;
  s->slots = max_slots;
  VerifyResult at_most = verify(*s);
  if (!at_most.ok) return at_most;
  int lo = kMinSlots, hi = max_slots;  // deadlocks at lo, verifies at hi
  while (hi - lo > 1) {
    s->slots = lo + (hi - lo) / 2;
    VerifyResult mid = verify(*s);
    if (mid.ok) hi = s->slots, at_most = std::move(mid);
    else lo = s->slots;  // only a deadlock can fail here: the rest does not depend on slots
  }
  s->slots = hi;
  return at_most;
}

}  // namespace braid

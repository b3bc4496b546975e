// Discrete-event simulation of a Schedule (model in include/braid/sim.h).
//
// Each step picks, among the next op of every lane that can start, the one
// whose bytes can get on the wire earliest (its start, or for a send also
// when its first link and ports are free), and runs it to completion; so
// links and ports are claimed in time order, as in list scheduling.  With
// fragments, an op is run once per tile.  Cost per step is a scan over all
// lanes: O(ops * tiles * lanes) in total, milliseconds for a few thousand ops.
#include "braid/sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <tuple>

#include "braid/chunking.h"

namespace braid {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// The hops from src to dst: the direct link, or a fewest-hops path.
std::vector<int> route(const Topology& t, int src, int dst) {
  int direct = t.link_index(src, dst);
  if (direct >= 0) return {direct};
  const int n = t.nranks();
  std::vector<int> via(n, -1);  // link that reached each rank
  std::vector<bool> seen(n, false);
  std::deque<int> queue{src};
  seen[src] = true;
  while (!queue.empty()) {
    int u = queue.front();
    queue.pop_front();
    for (size_t i = 0; i < t.links.size(); ++i) {
      const Link& l = t.links[i];
      if (l.src != u || seen[l.dst]) continue;
      seen[l.dst] = true;
      via[l.dst] = int(i);
      queue.push_back(l.dst);
    }
  }
  std::vector<int> path;
  if (!seen[dst]) return path;
  for (int v = dst; v != src; v = t.links[via[v]].src) path.push_back(via[v]);
  std::reverse(path.begin(), path.end());
  return path;
}

// Arrival times queued per message: one per chunk, or one for a signal.
uint32_t entries(const Op& op) { return message_chunks(op) == 0 ? 1 : op.count; }

// The link path an op's bytes take: (from, to), or (-1, -1) for a local op.
// A send or put goes out to its peer; a get's bytes come in from its peer.
std::pair<int, int> transfer_ends(int rank, const Op& op) {
  if (op_sends(op.type) || op_puts(op.type)) return {rank, op.send_peer};
  if (op_gets(op.type)) return {op.recv_peer, rank};
  return {-1, -1};
}

uint64_t per_rank_count_bytes(Collective c, int nranks, uint64_t size) {
  switch (c) {
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AlltoAll:
    case Collective::Gather:
    case Collective::Scatter: return size / uint64_t(nranks);
    default: return size;
  }
}

}  // namespace

double bus_bandwidth_gbps(Collective c, int n, uint64_t size, double time_us) {
  if (time_us <= 0) return 0;
  double algbw = double(size) / (time_us * 1e3);  // bytes/us = MB/s; /1e3 -> GB/s
  double factor = 1;
  switch (c) {
    case Collective::AllReduce: factor = 2.0 * (n - 1) / n; break;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AlltoAll:
    case Collective::Gather:
    case Collective::Scatter: factor = double(n - 1) / n; break;
    default: break;
  }
  return algbw * factor;
}

namespace {
bool simulate_or_throw(const Schedule& s, const Topology& t, uint64_t size_bytes, SimResult* out, std::string* error,
                       const SimOptions& options);
}

bool simulate(const Schedule& s, const Topology& t, uint64_t size_bytes, SimResult* out, std::string* error,
              const SimOptions& options) {
  try {
    return simulate_or_throw(s, t, size_bytes, out, error, options);
  } catch (const std::exception& e) {
    *error = fmt::format("simulation failed: {}", e.what());
    return false;
  }
}

namespace {

bool simulate_or_throw(const Schedule& s, const Topology& t, uint64_t size_bytes, SimResult* out, std::string* error,
                       const SimOptions& options) {
  const std::vector<double>& starts = options.rank_start_us;
  if (!starts.empty() && int(starts.size()) != s.nranks)
    return *error = fmt::format("{} start times for {} ranks", starts.size(), s.nranks), false;
  if (s.nranks != t.nranks())
    return *error = fmt::format("schedule has {} ranks, topology {} has {}", s.nranks, t.name, t.nranks()), false;
  if (int(s.ranks.size()) != s.nranks) return *error = "schedule has the wrong number of rank programs", false;
  const int n = s.nranks;
  const uint64_t count = per_rank_count_bytes(s.collective, n, size_bytes);
  auto chunk_bytes = [&](const RankProgram& p, BufferKind b) -> double {
    BufferShape in = input_shape(s.collective, n, count, std::max<uint32_t>(p.input_chunks, 1));
    BufferShape outb = output_shape(s.collective, n, count, std::max<uint32_t>(p.output_chunks, 1));
    if (b == BufferKind::Input) return double(in.elems()) / std::max<uint32_t>(p.input_chunks, 1);
    if (b == BufferKind::Output) return double(outb.elems()) / std::max<uint32_t>(p.output_chunks, 1);
    return double(scratch_chunk_capacity(in, outb));
  };
  // Fragments: a rank runs its lanes once per tile, as many tiles as its
  // largest chunk has fragments (the host executor's rule); tile k of a
  // chunk is its bytes [k*f, (k+1)*f), possibly empty.  Whole chunks: one
  // tile; so too a schedule whose messages carry no chunks (signals only),
  // which the executors run as one tile.
  const double frag = options.fragment_bytes > 0 && has_chunk_messages(s) ? double(options.fragment_bytes) : 0;
  std::vector<uint64_t> tiles(n, 1);
  if (frag > 0)
    for (int r = 0; r < n; ++r) {
      const RankProgram& p = s.ranks[r];
      double widest = 0;
      for (BufferKind b : {BufferKind::Input, BufferKind::Output, BufferKind::Scratch})
        widest = std::max(widest, chunk_bytes(p, b));
      tiles[r] = std::max<uint64_t>(1, uint64_t(std::ceil(widest / frag)));
    }
  auto piece = [&](double bytes, uint64_t tile) {
    return frag > 0 ? std::clamp(bytes - double(tile) * frag, 0.0, frag) : bytes;
  };
  std::map<std::pair<int, int>, std::vector<int>> routes;
  auto path_of = [&](int a, int b) -> const std::vector<int>& {
    auto it = routes.find({a, b});
    if (it == routes.end()) it = routes.emplace(std::make_pair(a, b), route(t, a, b)).first;
    return it->second;
  };
  std::vector<double> link_free(t.links.size(), 0), port_free(t.ports.size(), 0);
  // Arrival times of chunk messages per connection (sender, receiver, channel).
  std::map<std::tuple<int, int, int>, std::deque<double>> inflight;

  struct LaneState {
    size_t pc = 0;
    uint64_t tile = 0;
    double free_at = 0;
    std::vector<double> done;  // completion time per op of the current and earlier tiles, [tile][op]
  };
  std::vector<std::vector<LaneState>> lanes(n);
  size_t remaining = 0;
  for (int r = 0; r < n; ++r) {
    lanes[r].resize(s.ranks[r].lanes.size());
    for (size_t l = 0; l < lanes[r].size(); ++l) {
      const size_t ops = s.ranks[r].lanes[l].ops.size();
      lanes[r][l].done.assign(ops * tiles[r], kNever);
      lanes[r][l].free_at = starts.empty() ? 0 : starts[size_t(r)];
      remaining += ops * tiles[r];
    }
  }
  auto finished = [&](int r, size_t l) { return lanes[r][l].tile >= tiles[r]; };
  out->transfers.clear();
  out->time_us = 0;
  while (remaining > 0) {
    // The next op of each lane that can start now, and when it would.
    double best = kNever, best_key = kNever;
    int best_r = -1, best_l = -1;
    for (int r = 0; r < n; ++r)
      for (size_t l = 0; l < lanes[r].size(); ++l) {
        LaneState& st = lanes[r][l];
        const Lane& lane = s.ranks[r].lanes[l];
        if (lane.ops.empty() || finished(r, l)) continue;
        const Op& op = lane.ops[st.pc];
        double start = st.free_at;
        bool ready = true;
        for (const Dep& d : op.deps) {
          if (d.lane >= lanes[r].size() || d.op >= s.ranks[r].lanes[d.lane].ops.size()) return *error = "bad dep", false;
          double at = lanes[r][d.lane].done[st.tile * s.ranks[r].lanes[d.lane].ops.size() + d.op];
          if (at == kNever) ready = false;
          start = std::max(start, at);
        }
        if (!ready) continue;
        if (op_receives(op.type)) {
          auto it = inflight.find({op.recv_peer, r, lane.channel});
          if (it == inflight.end() || it->second.size() < entries(op)) continue;
          for (uint32_t k = 0; k < entries(op); ++k) start = std::max(start, it->second[k]);
        }
        // Rank candidates by when their bytes could get on the wire, so links
        // and ports are claimed in time order (list scheduling) rather than
        // in the order ops happened to become ready.
        double key = start;
        if (const auto [from, to] = transfer_ends(r, op); from >= 0) {
          const std::vector<int>& path = path_of(from, to);
          if (!path.empty()) {
            key = std::max(key, link_free[path[0]]);
            for (int p : t.links[path[0]].ports) key = std::max(key, port_free[p]);
          }
        }
        if (key < best_key) best_key = key, best = start, best_r = r, best_l = int(l);
      }
    if (best_r < 0)
      return *error = fmt::format("the schedule cannot finish: {} ops never become ready", remaining), false;
    LaneState& st = lanes[best_r][best_l];
    const Lane& lane = s.ranks[best_r].lanes[best_l];
    const Op& op = lane.ops[st.pc];
    const RankProgram& prog = s.ranks[best_r];
    double t_now = best;
    if (op_receives(op.type)) {
      auto& q = inflight[{op.recv_peer, best_r, lane.channel}];
      for (uint32_t k = 0; k < entries(op); ++k) q.pop_front();
    }
    const double bytes =
        message_chunks(op) == 0 && !op_one_sided(op.type)
            ? 0
            : piece(chunk_bytes(prog, op_writes_dst(op.type) ? op.dst.buffer : op.src.buffer), st.tile) * op.count;
    if (op_reduces(op.type) || op.type == OpType::Copy || (op_receives(op.type) && op_writes_dst(op.type)))
      t_now += bytes * t.local_beta_us_per_mb / 1e6;
    double finish = t_now;
    if (const auto [from, to] = transfer_ends(best_r, op); from >= 0) {
      const std::vector<int>& path = path_of(from, to);
      if (path.empty()) return *error = fmt::format("no route from rank {} to rank {} in {}", from, to, t.name), false;
      // The op's chunks are contiguous: one message of all of them, which
      // pays alpha once (an MSCCL step with cnt > 1 is one transfer).
      double hop_ready = t_now;
      for (size_t h = 0; h < path.size(); ++h) {
        const Link& link = t.links[path[h]];
        double begin = std::max(hop_ready, link_free[path[h]]);
        for (int p : link.ports) begin = std::max(begin, port_free[p]);
        double end = begin + link.alpha_us + link.beta_us_per_mb * bytes / 1e6;
        link_free[path[h]] = end;
        for (int p : link.ports) port_free[p] = end;
        out->transfers.push_back({link.src, link.dst, path[h], begin, end, best_r,
                                  op_reads_src(op.type) ? op.src.index : op.dst.index, op.count});
        // A sender is free once the first hop is done; a put or get ends
        // when its bytes are where they belong.
        if (h == 0 || op_one_sided(op.type)) finish = std::max(finish, end);
        hop_ready = end;
      }
      if (op_sends(op.type)) {
        auto& q = inflight[{best_r, op.send_peer, lane.channel}];
        for (uint32_t k = 0; k < entries(op); ++k) q.push_back(hop_ready);
      }
    }
    st.done[st.tile * lane.ops.size() + st.pc] = finish;
    if (++st.pc == lane.ops.size()) st.pc = 0, ++st.tile;
    st.free_at = finish;
    out->time_us = std::max(out->time_us, finish);
    --remaining;
  }
  return true;
}

}  // namespace

}  // namespace braid

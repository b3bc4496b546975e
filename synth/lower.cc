// Lowering ordered transfers to braid's IR (after the three stages).
//
// Every rank gets a lane for local copies, one lane per peer it sends to and
// one per peer it receives from (MSCCL's thread-block shape, so the result
// exports to MSCCL XML).  AllReduce has two such lanes per connection, one
// per phase, so a ReduceScatter send never waits behind an AllGather send
// (or the reverse) on the same link: they run concurrently and so use
// distinct channels (0 and 1; MSCCL XML carries them as `chan`).  A lane's
// ops follow the global transfer order, so the k-th send on a link meets the
// k-th receive.  A message stage 3 merged is one op of `count` chunks over a
// contiguous range at both ends (contiguity.cc's mergeable() says which
// ranges are contiguous; relayed AlltoAll chunks get adjacent scratch slots
// reserved where they arrive).  Dependencies (forward
// after receive, reduce in arrival order, overwrite a partial sum only after
// it was sent) always point at transfers earlier in that order, which makes
// the program deadlock-free: every wait is for something strictly earlier.
//
// AllGather: chunk j of rank s is output chunk s*u+j (u = input_chunkup);
// relays receive into the output.  AlltoAll: chunk j from s to d is input
// chunk d*u+j at s and output chunk s*u+j at d; it travels through scratch
// and a local copy puts it in place once d has sent what that cell held.
// AllReduce: chunk o*u+j is reduced up the reversed tree of rank o's
// AllGather chunk j (children's partials land in scratch and are added into
// the output in a per-chunk lane, in the scheduled order), then sent back
// down it.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "synth/problem.h"

namespace braid::synth {
namespace {

// A lane: (kind, peer or chunk, channel).
enum LaneKind { kLocal, kSend, kRecv, kReduce };
using LaneKey = std::tuple<int, int, int>;

struct Record {
  LaneKey key;
  int seq = -1;
  Op op;
  std::vector<int> deps;  // record ids on the same rank
};

class RankOps {
 public:
  int add(LaneKey key, int seq, Op op, std::vector<int> deps) {
    deps.erase(std::remove(deps.begin(), deps.end(), -1), deps.end());
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    records_.push_back({key, seq, std::move(op), std::move(deps)});
    return int(records_.size() - 1);
  }

  void emit(RankProgram* p) const {
    std::map<LaneKey, std::vector<int>> by_lane;
    for (size_t i = 0; i < records_.size(); ++i) by_lane[records_[i].key].push_back(int(i));
    std::vector<std::pair<uint16_t, uint32_t>> where(records_.size());
    p->lanes.clear();
    for (auto& [key, ids] : by_lane) {
      std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return records_[a].seq < records_[b].seq; });
      for (size_t k = 0; k < ids.size(); ++k) where[ids[k]] = {uint16_t(p->lanes.size()), uint32_t(k)};
      p->lanes.emplace_back();
      p->lanes.back().channel = uint16_t(std::get<2>(key));
    }
    for (auto& [key, ids] : by_lane)
      for (int id : ids) {
        Op op = records_[id].op;
        for (int d : records_[id].deps) op.deps.push_back(Dep{where[d].first, where[d].second});
        p->lanes[where[id].first].ops.push_back(std::move(op));
      }
  }

 private:
  std::vector<Record> records_;
};

ChunkRef in(uint32_t i) { return {BufferKind::Input, i}; }
ChunkRef out(uint32_t i) { return {BufferKind::Output, i}; }
ChunkRef scratch(uint32_t i) { return {BufferKind::Scratch, i}; }
LaneKey local_lane() { return {kLocal, 0, 0}; }
Op with_count(Op op, size_t count) {
  op.count = uint32_t(count);
  return op;
}

}  // namespace

bool lower(const Problem& p, Collective c, const std::vector<Transfer>& transfers, Schedule* s, std::string* error) {
  const Topology& t = *p.topo;
  const int n = t.nranks(), u = p.chunkup;
  const int nchunks = int(p.chunks.size());
  std::vector<Transfer> xs = transfers;
  std::sort(xs.begin(), xs.end(), [](const Transfer& a, const Transfer& b) { return a.seq < b.seq; });
  // Messages: a transfer and the ones that joined it (stage 3), by position in xs.
  std::vector<std::vector<int>> messages;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].joins_previous || messages.empty()) messages.emplace_back();
    messages.back().push_back(int(i));
  }
  std::vector<RankOps> ranks(n);
  std::vector<uint32_t> scratch_used(n, 0);
  // Per (chunk, rank): the record that made the chunk available there.
  std::vector<std::vector<int>> have(nchunks, std::vector<int>(n, -1));
  std::vector<std::vector<int>> held_in(nchunks, std::vector<int>(n, -1));  // AlltoAll relay scratch slot
  std::vector<std::vector<int>> last_reduce = have, rs_sent = have;
  // A rank's sends through one shared port (switch egress, NIC) keep the
  // scheduled order: each waits for the previous one through that port.
  // Lanes alone only order sends per link, and a port taken out of order can
  // stall the plan of every link behind it.
  std::vector<std::map<int, int>> last_port_send(n);
  auto send = [&](const Transfer& x, int channel, Op op, std::vector<int> deps) {
    const Link& l = t.links[x.link];
    for (int port : l.ports) {
      auto it = last_port_send[l.src].find(port);
      if (it != last_port_send[l.src].end()) deps.push_back(it->second);
    }
    int id = ranks[l.src].add({kSend, l.dst, channel}, x.seq, std::move(op), std::move(deps));
    for (int port : l.ports) last_port_send[l.src][port] = id;
    return id;
  };
  auto recv = [&](const Transfer& x, int channel, Op op, std::vector<int> deps) {
    const Link& l = t.links[x.link];
    return ranks[l.dst].add({kRecv, l.src, channel}, x.seq, std::move(op), std::move(deps));
  };
  // AllGather-shaped chunk index (output chunk src*u+j); a message covers the
  // lowest index of its chunks onwards.
  auto gather_index = [&](int i) { return uint32_t(p.chunks[xs[i].chunk].src * u + p.chunks[xs[i].chunk].j); };
  auto lowest = [&](const std::vector<int>& msg, auto index) {
    uint32_t lo = index(msg[0]);
    for (int i : msg) lo = std::min(lo, index(i));
    return lo;
  };

  s->collective = c;
  s->nranks = n;
  s->ranks.assign(n, {});
  if (c == Collective::AllGather) {
    for (int r = 0; r < n; ++r) {
      s->ranks[r].input_chunks = u;
      s->ranks[r].output_chunks = n * u;
      for (int j = 0; j < u; ++j)
        have[p.chunk_index(r, -1, j)][r] = ranks[r].add(local_lane(), -1, make_op(OpType::Copy, -1, -1, in(j), out(r * u + j)), {});
    }
    for (const std::vector<int>& msg : messages) {
      const Transfer& x = xs[msg[0]];
      const Link& l = t.links[x.link];
      uint32_t lo = lowest(msg, gather_index);
      std::vector<int> deps;
      for (int i : msg) deps.push_back(have[xs[i].chunk][l.src]);
      send(x, 0, with_count(make_op(OpType::Send, l.dst, -1, out(lo), {}), msg.size()), deps);
      int got = recv(x, 0, with_count(make_op(OpType::Recv, -1, l.src, {}, out(lo)), msg.size()), {});
      for (int i : msg) have[xs[i].chunk][l.dst] = got;
    }
    s->in_place = s->out_of_place = true;
  } else if (c == Collective::AlltoAll) {
    for (int r = 0; r < n; ++r) {
      s->ranks[r].input_chunks = n * u;
      s->ranks[r].output_chunks = n * u;
      for (int j = 0; j < u; ++j)
        ranks[r].add(local_lane(), -1, make_op(OpType::Copy, -1, -1, in(r * u + j), out(r * u + j)), {});
    }
    // A relay forwards a merged message from adjacent scratch slots, reserved
    // here and used where each chunk arrives.
    std::map<std::pair<int, int>, uint32_t> reserved;  // (chunk, rank) -> slot
    for (const std::vector<int>& msg : messages) {
      const Link& l = t.links[xs[msg[0]].link];
      if (msg.size() < 2 || p.chunks[xs[msg[0]].chunk].src == l.src) continue;
      for (int i : msg) reserved[{xs[i].chunk, l.src}] = scratch_used[l.src]++;
    }
    // Every chunk lands in scratch, and is copied to its output block once it
    // is there and the destination has sent its own input chunk at the same
    // index (in place that input chunk is the same memory): correct in both
    // placements for one local copy per chunk.
    std::vector<int> first_send(nchunks, -1), landed(nchunks, -1), last_seq(nchunks, -1);
    std::vector<uint32_t> landed_slot(nchunks, 0);
    auto input_index = [&](int i) { return uint32_t(p.chunks[xs[i].chunk].dst * u + p.chunks[xs[i].chunk].j); };
    auto relay_slot = [&](int i) { return uint32_t(held_in[xs[i].chunk][t.links[xs[i].link].src]); };
    for (const std::vector<int>& msg : messages) {
      const Transfer& x = xs[msg[0]];
      const Link& l = t.links[x.link];
      const bool at_source = p.chunks[x.chunk].src == l.src;
      // The sender's order of the chunks in the message (by index), which
      // the receiver's slots follow.
      std::vector<int> sorted = msg;
      auto index = [&](int i) { return at_source ? input_index(i) : relay_slot(i); };
      std::sort(sorted.begin(), sorted.end(), [&](int a, int b) { return index(a) < index(b); });
      ChunkRef from = at_source ? in(index(sorted[0])) : scratch(index(sorted[0]));
      std::vector<int> deps;
      for (int i : msg) deps.push_back(have[xs[i].chunk][l.src]);
      int sent = send(x, 0, with_count(make_op(OpType::Send, l.dst, -1, from, {}), msg.size()), deps);
      uint32_t base = scratch_used[l.dst];
      auto slot_of = [&](size_t pos) {
        auto it = reserved.find({xs[sorted[pos]].chunk, l.dst});
        return it != reserved.end() ? it->second : base + uint32_t(pos);
      };
      if (msg.size() > 1 || !reserved.count({x.chunk, l.dst})) scratch_used[l.dst] += uint32_t(msg.size());
      int got = recv(x, 0, with_count(make_op(OpType::Recv, -1, l.src, {}, scratch(slot_of(0))), msg.size()), {});
      for (size_t pos = 0; pos < sorted.size(); ++pos) {
        const int chunk = xs[sorted[pos]].chunk;
        const Chunk& k = p.chunks[chunk];
        if (at_source) first_send[chunk] = sent;
        held_in[chunk][l.dst] = int(slot_of(pos));
        have[chunk][l.dst] = got;
        last_seq[chunk] = std::max(last_seq[chunk], x.seq);
        if (l.dst == k.dst) landed[chunk] = got, landed_slot[chunk] = slot_of(pos);
      }
    }
    for (int c = 0; c < nchunks; ++c) {
      const Chunk& k = p.chunks[c];
      if (k.src == k.dst) continue;
      int mirror = p.chunk_index(k.dst, k.src, k.j);  // what the destination sends from the same cell
      ranks[k.dst].add(local_lane(), std::max(last_seq[c], last_seq[mirror]),
                       make_op(OpType::Copy, -1, -1, scratch(landed_slot[c]), out(k.src * u + k.j)),
                       {landed[c], first_send[mirror]});
    }
    s->in_place = s->out_of_place = true;
  } else if (c == Collective::AllReduce) {
    for (int r = 0; r < n; ++r) s->ranks[r].input_chunks = s->ranks[r].output_chunks = n * u;
    constexpr int kReduceScatterChannel = 0, kAllGatherChannel = 1;
    for (const std::vector<int>& msg : messages) {
      const Transfer& x = xs[msg[0]];
      const Link& l = t.links[x.link];
      const uint32_t lo = lowest(msg, gather_index);
      const size_t count = msg.size();
      if (x.reduce) {
        int w = l.src, v = l.dst;  // partial sums of w's subtrees go to its parent v
        std::vector<int> deps;
        for (int i : msg) deps.push_back(last_reduce[xs[i].chunk][w]);
        // The input until w holds a partial sum (it has children), then the output.
        ChunkRef from = last_reduce[x.chunk][w] >= 0 ? out(lo) : in(lo);
        int sent = send(x, kReduceScatterChannel, with_count(make_op(OpType::Send, v, -1, from, {}), count), deps);
        // The partials land in scratch and are added in a lane of their own
        // per chunk: the receive lane never waits for another child's
        // partial, so a late one does not hold up everything behind it.
        uint32_t base = scratch_used[v];
        scratch_used[v] += uint32_t(count);
        int got = recv(x, kReduceScatterChannel, with_count(make_op(OpType::Recv, -1, w, {}, scratch(base)), count), {});
        for (int i : msg) {
          const int chunk = xs[i].chunk;
          const uint32_t idx = gather_index(i);
          rs_sent[chunk][w] = sent;
          const LaneKey reduce_lane{kReduce, int(idx), 0};
          if (last_reduce[chunk][v] < 0)
            last_reduce[chunk][v] = ranks[v].add(reduce_lane, -1, make_op(OpType::Copy, -1, -1, in(idx), out(idx)), {});
          last_reduce[chunk][v] = ranks[v].add(reduce_lane, x.seq,
                                               make_op(OpType::Reduce, -1, -1, scratch(base + idx - lo), out(idx)), {got});
        }
      } else {
        std::vector<int> deps, recv_deps;
        for (int i : msg) {
          const int chunk = xs[i].chunk;
          deps.push_back(l.src == p.chunks[chunk].src ? last_reduce[chunk][l.src] : have[chunk][l.src]);
          recv_deps.push_back(rs_sent[chunk][l.dst]);  // overwrite a partial sum only once it left
        }
        send(x, kAllGatherChannel, with_count(make_op(OpType::Send, l.dst, -1, out(lo), {}), count), deps);
        int got = recv(x, kAllGatherChannel, with_count(make_op(OpType::Recv, -1, l.src, {}, out(lo)), count), recv_deps);
        for (int i : msg) have[xs[i].chunk][l.dst] = got;
      }
    }
    s->in_place = s->out_of_place = true;
  } else {
    return *error = fmt::format("synthesis supports allgather, alltoall and allreduce, not {}", to_string(c)), false;
  }
  for (int r = 0; r < n; ++r) {
    ranks[r].emit(&s->ranks[r]);
    s->ranks[r].scratch_chunks = scratch_used[r];
  }
  return true;
}

}  // namespace braid::synth

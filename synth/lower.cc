// Stage 3: lowering ordered transfers to braid's IR.
//
// Every rank gets a lane for local copies, one lane per peer it sends to and
// one per peer it receives from (MSCCL's thread-block shape, so the result
// exports to MSCCL XML).  A lane's ops follow the global transfer order, so
// the k-th send on a link meets the k-th receive.  Dependencies (forward
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

#include "synth/problem.h"

namespace braid::synth {
namespace {

struct Record {
  int key = 0;  // 0 local, 1 + 2p sends to p, 2 + 2p receives from p, kReduceLaneBase + chunk
  int seq = -1;
  Op op;
  std::vector<int> deps;  // record ids on the same rank
};

class RankOps {
 public:
  int add(int key, int seq, Op op, std::vector<int> deps) {
    records_.push_back({key, seq, std::move(op), std::move(deps)});
    return int(records_.size() - 1);
  }
  int add_if(int key, int seq, Op op, int dep) { return add(key, seq, std::move(op), dep >= 0 ? std::vector<int>{dep} : std::vector<int>{}); }

  void emit(RankProgram* p) const {
    std::map<int, std::vector<int>> by_lane;
    for (size_t i = 0; i < records_.size(); ++i) by_lane[records_[i].key].push_back(int(i));
    std::vector<std::pair<uint16_t, uint32_t>> where(records_.size());
    p->lanes.clear();
    for (auto& [key, ids] : by_lane) {
      std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return records_[a].seq < records_[b].seq; });
      for (size_t k = 0; k < ids.size(); ++k) where[ids[k]] = {uint16_t(p->lanes.size()), uint32_t(k)};
      p->lanes.emplace_back();
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
int send_key(int peer) { return 1 + 2 * peer; }
constexpr int kReduceLaneBase = 1 << 24;  // + chunk index: AllReduce's per-chunk reduction lanes
int recv_key(int peer) { return 2 + 2 * peer; }

}  // namespace

bool lower(const Problem& p, Collective c, const std::vector<Transfer>& transfers, Schedule* s, std::string* error) {
  const Topology& t = *p.topo;
  const int n = t.nranks(), u = p.chunkup;
  const int nchunks = int(p.chunks.size());
  std::vector<Transfer> xs = transfers;
  std::sort(xs.begin(), xs.end(), [](const Transfer& a, const Transfer& b) { return a.seq < b.seq; });
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
  auto send = [&](const Link& l, int link, int seq, Op op, int dep) {
    std::vector<int> deps;
    if (dep >= 0) deps.push_back(dep);
    for (int port : t.links[link].ports) {
      auto it = last_port_send[l.src].find(port);
      if (it != last_port_send[l.src].end() && std::find(deps.begin(), deps.end(), it->second) == deps.end())
        deps.push_back(it->second);
    }
    int id = ranks[l.src].add(send_key(l.dst), seq, std::move(op), std::move(deps));
    for (int port : t.links[link].ports) last_port_send[l.src][port] = id;
    return id;
  };

  s->collective = c;
  s->nranks = n;
  s->ranks.assign(n, {});
  if (c == Collective::AllGather) {
    for (int r = 0; r < n; ++r) {
      s->ranks[r].input_chunks = u;
      s->ranks[r].output_chunks = n * u;
      for (int j = 0; j < u; ++j)
        have[p.chunk_index(r, -1, j)][r] = ranks[r].add(0, -1, make_op(OpType::Copy, -1, -1, in(j), out(r * u + j)), {});
    }
    for (const Transfer& x : xs) {
      const Link& l = t.links[x.link];
      const Chunk& k = p.chunks[x.chunk];
      uint32_t idx = k.src * u + k.j;
      send(l, x.link, x.seq, make_op(OpType::Send, l.dst, -1, out(idx), {}), have[x.chunk][l.src]);
      have[x.chunk][l.dst] = ranks[l.dst].add(recv_key(l.src), x.seq, make_op(OpType::Recv, -1, l.src, {}, out(idx)), {});
    }
    s->in_place = s->out_of_place = true;
  } else if (c == Collective::AlltoAll) {
    for (int r = 0; r < n; ++r) {
      s->ranks[r].input_chunks = n * u;
      s->ranks[r].output_chunks = n * u;
      for (int j = 0; j < u; ++j) ranks[r].add(0, -1, make_op(OpType::Copy, -1, -1, in(r * u + j), out(r * u + j)), {});
    }
    // Every chunk lands in scratch, and is copied to its output block once it
    // is there and the destination has sent its own input chunk at the same
    // index (in place that input chunk is the same memory): correct in both
    // placements for one local copy per chunk.
    std::vector<int> first_send(nchunks, -1), landed(nchunks, -1), last_seq(nchunks, -1);
    std::vector<uint32_t> landed_slot(nchunks, 0);
    for (const Transfer& x : xs) {
      const Link& l = t.links[x.link];
      const Chunk& k = p.chunks[x.chunk];
      ChunkRef from = l.src == k.src ? in(k.dst * u + k.j) : scratch(held_in[x.chunk][l.src]);
      int sent = send(l, x.link, x.seq, make_op(OpType::Send, l.dst, -1, from, {}), have[x.chunk][l.src]);
      if (l.src == k.src) first_send[x.chunk] = sent;
      held_in[x.chunk][l.dst] = int(scratch_used[l.dst]);
      ChunkRef to = scratch(scratch_used[l.dst]++);
      have[x.chunk][l.dst] = ranks[l.dst].add(recv_key(l.src), x.seq, make_op(OpType::Recv, -1, l.src, {}, to), {});
      last_seq[x.chunk] = std::max(last_seq[x.chunk], x.seq);
      if (l.dst == k.dst) landed[x.chunk] = have[x.chunk][l.dst], landed_slot[x.chunk] = to.index;
    }
    for (int c = 0; c < nchunks; ++c) {
      const Chunk& k = p.chunks[c];
      if (k.src == k.dst) continue;
      int mirror = p.chunk_index(k.dst, k.src, k.j);  // what the destination sends from the same cell
      std::vector<int> deps{landed[c]};
      if (first_send[mirror] >= 0) deps.push_back(first_send[mirror]);
      ranks[k.dst].add(0, std::max(last_seq[c], last_seq[mirror]),
                       make_op(OpType::Copy, -1, -1, scratch(landed_slot[c]), out(k.src * u + k.j)), deps);
    }
    s->in_place = s->out_of_place = true;
  } else if (c == Collective::AllReduce) {
    for (int r = 0; r < n; ++r) s->ranks[r].input_chunks = s->ranks[r].output_chunks = n * u;
    for (const Transfer& x : xs) {
      const Link& l = t.links[x.link];
      const Chunk& k = p.chunks[x.chunk];
      uint32_t idx = k.src * u + k.j;
      if (x.reduce) {
        int w = l.src, v = l.dst;  // partial sum of w's subtree goes to its parent v
        int lw = last_reduce[x.chunk][w];
        rs_sent[x.chunk][w] = send(l, x.link, x.seq, make_op(OpType::Send, v, -1, lw >= 0 ? out(idx) : in(idx), {}), lw);
        // The partial lands in scratch and is added in a lane of its own per
        // chunk: the receive lane never waits for another child's partial,
        // so a late one does not hold up everything behind it on that link.
        uint32_t slot = scratch_used[v]++;
        int got = ranks[v].add(recv_key(w), x.seq, make_op(OpType::Recv, -1, w, {}, scratch(slot)), {});
        const int reduce_lane = kReduceLaneBase + int(idx);
        if (last_reduce[x.chunk][v] < 0)
          last_reduce[x.chunk][v] = ranks[v].add(reduce_lane, -1, make_op(OpType::Copy, -1, -1, in(idx), out(idx)), {});
        last_reduce[x.chunk][v] = ranks[v].add(reduce_lane, x.seq, make_op(OpType::Reduce, -1, -1, scratch(slot), out(idx)), {got});
      } else {
        int from = l.src == k.src ? last_reduce[x.chunk][l.src] : have[x.chunk][l.src];
        send(l, x.link, x.seq, make_op(OpType::Send, l.dst, -1, out(idx), {}), from);
        have[x.chunk][l.dst] =
            ranks[l.dst].add_if(recv_key(l.src), x.seq, make_op(OpType::Recv, -1, l.src, {}, out(idx)), rs_sent[x.chunk][l.dst]);
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

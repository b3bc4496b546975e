// Hierarchical (rail-aligned) AlltoAll baseline: a block for another node
// first moves inside its node to the GPU with the destination's local index,
// then crosses the network between GPUs of equal local index (one rail), so
// each NIC carries only its own rail's traffic.  Blocks within a node go
// directly.  Cost per rank, S bytes in all: (g-1) intra-node blocks plus
// (N-1)*g relayed ones inside the node, and (N-1)*g network blocks per GPU.
// Out of place only.  Lanes: one per peer and direction; ops generated in one
// global order (direct and first hops, then network hops), and a network hop
// depends only on the first hop that brought the block, so no lane waits on
// anything later in that order.
#include <fmt/format.h>

#include <map>

#include "algorithms/builder.h"
#include "braid/synth.h"
#include "braid/verify.h"

namespace braid {

bool hierarchical_alltoall(const Topology& t, Schedule* result, std::string* error) {
  const int g = t.gpus_per_node, n = t.nranks();
  Schedule s;
  s.name = "hierarchical_alltoall";
  s.collective = Collective::AlltoAll;
  s.nranks = n;
  s.in_place = false;
  s.out_of_place = true;
  s.ranks.resize(n);
  std::vector<std::map<int, uint16_t>> lane_of(n);
  auto lane = [&](int r, int key) -> Lane& {
    auto [it, fresh] = lane_of[r].emplace(key, uint16_t(s.ranks[r].lanes.size()));
    if (fresh) s.ranks[r].lanes.emplace_back();
    return s.ranks[r].lanes[it->second];
  };
  auto add = [&](int r, int key, Op op) {
    Lane& l = lane(r, key);
    l.ops.push_back(std::move(op));
    return Dep{lane_of[r][key], uint32_t(l.ops.size() - 1)};
  };
  auto op = [](OpType type, int to, int from, ChunkRef src, ChunkRef dst, std::vector<Dep> deps = {}) {
    Op o;
    o.type = type, o.send_peer = to, o.recv_peer = from, o.src = src, o.dst = dst, o.deps = std::move(deps);
    return o;
  };
  const int kLocal = -1;
  auto send_key = [](int peer) { return 2 * peer; };
  auto recv_key = [](int peer) { return 2 * peer + 1; };
  for (int r = 0; r < n; ++r) {
    s.ranks[r].input_chunks = s.ranks[r].output_chunks = n;
    add(r, kLocal, op(OpType::Copy, -1, -1, in(r), out(r)));
  }
  // Where each relayed block waits: (relay rank, scratch index, recv dep).
  std::map<std::pair<int, int>, std::pair<uint32_t, Dep>> parked;
  std::vector<uint32_t> scratch_used(n, 0);
  for (int src = 0; src < n; ++src)
    for (int dst = 0; dst < n; ++dst) {
      if (src == dst) continue;
      int relay = (src / g) * g + dst % g;  // same node as src, same rail as dst
      if (src / g == dst / g) {
        add(src, send_key(dst), op(OpType::Send, dst, -1, in(dst), {}));
        add(dst, recv_key(src), op(OpType::Recv, -1, src, {}, out(src)));
      } else if (relay != src) {
        uint32_t slot = scratch_used[relay]++;
        add(src, send_key(relay), op(OpType::Send, relay, -1, in(dst), {}));
        Dep got = add(relay, recv_key(src), op(OpType::Recv, -1, src, {}, scratch(slot)));
        parked[{src, dst}] = {slot, got};
      }
    }
  for (int src = 0; src < n; ++src)
    for (int dst = 0; dst < n; ++dst) {
      if (src / g == dst / g) continue;
      int relay = (src / g) * g + dst % g;
      if (relay == src) {
        add(src, send_key(dst), op(OpType::Send, dst, -1, in(dst), {}));
      } else {
        auto [slot, got] = parked.at({src, dst});
        add(relay, send_key(dst), op(OpType::Send, dst, -1, scratch(slot), {}, {got}));
      }
      add(dst, recv_key(relay), op(OpType::Recv, -1, relay, {}, out(src)));
    }
  for (int r = 0; r < n; ++r) s.ranks[r].scratch_chunks = scratch_used[r];
  VerifyResult v = verify(s);
  if (!v.ok) return *error = "internal: hierarchical AlltoAll does not verify: " + v.errors[0], false;
  *result = std::move(s);
  return true;
}

}  // namespace braid

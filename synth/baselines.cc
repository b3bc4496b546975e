// Baseline schedules on a given topology, for the simulator's comparisons.
//
// topology_ring: NCCL-like ring whose order follows the intra-node links (a
// Hamiltonian path through each node found by backtracking, nodes chained
// over the network; with one node, a Hamiltonian cycle).  Cost as the ring
// in algorithms/ring.cc: (n-1) steps of S/n (AllGather), 2(n-1) (AllReduce).
// AlltoAll has no ring: the pairwise exchange is used.
//
// hierarchical AllGather: a ring inside each node, then a ring across nodes
// between GPUs of equal local index carrying whole node blocks (count = GPUs
// per node): (g-1) intra steps of S/n, then (N-1) network steps of g*S/n.
// Hierarchical AllReduce and AlltoAll: synth/hierarchical_allreduce.cc and
// synth/hierarchical_alltoall.cc.
#include <fmt/format.h>

#include <functional>

#include "algorithms/builder.h"
#include "braid/algorithms.h"
#include "braid/synth.h"
#include "braid/verify.h"

namespace braid {

// synth/hierarchical_allreduce.cc; `local` is the intra-node ring order.
bool hierarchical_allreduce(const Topology& t, const std::vector<int>& local, Schedule* result, std::string* error);
// synth/hierarchical_alltoall.cc.
bool hierarchical_alltoall(const Topology& t, Schedule* result, std::string* error);

namespace {

// A Hamiltonian path (cycle if `cycle`) over the intra-node links of node 0,
// as local indices starting at 0; empty if none.
std::vector<int> node_path(const Topology& t, bool cycle) {
  const int g = t.gpus_per_node;
  std::vector<int> path{0};
  std::vector<bool> used(g, false);
  used[0] = true;
  std::function<bool()> extend = [&]() {
    if (int(path.size()) == g) return !cycle || t.link_index(path.back(), path.front()) >= 0;
    for (int v = 0; v < g; ++v) {
      if (used[v] || t.link_index(path.back(), v) < 0) continue;
      used[v] = true, path.push_back(v);
      if (extend()) return true;
      used[v] = false, path.pop_back();
    }
    return false;
  };
  return extend() ? path : std::vector<int>{};
}

std::vector<int> ring_order(const Topology& t) {
  std::vector<int> local = node_path(t, t.nodes == 1);
  if (local.empty()) local = node_path(t, false);
  if (local.empty())
    for (int i = 0; i < t.gpus_per_node; ++i) local.push_back(i);
  std::vector<int> order;
  for (int k = 0; k < t.nodes; ++k)
    for (int l : local) order.push_back(k * t.gpus_per_node + l);
  return order;
}

Schedule ordered_ring_allgather(const std::vector<int>& order) {
  const int n = int(order.size());
  ScheduleBuilder b("topology_ring_allgather", Collective::AllGather, n, -1, 1, n);
  for (int i = 0; i < n; ++i) {
    int r = order[i], next = order[mod(i + 1, n)], prev = order[mod(i - 1, n)];
    b.copy(r, in(0), out(r));
    if (n == 1) continue;
    b.send(r, next, out(r));
    for (int s = 0; s < n - 2; ++s) b.recv_copy_send(r, prev, out(order[mod(i - 1 - s, n)]), next);
    b.recv(r, prev, out(order[mod(i + 1, n)]));
  }
  return b.take();
}

Schedule ordered_ring_allreduce(const std::vector<int>& order) {
  const int n = int(order.size());
  ScheduleBuilder b("topology_ring_allreduce", Collective::AllReduce, n, -1, n, n);
  for (int i = 0; i < n; ++i) {
    int r = order[i], next = order[mod(i + 1, n)], prev = order[mod(i - 1, n)];
    if (n == 1) {
      b.copy(r, in(0), out(0));
      continue;
    }
    b.send(r, next, in(i));
    for (int s = 0; s < n - 2; ++s) b.recv_reduce_send(r, prev, in(mod(i - s - 1, n)), next);
    b.recv_reduce_copy_send(r, prev, in(mod(i + 1, n)), out(mod(i + 1, n)), next);
    for (int s = 0; s < n - 2; ++s) b.recv_copy_send(r, prev, out(mod(i - s, n)), next);
    b.recv(r, prev, out(mod(i + 2, n)));
  }
  return b.take();
}

}  // namespace

bool topology_ring(const Topology& t, Collective c, Schedule* result, std::string* error) {
  std::vector<int> order = ring_order(t);
  if (c == Collective::AllGather) *result = ordered_ring_allgather(order);
  else if (c == Collective::AllReduce) *result = ordered_ring_allreduce(order);
  else if (c == Collective::AlltoAll) *result = pairwise_alltoall(t.nranks());
  else return *error = fmt::format("no topology ring for {}", to_string(c)), false;
  return true;
}

bool hierarchical(const Topology& t, Collective c, Schedule* result, std::string* error) {
  const int g = t.gpus_per_node, nodes = t.nodes, n = t.nranks();
  std::vector<int> local = node_path(t, true);
  if (local.empty()) local = node_path(t, false);
  if (local.empty())
    for (int i = 0; i < g; ++i) local.push_back(i);
  if (c == Collective::AllReduce) return hierarchical_allreduce(t, local, result, error);
  if (c == Collective::AlltoAll) return hierarchical_alltoall(t, result, error);
  if (c != Collective::AllGather) return *error = fmt::format("no hierarchical baseline for {} yet", to_string(c)), false;
  ScheduleBuilder b("hierarchical_allgather", Collective::AllGather, n, -1, 1, n);
  for (int k = 0; k < nodes; ++k)
    for (int i = 0; i < g; ++i) {
      int r = k * g + local[i];
      int next = k * g + local[mod(i + 1, g)], prev = k * g + local[mod(i - 1, g)];
      b.copy(r, in(0), out(r));
      if (g > 1) {
        b.send(r, next, out(r));
        for (int s = 0; s < g - 2; ++s) b.recv_copy_send(r, prev, out(k * g + local[mod(i - 1 - s, g)]), next);
        b.recv(r, prev, out(k * g + local[mod(i + 1, g)]));
      }
    }
  Schedule s = b.take();
  if (nodes > 1) {
    // Whole node blocks (g contiguous output chunks) around the node ring.
    // Sends and receives sit in separate lanes: a g-chunk op would otherwise
    // fill the connection and wait for a peer that is itself sending.
    for (int k = 0; k < nodes; ++k)
      for (int l = 0; l < g; ++l) {
        int r = k * g + l, next = mod(k + 1, nodes) * g + l, prev = mod(k - 1, nodes) * g + l;
        RankProgram& p = s.ranks[r];
        const uint32_t intra_done = uint32_t(p.lanes[0].ops.size() - 1);
        p.lanes.resize(3);
        for (int step = 0; step < nodes - 1; ++step) {
          Op send;
          send.type = OpType::Send;
          send.send_peer = next;
          send.count = g;
          send.src = out(uint32_t(mod(k - step, nodes) * g));
          send.deps = {step == 0 ? Dep{0, intra_done} : Dep{2, uint32_t(step - 1)}};
          Op recv;
          recv.type = OpType::Recv;
          recv.recv_peer = prev;
          recv.count = g;
          recv.dst = out(uint32_t(mod(k - 1 - step, nodes) * g));
          p.lanes[1].ops.push_back(send);
          p.lanes[2].ops.push_back(recv);
        }
      }
  }
  VerifyResult v = verify(s);
  if (!v.ok) return *error = "internal: hierarchical baseline does not verify: " + v.errors[0], false;
  *result = std::move(s);
  return true;
}

}  // namespace braid

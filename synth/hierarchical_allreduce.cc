// Hierarchical AllReduce baseline: ReduceScatter inside each node (ring over
// the node's GPUs, in shards of N chunks), AllReduce of each shard across
// nodes (ring between GPUs of equal local position), AllGather inside each
// node.  With G GPUs per node and N nodes, S bytes: intra-node 2(G-1) steps
// of S/G, network 2(N-1) steps of S/(G*N), every NIC used in parallel.
//
// Each rank has a send lane and a receive lane per ring (intra, inter) so a
// multi-chunk step never waits on itself; ops are generated step by step in
// one global order and each op depends on the last op of the rank that
// touched its chunk in a conflicting way, which keeps it race-free and, as
// every dependency points back in that order, deadlock-free.
#include <fmt/format.h>

#include <functional>
#include <map>

#include "algorithms/builder.h"
#include "braid/synth.h"
#include "braid/verify.h"

namespace braid {
namespace {

// Appends ops to named lanes of one rank and adds the dependencies that the
// chunk accesses so far require.
class AutoDeps {
 public:
  explicit AutoDeps(RankProgram* p) : p_(p) {}
  void add(int lane_key, Op op) {
    auto [it, fresh] = lane_of_.emplace(lane_key, uint16_t(p_->lanes.size()));
    if (fresh) p_->lanes.emplace_back();
    uint16_t lane = it->second;
    Dep me{lane, uint32_t(p_->lanes[lane].ops.size())};
    auto need = [&](const Dep& d) {
      if (d.lane != lane && std::find(op.deps.begin(), op.deps.end(), d) == op.deps.end()) op.deps.push_back(d);
    };
    auto key = [](ChunkRef c) { return std::make_pair(int(c.buffer), c.index); };
    // Input and output chunk k alias in place: track them as one cell.
    auto cell = [&](ChunkRef c) { return std::make_pair(0, c.index); };
    if (op_reads_src(op.type)) {
      auto w = last_write_.find(cell(op.src));
      if (w != last_write_.end()) need(w->second);
    }
    if (op_writes_dst(op.type)) {
      auto w = last_write_.find(cell(op.dst));
      if (w != last_write_.end()) need(w->second);
      for (const Dep& r : reads_[cell(op.dst)]) need(r);
    }
    (void)key;
    if (op_reads_src(op.type)) reads_[cell(op.src)].push_back(me);
    if (op_writes_dst(op.type)) last_write_[cell(op.dst)] = me, reads_[cell(op.dst)].clear();
    p_->lanes[lane].ops.push_back(std::move(op));
  }

 private:
  RankProgram* p_;
  std::map<int, uint16_t> lane_of_;
  std::map<std::pair<int, uint32_t>, Dep> last_write_;
  std::map<std::pair<int, uint32_t>, std::vector<Dep>> reads_;
};

Op op_of(OpType type, int to, int from, ChunkRef src, ChunkRef dst) {
  Op o;
  o.type = type, o.send_peer = to, o.recv_peer = from, o.src = src, o.dst = dst;
  return o;
}

}  // namespace

bool hierarchical_allreduce(const Topology& t, const std::vector<int>& local, Schedule* result, std::string* error) {
  const int G = t.gpus_per_node, N = t.nodes, n = t.nranks();
  const uint32_t C = uint32_t(G * N);
  Schedule s;
  s.name = "hierarchical_allreduce";
  s.collective = Collective::AllReduce;
  s.nranks = n;
  s.ranks.resize(n);
  std::vector<AutoDeps> prog;
  for (int r = 0; r < n; ++r) {
    s.ranks[r].input_chunks = s.ranks[r].output_chunks = C;
    prog.emplace_back(&s.ranks[r]);
  }
  auto rank_at = [&](int node, int pos) { return mod(node, N) * G + local[mod(pos, G)]; };
  auto chunk = [&](int shard, int j) { return uint32_t(mod(shard, G) * N + mod(j, N)); };
  enum { kIntraSend, kIntraRecv, kInterSend, kInterRecv, kLocal };
  // A ring step: every member sends `what(pos)` to the next member; the next
  // member receives it with `recv(pos of receiver)`.
  struct Member {
    int rank, next, prev;
  };
  // Phase 1: intra-node ReduceScatter; position i ends owning shard i.
  for (int k = 0; k < N; ++k)
    for (int i = 0; i < G; ++i)
      if (G == 1)
        for (int j = 0; j < N; ++j) prog[rank_at(k, i)].add(kLocal, op_of(OpType::Copy, -1, -1, in(chunk(0, j)), out(chunk(0, j))));
  for (int step = 0; step < G - 1; ++step)
    for (int k = 0; k < N; ++k)
      for (int i = 0; i < G; ++i) {
        int r = rank_at(k, i), next = rank_at(k, i + 1), prev = rank_at(k, i - 1);
        for (int j = 0; j < N; ++j) {
          uint32_t sent = chunk(i - 1 - step, j);  // partial of shard i-1-step leaves
          prog[r].add(kIntraSend, op_of(OpType::Send, next, -1, step == 0 ? in(sent) : out(sent), {}));
          uint32_t got = chunk(i - 2 - step, j);   // and the one from prev arrives
          prog[r].add(kIntraRecv, op_of(OpType::RecvReduceCopy, -1, prev, in(got), out(got)));
        }
      }
  // Phase 2: across nodes, ring AllReduce of shard i among position-i GPUs.
  if (N > 1) {
    for (int step = 0; step < N - 1; ++step)  // ReduceScatter part: node k ends owning chunk (i, k)
      for (int k = 0; k < N; ++k)
        for (int i = 0; i < G; ++i) {
          int r = rank_at(k, i), next = rank_at(k + 1, i), prev = rank_at(k - 1, i);
          uint32_t sent = chunk(i, k - 1 - step), got = chunk(i, k - 2 - step);
          ChunkRef own = G == 1 ? out(sent) : out(sent);
          prog[r].add(kInterSend, op_of(OpType::Send, next, -1, own, {}));
          prog[r].add(kInterRecv, op_of(OpType::RecvReduceCopy, -1, prev, out(got), out(got)));
        }
    for (int step = 0; step < N - 1; ++step)  // AllGather part
      for (int k = 0; k < N; ++k)
        for (int i = 0; i < G; ++i) {
          int r = rank_at(k, i), next = rank_at(k + 1, i), prev = rank_at(k - 1, i);
          prog[r].add(kInterSend, op_of(OpType::Send, next, -1, out(chunk(i, k - step)), {}));
          prog[r].add(kInterRecv, op_of(OpType::Recv, -1, prev, {}, out(chunk(i, k - 1 - step))));
        }
  }
  // Phase 3: intra-node AllGather of the shards.
  for (int step = 0; step < G - 1; ++step)
    for (int k = 0; k < N; ++k)
      for (int i = 0; i < G; ++i) {
        int r = rank_at(k, i), next = rank_at(k, i + 1), prev = rank_at(k, i - 1);
        for (int j = 0; j < N; ++j) {
          prog[r].add(kIntraSend, op_of(OpType::Send, next, -1, out(chunk(i - step, j)), {}));
          prog[r].add(kIntraRecv, op_of(OpType::Recv, -1, prev, {}, out(chunk(i - 1 - step, j))));
        }
      }
  VerifyResult v = verify(s);
  if (!v.ok) return *error = "internal: hierarchical AllReduce does not verify: " + v.errors[0], false;
  *result = std::move(s);
  return true;
}

}  // namespace braid

// The verifier catches each kind of broken schedule, and accepts the same
// schedule once the defect is fixed (so every rejection below is caused by
// the defect, not by something else in the test schedule).
#include <catch2/catch.hpp>

#include "algorithms/builder.h"
#include "braid/algorithms.h"
#include "braid/verify.h"
#include "verify_text.h"

using namespace braid;

namespace {

void require_ok(const Schedule& s, const VerifyOptions& o = {}) {
  VerifyResult r = verify(s, o);
  INFO(s.name << ":\n" << joined(r));
  REQUIRE(r.ok);
  REQUIRE(r.errors.empty());
}

// Verification fails and some error contains every one of `needles`.
void require_error(const Schedule& s, std::initializer_list<std::string> needles, const VerifyOptions& o = {}) {
  VerifyResult r = verify(s, o);
  INFO(s.name << ":\n" << joined(r));
  REQUIRE_FALSE(r.ok);
  bool found = false;
  for (const std::string& e : r.errors) {
    bool all = true;
    for (const std::string& n : needles) all = all && e.find(n) != std::string::npos;
    found = found || all;
  }
  CHECK(found);
}


Op& op_at(Schedule& s, int rank, size_t lane, size_t op) { return s.ranks[rank].lanes[lane].ops.at(op); }

// Two-rank AllGather: copy own block, swap blocks.
Schedule swap_allgather() {
  ScheduleBuilder b("swap", Collective::AllGather, 2, -1, 1, 2);
  for (int r = 0; r < 2; ++r) {
    b.copy(r, in(0), out(r));
    b.send(r, 1 - r, in(0));
    b.recv(r, 1 - r, out(1 - r));
  }
  return b.take();
}

// Two-rank AllReduce: send own input, receive the peer's and add own.
Schedule exchange_allreduce() {
  ScheduleBuilder b("exchange", Collective::AllReduce, 2, -1, 1, 1);
  for (int r = 0; r < 2; ++r) {
    b.send(r, 1 - r, in(0));
    b.recv_reduce_copy(r, 1 - r, in(0), out(0));
  }
  return b.take();
}

}  // namespace

TEST_CASE("verify: the hand-written baselines are correct", "[verify]") {
  require_ok(swap_allgather());
  require_ok(exchange_allreduce());
}

TEST_CASE("verify: a missing send is caught", "[verify]") {
  Schedule s = ring_allreduce(4);
  require_ok(s);
  auto& ops = s.ranks[1].lanes[0].ops;
  ops.erase(ops.begin());  // rank 1 never starts its reduce-scatter chunk
  require_error(s, {"rank 1 sends 5 chunk(s) to rank 2", "rank 2 receives 6"});
}

TEST_CASE("verify: a receive from the wrong peer or channel is caught", "[verify]") {
  Schedule s = pairwise_alltoall(3);
  require_ok(s);
  Schedule wrong_peer = s;
  for (Op& op : wrong_peer.ranks[0].lanes[0].ops)
    if (op.type == OpType::Recv && op.recv_peer == 1) op.recv_peer = 2;
  require_error(wrong_peer, {"rank 1 sends 1 chunk(s) to rank 0", "receives 0"});

  Schedule wrong_channel = s;
  wrong_channel.ranks[2].lanes[0].channel = 1;
  require_error(wrong_channel, {"on channel 0", "rank 2 receives 0"});

  Schedule wrong_count = swap_allgather();
  op_at(wrong_count, 1, 0, 2).count = 2;
  op_at(wrong_count, 1, 0, 2).dst = out(0);
  require_error(wrong_count, {"rank 0 sends 1 chunk(s) to rank 1", "rank 1 receives 2"});
}

TEST_CASE("verify: a double-counted reduction is caught", "[verify]") {
  ScheduleBuilder b("double", Collective::Reduce, 2, 0, 1, 1);
  b.send(1, 0, in(0));
  b.recv_reduce_copy(0, 1, in(0), out(0));
  Schedule good = b.take();
  require_ok(good);
  Schedule s = good;
  s.ranks[0].lanes[0].ops.push_back(make_op(OpType::Reduce, -1, -1, in(0), out(0)));  // adds rank 0 again
  require_error(s, {"rank 0 lane 0 op 1", "counts rank 0 input[0] twice"});

  // Two partial sums that overlap in one rank: 0+1 and 1+2 must not be added.
  ScheduleBuilder o("overlap", Collective::Reduce, 3, 0, 1, 1);
  o.set_scratch(0, 1);
  o.send(1, 0, in(0));
  o.send(1, 2, in(0));
  o.recv_reduce_send(2, 1, in(0), 0);
  o.recv_reduce_copy(0, 1, in(0), scratch(0));
  o.recv_reduce_copy(0, 2, scratch(0), out(0));
  require_error(o.take(), {"rank 0 lane 0 op 1", "counts rank 1 input[0] twice"});
}

TEST_CASE("verify: overwriting input still needed is caught in place only", "[verify]") {
  // Rank 1 reduces into out(0) and then sends in(0): in place that is the
  // sum, which rank 0 then adds its own input to a second time.
  ScheduleBuilder b("alias", Collective::AllReduce, 2, -1, 1, 1);
  b.send(0, 1, in(0));
  b.recv_reduce_copy(0, 1, in(0), out(0));
  b.recv_reduce_copy(1, 0, in(0), out(0));
  b.send(1, 0, in(0));
  Schedule s = b.take();
  require_error(s, {"in place: rank 0 lane 0 op 1", "twice"});
  s.in_place = false;
  require_ok(s);
}

TEST_CASE("verify: wrong final content is caught", "[verify]") {
  Schedule gather = direct_gather(4, 1);
  require_ok(gather);
  std::swap(op_at(gather, 1, 0, 1).dst, op_at(gather, 1, 0, 2).dst);  // blocks from 0 and 2 swapped
  require_error(gather, {"rank 1 output[0] ends wrong", "missing rank 0 input[0]", "unexpected rank 2 input[0]"});

  Schedule partial = exchange_allreduce();
  op_at(partial, 0, 0, 1) = make_op(OpType::Recv, -1, 1, {}, out(0));  // forgets to add its own input
  require_error(partial, {"rank 0 output[0] ends wrong", "missing rank 0 input[0]"});

  Schedule unwritten = ring_allgather(3);
  require_ok(unwritten);
  op_at(unwritten, 2, 0, 3).dst = out(1);  // the last block lands on top of another
  require_error(unwritten, {"rank 2 output[0] is never written"});
  require_error(unwritten, {"rank 2 output[1] ends wrong", "missing rank 1 input[0]", "unexpected rank 0 input[0]"});

  Schedule broadcast = binomial_broadcast(4, 2);
  require_ok(broadcast);
  op_at(broadcast, 2, 0, 1).src = in(0);
  op_at(broadcast, 2, 0, 2).src = in(0);
  require_ok(broadcast);  // sending straight from the input is fine
  op_at(broadcast, 2, 0, 0) = make_op(OpType::Nop);  // but the root's own output is then never written
  require_error(broadcast, {"rank 2 output[0] is never written"});
}

TEST_CASE("verify: reading a chunk before it is written is caught", "[verify]") {
  Schedule s = swap_allgather();
  op_at(s, 0, 0, 1).src = out(1);  // sends the block it has not received yet
  require_error(s, {"rank 0 lane 0 op 1", "reads output[1] before anything was written"});
}

TEST_CASE("verify: mixing chunk positions is caught", "[verify]") {
  Schedule s = ring_allreduce(3);
  require_ok(s);
  op_at(s, 0, 0, 1).src = in(0);  // reduces chunk 0 into the chunk-2 stream
  require_error(s, {"rank 0 lane 0 op 1", "different positions"});

  Schedule moved = ring_allreduce(2);
  op_at(moved, 1, 0, 2).dst = out(0);  // lands chunk 1's data in chunk 0
  require_error(moved, {"rank 1 lane 0 op 2", "a chunk of another position"});
}

TEST_CASE("verify: deadlocks are caught and depend on the slots", "[verify]") {
  // Each rank sends two chunks before receiving: needs two slots.
  ScheduleBuilder b("two_chunks", Collective::AllGather, 2, -1, 2, 4);
  for (int r = 0; r < 2; ++r) {
    b.copy(r, in(0), out(2 * r));
    b.copy(r, in(1), out(2 * r + 1));
    b.send(r, 1 - r, in(0));
    b.send(r, 1 - r, in(1));
    b.recv(r, 1 - r, out(2 * (1 - r)));
    b.recv(r, 1 - r, out(2 * (1 - r) + 1));
  }
  Schedule s = b.take();
  require_ok(s, {.slots = 2});
  require_error(s, {"deadlock with 1 slot(s)", "rank 0 lane 0 op 3", "waits for room to rank 1"}, {.slots = 1});

  // Both receive first: stuck whatever the buffering.
  Schedule cycle = swap_allgather();
  for (int r = 0; r < 2; ++r) std::swap(op_at(cycle, r, 0, 1), op_at(cycle, r, 0, 2));
  require_error(cycle, {"deadlock", "rank 1 lane 0 op 1", "waits for data from rank 0"}, {.slots = 64});

  // A fused recv-reduce-send holds its input while it waits for room: one slot deadlocks a ring.
  for (int n : {2, 3, 5}) {
    require_error(ring_allreduce(n), {"deadlock with 1 slot(s)"}, {.slots = 1});
    require_ok(ring_allreduce(n), {.slots = kMinSlots});
  }
}

TEST_CASE("verify: dependency cycles and waits on other lanes", "[verify]") {
  // Rank 0 splits send and receive into two lanes.
  Schedule s = swap_allgather();
  Lane recv_lane;
  recv_lane.ops.push_back(op_at(s, 0, 0, 2));
  s.ranks[0].lanes[0].ops.pop_back();
  s.ranks[0].lanes.push_back(recv_lane);
  require_ok(s);

  Schedule cycle = s;
  op_at(cycle, 0, 0, 0).deps = {{1, 0}};
  op_at(cycle, 0, 1, 0).deps = {{0, 1}};
  require_error(cycle, {"rank 0: dependency cycle", "lane 0 op 0", "lane 1 op 0"});

  Schedule self = s;
  op_at(self, 0, 0, 0).deps = {{0, 1}};  // waits for a later op of its own lane
  require_error(self, {"dependency cycle"});

  // A dep across ranks' messages: lane 1 waits for lane 0's send, which is fine.
  Schedule waits = s;
  op_at(waits, 0, 1, 0).deps = {{0, 1}};
  require_ok(waits);
}

TEST_CASE("verify: unordered conflicting accesses on one rank are caught", "[verify]") {
  // Rank 0: lane 0 copies its block into the output, lane 1 sends it from there.
  ScheduleBuilder b("lanes", Collective::AllGather, 2, -1, 1, 2);
  b.copy(0, in(0), out(0));
  b.recv(0, 1, out(1));
  b.copy(1, in(0), out(1));
  b.send(1, 0, in(0));
  b.recv(1, 0, out(0));
  Schedule s = b.take();
  s.ranks[0].lanes.push_back(Lane{0, {make_op(OpType::Send, 1, -1, out(0), {})}});
  require_error(s, {"rank 0 lane 0 op 0", "writes output[0]", "rank 0 lane 1 op 0", "reads output[0]",
                    "not ordered"});
  op_at(s, 0, 1, 0).deps = {{0, 0}};
  require_ok(s);

  // Two lanes writing the same chunk.
  Schedule ww = s;
  ww.ranks[0].lanes.push_back(Lane{0, {make_op(OpType::Copy, -1, -1, in(0), out(0))}});
  require_error(ww, {"rank 0 lane 0 op 0", "rank 0 lane 2 op 0", "not ordered"});

  // In place only: lane 0 sends in(0) while lane 1 reduces into out(0), the same bytes.
  ScheduleBuilder a("alias_race", Collective::AllReduce, 2, -1, 1, 1);
  for (int r = 0; r < 2; ++r) a.send(r, 1 - r, in(0));
  Schedule race = a.take();
  for (int r = 0; r < 2; ++r)
    race.ranks[r].lanes.push_back(Lane{0, {make_op(OpType::RecvReduceCopy, -1, 1 - r, in(0), out(0))}});
  require_error(race, {"in place: rank 0 lane 0 op 0", "reads input[0]", "lane 1 op 0", "writes output[0]"});
  race.in_place = false;
  require_ok(race);
}

TEST_CASE("verify: structural errors name the op", "[verify]") {
  Schedule s = ring_allreduce(4);
  Schedule bad_chunk = s;
  op_at(bad_chunk, 2, 0, 1).src.index = 4;
  require_error(bad_chunk, {"rank 2 lane 0 op 1", "src chunks [4, 5) are outside the input buffer's 4 chunks"});

  Schedule bad_count = s;
  op_at(bad_count, 2, 0, 0).count = 2;
  op_at(bad_count, 2, 0, 0).src.index = 3;
  require_error(bad_count, {"rank 2 lane 0 op 0", "[3, 5)"});

  Schedule zero_count = s;
  op_at(zero_count, 2, 0, 0).count = 0;
  require_error(zero_count, {"rank 2 lane 0 op 0", "count is 0"});

  Schedule bad_scratch = s;
  op_at(bad_scratch, 0, 0, 0).src = scratch(0);
  require_error(bad_scratch, {"rank 0 lane 0 op 0", "scratch buffer's 0 chunks"});

  Schedule bad_peer = s;
  op_at(bad_peer, 1, 0, 0).send_peer = 4;
  require_error(bad_peer, {"rank 1 lane 0 op 0", "send_peer 4 is not a rank"});

  Schedule self_send = s;
  op_at(self_send, 1, 0, 0).send_peer = 1;
  require_error(self_send, {"rank 1 lane 0 op 0", "send_peer itself"});

  Schedule stray_peer = s;
  op_at(stray_peer, 1, 0, 0).recv_peer = 0;  // a plain send with a recv peer
  require_error(stray_peer, {"rank 1 lane 0 op 0", "has recv_peer 0 but does not receive"});

  Schedule writes_input = s;
  op_at(writes_input, 3, 0, 4).dst = in(3);
  require_error(writes_input, {"rank 3 lane 0 op 4", "writes the input buffer"});

  Schedule bad_dep = s;
  op_at(bad_dep, 0, 0, 2).deps = {{1, 0}};
  require_error(bad_dep, {"rank 0 lane 0 op 2", "depends on lane 1 op 0, which does not exist"});

  Schedule two_senders = swap_allgather();
  two_senders.ranks[0].lanes.push_back(Lane{0, {make_op(OpType::Send, 1, -1, in(0), {})}});
  require_error(two_senders, {"lanes 0 and 1 both send rank 1 on channel 0"});

  Schedule no_placement = s;
  no_placement.in_place = no_placement.out_of_place = false;
  require_error(no_placement, {"neither in-place nor out-of-place"});

  Schedule wrong_ranks = s;
  wrong_ranks.nranks = 5;
  require_error(wrong_ranks, {"4 rank programs for nranks 5"});
}

TEST_CASE("verify: rooted collectives check the root and missing buffers", "[verify]") {
  for (int root : {-1, 3}) {
    Schedule s = binomial_broadcast(3, 0);
    s.root = root;
    require_error(s, {"broadcast needs a root in [0, 3)"});
  }
  Schedule bcast = binomial_broadcast(4, 0);
  bcast.ranks[3].lanes[0].ops.push_back(make_op(OpType::Copy, -1, -1, in(0), out(0)));
  require_error(bcast, {"rank 3 lane 0 op 1", "rank 3 has no input buffer in a broadcast rooted at 0"});

  Schedule reduce = binomial_reduce(4, 1);
  reduce.ranks[0].lanes[0].ops.push_back(make_op(OpType::Copy, -1, -1, in(0), out(0)));
  require_error(reduce, {"rank 0 has no output buffer in a reduce rooted at 1"});

  // The same schedule built for another root delivers to the wrong rank.
  Schedule moved = binomial_broadcast(4, 0);
  moved.root = 1;
  require_error(moved, {"rank 0 lane 0 op 0", "no input buffer in a broadcast rooted at 1"});
}

TEST_CASE("verify: chunk layouts must match the collective's blocks", "[verify]") {
  Schedule s = swap_allgather();
  s.ranks[1].output_chunks = 3;
  require_error(s, {"rank 1: 3 chunks of the output buffer do not split into its 2 blocks"});
  Schedule t = swap_allgather();
  t.ranks[1].output_chunks = 4;
  t.ranks[1].input_chunks = 2;
  require_error(t, {"rank 1: the input buffer has 2 chunks per block, expected 1"});
}

TEST_CASE("verify: max_errors bounds the report", "[verify]") {
  Schedule s = ring_allreduce(8);
  for (RankProgram& p : s.ranks)
    for (Op& op : p.lanes[0].ops) op.count = 0;
  VerifyResult r = verify(s, {.slots = 2, .max_errors = 3});
  CHECK_FALSE(r.ok);
  CHECK(r.errors.size() == 3);
}

TEST_CASE("verify: custom collectives get structure and deadlock checks", "[verify]") {
  Schedule s = swap_allgather();
  s.collective = Collective::Custom;
  require_ok(s);
  std::swap(op_at(s, 0, 0, 1), op_at(s, 0, 0, 2));
  std::swap(op_at(s, 1, 0, 1), op_at(s, 1, 0, 2));
  require_error(s, {"deadlock"});
}

TEST_CASE("verify: rank_order requires the left fold in rank order", "[verify][deterministic]") {
  const VerifyOptions ordered{.rank_order = true};
  // Rank 0 computes x1 (+) x0: every input once, but rank 1's is the left
  // operand; rank 1 computes x0 (+) x1.
  Schedule exchange = exchange_allreduce();
  require_ok(exchange);
  require_error(exchange, {"rank 0 output[0]", "not folded in rank order"}, ordered);
  CHECK(verify(exchange, ordered).errors.size() == 2);  // rank 0's, in place and out of place
  // Fixed: rank 0 starts from its own input and adds rank 1's from scratch.
  ScheduleBuilder b("ordered_exchange", Collective::AllReduce, 2, -1, 1, 1);
  b.set_scratch(0, 1);
  b.copy(0, in(0), out(0));
  b.send(0, 1, in(0));
  b.recv(0, 1, scratch(0));
  b.reduce(0, scratch(0), out(0));
  b.send(1, 0, in(0));
  b.recv_reduce_copy(1, 0, in(0), out(0));
  require_ok(b.take(), ordered);
  // The rings, recursive doubling and trees fold in other orders; chain and
  // one-shot (every rank reads every input from rank 0 on) in rank order.
  for (int n : {3, 4, 7}) {
    INFO("n=" << n);
    require_error(ring_allreduce(n), {"not folded in rank order"}, ordered);
    require_error(ring_reducescatter(n), {"not folded in rank order"}, ordered);
    require_error(recursive_doubling_allreduce(n), {"not folded in rank order"}, ordered);
    require_error(binomial_reduce(n, 0), {"not folded in rank order"}, ordered);
    require_error(stragglar_allreduce(n, n - 1), {"not folded in rank order"}, ordered);
    require_ok(chain_allreduce(n), ordered);
    require_ok(oneshot_allreduce(n), ordered);
    CHECK_FALSE(folds_in_rank_order(ring_allreduce(n)));
    CHECK(folds_in_rank_order(chain_reducescatter(n)));
    CHECK(folds_in_rank_order(ring_allgather(n)));  // nothing to fold
  }
}

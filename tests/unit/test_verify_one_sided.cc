// One-sided ops (Put, Get, GetReduce, GetReduceCopy, Signal, Wait) in the verifier: the
// one-shot and two-shot schedules verify, and each way of breaking the
// rules of schedule.h is caught, with the op named; the fixed schedule
// verifies (so the defect, not something else, is what fails).
#include <catch2/catch.hpp>

#include "algorithms/builder.h"
#include "braid/algorithms.h"
#include "braid/msccl_xml.h"
#include "braid/schedule_json.h"
#include "braid/verify.h"
#include "verify_text.h"

using namespace braid;

namespace {

bool has_error(const VerifyResult& r, std::initializer_list<std::string> needles) {
  for (const std::string& e : r.errors) {
    bool all = true;
    for (const std::string& n : needles) all = all && e.find(n) != std::string::npos;
    if (all) return true;
  }
  return false;
}

void require_error(const Schedule& s, std::initializer_list<std::string> needles) {
  VerifyResult r = verify(s);
  INFO(s.name << ":\n" << joined(r));
  REQUIRE_FALSE(r.ok);
  CHECK(has_error(r, needles));
}

// Two ranks swap their inputs with puts: out[q] of the peer is written
// remotely, between a ready and a done round.  `ready` and `done` drop a
// round when false.
Schedule put_allgather(bool ready = true, bool done = true) {
  ScheduleBuilder b("put_allgather", Collective::AllGather, 2, -1, 1, 2);
  for (int r = 0; r < 2; ++r) {
    if (ready) b.signal(r, 1 - r), b.wait(r, 1 - r);
    b.copy(r, in(0), out(r));
    b.put(r, 1 - r, in(0), out(r));
    if (done) b.signal(r, 1 - r), b.wait(r, 1 - r);
  }
  return b.take();
}

}  // namespace

TEST_CASE("one-sided: the one-shot and two-shot schedules verify and use no slots", "[verify][one_sided]") {
  for (int n : {1, 2, 3, 4, 7, 8}) {
    for (const Schedule& s : {oneshot_allreduce(n), twoshot_allreduce(n), oneshot_allgather(n),
                              oneshot_reducescatter(n), oneshot_broadcast(n, n / 2), oneshot_alltoall(n),
                              twoshot_ordered_allreduce(n), oneshot_ordered_reducescatter(n)}) {
      INFO(s.name << " n=" << n);
      VerifyResult r = verify(s);
      INFO(joined(r));
      CHECK(r.ok);
      CHECK(has_one_sided_ops(s) == (n > 1));
      // Only signals travel as messages: no op sends or receives chunks.
      for (const RankProgram& p : s.ranks)
        for (const Lane& lane : p.lanes)
          for (const Op& op : lane.ops)
            if (op_sends(op.type) || op_receives(op.type)) CHECK(message_chunks(op) == 0);
    }
  }
  CHECK(verify(put_allgather()).ok);
}

TEST_CASE("one-sided: the ordered two-shot and one-shot fold in rank order, the plain ones do not",
          "[verify][one_sided][deterministic]") {
  for (int n = 1; n <= 9; ++n) {
    INFO("n=" << n);
    CHECK(folds_in_rank_order(twoshot_ordered_allreduce(n)));
    CHECK(folds_in_rank_order(oneshot_ordered_reducescatter(n)));
    CHECK(folds_in_rank_order(twoshot_allreduce(n)) == (n == 1));
    CHECK(folds_in_rank_order(oneshot_reducescatter(n)) == (n == 1));
    // Only ranks 2.. save their own block first (1 scratch chunk): rank 0's fold starts with it, and
    // rank 1's first fold (x0 (+) x1) reads both where they are.
    const Schedule s = twoshot_ordered_allreduce(n);
    for (int r = 0; r < n; ++r) CHECK(s.ranks[size_t(r)].scratch_chunks == (r <= 1 ? 0u : 1u));
  }
}

namespace {

// Two ranks reduce-scatter with one GetReduceCopy each: rank r's output is
// peer's block r (+) its own.  The peer's chunk is the left operand.
Schedule get_reduce_copy_reducescatter() {
  ScheduleBuilder b("grc_reducescatter", Collective::ReduceScatter, 2, -1, 2, 1);
  for (int r = 0; r < 2; ++r) {
    b.signal(r, 1 - r), b.wait(r, 1 - r);
    b.get_reduce_copy(r, 1 - r, in(uint32_t(r)), out(0));
    b.signal(r, 1 - r), b.wait(r, 1 - r);
  }
  return b.take();
}

}  // namespace

TEST_CASE("one-sided: GetReduceCopy folds the peer's chunk with the rank's own, the peer's on the left",
          "[verify][one_sided][deterministic]") {
  const Schedule s = get_reduce_copy_reducescatter();
  const VerifyResult r = verify(s);
  INFO(joined(r));
  CHECK(r.ok);
  // Rank 1 computes x0 (+) x1, rank 0 x1 (+) x0: the same sum, not the rank-order fold.
  const VerifyResult ordered = verify(s, {.rank_order = true});
  CHECK(has_error(ordered, {"rank 0 output[0] holds every rank's input, but not folded in rank order"}));
  CHECK_FALSE(has_error(ordered, {"rank 1 output[0]"}));
  CHECK(to_string(OpType::GetReduceCopy) == std::string("get_reduce_copy"));
  CHECK(op_type_from_string("get_reduce_copy") == OpType::GetReduceCopy);
}

TEST_CASE("one-sided: GetReduceCopy's own chunk is checked like any local read", "[verify][one_sided]") {
  {
    // The ref is checked on both ranks: rank 1 has one input chunk, so its own in[1] does not exist.
    Schedule s = get_reduce_copy_reducescatter();
    s.collective = Collective::Custom;
    s.ranks[1].input_chunks = 1;
    s.ranks[1].lanes[0].ops[2].src = {BufferKind::Input, 1};
    require_error(s, {"rank 1 lane 0 op 2 (get_reduce_copy from 0", "outside the input buffer's 1 chunks"});
  }
  {
    // In place rank r's output is its input block r: a put into it from the peer races with the own read.
    Schedule s = get_reduce_copy_reducescatter();
    s.out_of_place = false;
    s.ranks[0].lanes[0].ops.insert(s.ranks[0].lanes[0].ops.begin() + 2, make_op(OpType::Put, 1, -1, in(0), out(0)));
    require_error(s, {"in place:", "get_reduce_copy from 0", "are not ordered by deps or signals"});
  }
}

TEST_CASE("one-sided: touching a peer before its signal is caught", "[verify][one_sided]") {
  require_error(put_allgather(false, true), {"rank 0 lane 0 op 1 (put to 1", "before waiting for a signal from it"});
}

TEST_CASE("one-sided: a peer that may leave before the access ends is caught", "[verify][one_sided]") {
  require_error(put_allgather(true, false), {"rank 0 lane 0 op 3 (put to 1", "rank 1 may leave the call"});
  // The signal that comes after the access must be waited for by the peer:
  // a signal sent before the put does not hold the peer.
  ScheduleBuilder b("early_done", Collective::AllGather, 2, -1, 1, 2);
  for (int r = 0; r < 2; ++r) {
    b.signal(r, 1 - r), b.wait(r, 1 - r);
    b.signal(r, 1 - r), b.wait(r, 1 - r);
    b.copy(r, in(0), out(r));
    b.put(r, 1 - r, in(0), out(r));
  }
  require_error(b.take(), {"may leave the call"});
}

TEST_CASE("one-sided: unordered remote and local accesses race", "[verify][one_sided]") {
  // AlltoAll by direct puts into the peer's output: out of place it is
  // right; in place, the put into block r of q's buffer races with q
  // reading that block (its input) to put it to r.
  auto direct_put = [](bool in_place) {
    ScheduleBuilder b("direct_put_alltoall", Collective::AlltoAll, 2, -1, 2, 2);
    for (int r = 0; r < 2; ++r) {
      b.signal(r, 1 - r), b.wait(r, 1 - r);
      b.put(r, 1 - r, in(1 - r), out(r));
      b.copy(r, in(r), out(r));
      b.signal(r, 1 - r), b.wait(r, 1 - r);
    }
    Schedule s = b.take();
    s.in_place = in_place;
    s.out_of_place = !in_place;
    return s;
  };
  CHECK(verify(direct_put(false)).ok);
  require_error(direct_put(true), {"in place:", "put to", "writes rank", "are not ordered by deps or signals"});

  // Without the data round, a put into a peer's scratch races with the
  // peer folding it.
  ScheduleBuilder b("no_data_round", Collective::AllReduce, 2, -1, 1, 1);
  for (int r = 0; r < 2; ++r) {
    b.set_scratch(r, 2);
    b.signal(r, 1 - r), b.wait(r, 1 - r);
    b.copy(r, in(0), scratch(r));
    b.put(r, 1 - r, in(0), scratch(r));
    b.copy(r, scratch(0), out(0));
    b.reduce(r, scratch(1), out(0));
    b.signal(r, 1 - r), b.wait(r, 1 - r);
  }
  require_error(b.take(), {"are not ordered by deps or signals"});
}

TEST_CASE("one-sided: wrong results through gets are caught", "[verify][one_sided]") {
  Schedule s = twoshot_allreduce(3);
  // Rank 1 forgets rank 0's contribution to its block (a nop keeps the deps).
  int dropped = 0;
  for (Lane& lane : s.ranks[1].lanes)
    for (Op& op : lane.ops)
      if (op.type == OpType::GetReduce && op.recv_peer == 0) {
        op = Op{OpType::Nop, -1, -1, {}, {}, 1, op.deps};
        ++dropped;
      }
  REQUIRE(dropped == 1);
  require_error(s, {"output[1] ends wrong: missing rank 0 input[1]"});
  // A get reading a peer's scratch nobody wrote.
  ScheduleBuilder b("unwritten", Collective::AllGather, 2, -1, 1, 2);
  for (int r = 0; r < 2; ++r) {
    b.set_scratch(r, 1);
    b.signal(r, 1 - r), b.wait(r, 1 - r);
    b.copy(r, in(0), out(r));
    b.get(r, 1 - r, scratch(0), out(1 - r));
    b.signal(r, 1 - r), b.wait(r, 1 - r);
  }
  require_error(b.take(), {"reads rank 1's scratch[0] before anything was written to it"});
}

TEST_CASE("one-sided: structural errors name the op", "[verify][one_sided]") {
  {
    Schedule s = put_allgather();
    s.ranks[0].lanes[0].ops[3].dst = {BufferKind::Output, 2};  // rank 1 has 2 output chunks
    require_error(s, {"rank 0 lane 0 op 3", "outside rank 1's output buffer's 2 chunks"});
  }
  {
    Schedule s = put_allgather();
    s.ranks[0].lanes[0].ops[3].dst = {BufferKind::Input, 0};
    require_error(s, {"writes rank 1's input buffer"});
  }
  {
    Schedule s = put_allgather();
    s.ranks[0].lanes[0].ops[3].send_peer = 0;
    require_error(s, {"send_peer itself"});
  }
  {
    Schedule s = put_allgather();
    s.ranks[0].lanes[0].ops[0].count = 2;
    require_error(s, {"a signal carries no chunks"});
  }
  {
    // A signal matched by a receive of chunks.
    Schedule s = put_allgather();
    Op& wait = s.ranks[1].lanes[0].ops[1];
    wait = make_op(OpType::Recv, -1, 0, {}, {BufferKind::Output, 0});
    require_error(s, {"rank 0 sends 0 chunk(s) to rank 1 on channel 0, but rank 1 receives 1"});
  }
  {
    // One signal more than the peer waits for.
    Schedule s = put_allgather();
    s.ranks[0].lanes[0].ops.push_back(make_op(OpType::Signal, 1));
    require_error(s, {"rank 0 sends 3 message(s) to rank 1 on channel 0, but rank 1 receives 2"});
  }
  {
    // Gets may come from any lane (they claim no connection); signals
    // follow the one-lane-per-connection rule.
    Schedule s = put_allgather();
    s.ranks[0].lanes.push_back(Lane{0, {make_op(OpType::Signal, 1)}});
    require_error(s, {"lanes 0 and 1 both send rank 1 on channel 0"});
  }
}

TEST_CASE("one-sided: schedules round-trip through JSON and MSCCL XML refuses them", "[verify][one_sided]") {
  for (const Schedule& s : {oneshot_allreduce(4), twoshot_allreduce(4), oneshot_broadcast(3, 1),
                            twoshot_ordered_allreduce(4)}) {
    std::string text = schedule_to_json(s), error;
    Schedule back;
    INFO(text);
    REQUIRE(schedule_from_json(text, &back, &error));
    CHECK(back == s);
    std::string xml;
    CHECK_FALSE(schedule_to_msccl_xml(s, &xml, &error));
    CHECK(error.find("one-sided ops") != std::string::npos);
  }
  // A put without its peer is refused by the reader.
  Schedule broken = put_allgather();
  broken.ranks[0].lanes[0].ops[3].send_peer = -1;
  Schedule back;
  std::string error;
  CHECK_FALSE(schedule_from_json(schedule_to_json(broken), &back, &error));
  CHECK(error.find("'put' needs a send_peer") != std::string::npos);
}

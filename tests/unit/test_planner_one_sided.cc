// The planner offers one-sided schedules only where the backend runs them
// (PlanCache::set_peer_access): BRAID_ALGO naming one falls back to the
// default without peer access, a call's selection of only those fails, and
// a selection admitting others too takes one of the others; and the plan
// records say what the executors must know of them.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "braid/algorithms.h"
#include "src/ops/plan_records.h"
#include "src/plan/alg_selection.h"
#include "src/plan/planner.h"

using namespace braid;

TEST_CASE("planner: one-sided algorithms only with peer access", "[planner][one_sided]") {
  setenv("BRAID_ALGO", "allreduce=oneshot,allgather=oneshot", 1);  // read when a cache is made
  PlanCache without, with;
  unsetenv("BRAID_ALGO");
  with.set_peer_access(true);
  std::shared_ptr<const Schedule> s;
  REQUIRE(with.schedule_for(Collective::AllReduce, 4, -1, 8, &s).is_ok());
  CHECK(s->name == "oneshot_allreduce");
  REQUIRE(without.schedule_for(Collective::AllReduce, 4, -1, 8, &s).is_ok());
  CHECK_FALSE(has_one_sided_ops(*s));
  REQUIRE(without.schedule_for(Collective::AllGather, 4, -1, 8, &s).is_ok());
  CHECK_FALSE(has_one_sided_ops(*s));

  uint32_t only_twoshot = 0, twoshot_or_ring = 0;
  REQUIRE(parse_alg_selection("twoshot", Collective::AllReduce, &only_twoshot).is_ok());
  REQUIRE(parse_alg_selection("twoshot,ring", Collective::AllReduce, &twoshot_or_ring).is_ok());
  PlanCache plain;
  Status refused = plain.schedule_for(Collective::AllReduce, 4, -1, 8, &s, -1, Placement::Unknown, only_twoshot);
  CHECK(refused.code() == ncclInvalidUsage);
  CHECK(refused.message().find("admits only twoshot") != std::string::npos);
  REQUIRE(plain.schedule_for(Collective::AllReduce, 4, -1, 8, &s, -1, Placement::Unknown, twoshot_or_ring).is_ok());
  CHECK(s->name == "ring_allreduce");
  plain.set_peer_access(true);
  REQUIRE(plain.schedule_for(Collective::AllReduce, 4, -1, 8, &s, -1, Placement::Unknown, only_twoshot).is_ok());
  CHECK(s->name == "twoshot_allreduce");
}

TEST_CASE("plan records: what executors need to know of one-sided schedules", "[planner][one_sided]") {
  // Two-shot: puts and gets on every rank, messages that are signals only
  // (one tile), and each one-sided op or signal names its peer.
  const Schedule twoshot = twoshot_allreduce(3);
  for (int r = 0; r < 3; ++r) {
    const RankRecords rec = build_rank_records(twoshot, r);
    CHECK(rec.one_sided);
    CHECK(rec.signals);
    CHECK_FALSE(rec.chunk_messages);
    CHECK(rec.max_frame == 1);
    for (const OpRecord& op : rec.ops) {
      const OpType t = OpType(op.type);
      const bool named = op_one_sided(t) || t == OpType::Signal || t == OpType::Wait;
      CHECK((op.peer >= 0 && op.peer < 3 && op.peer != r) == named);
    }
  }
  // Broadcast: the non-roots only signal and wait, yet every rank knows the
  // schedule is one-sided (backends decide alike on every rank).
  const Schedule bcast = oneshot_broadcast(3, 0);
  CHECK(build_rank_records(bcast, 1).one_sided);
  // A ring moves chunks: no signals, no one-sided ops.
  const RankRecords ring = build_rank_records(ring_allreduce(3), 0);
  CHECK_FALSE(ring.one_sided);
  CHECK_FALSE(ring.signals);
  CHECK(ring.chunk_messages);
}

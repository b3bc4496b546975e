// What a call runs of the algorithms its selection (algSelection, NCCL_ALGO)
// admits (src/plan/planner.h, selected_algorithm): braid's usual choice where
// admitted, else the size rule's, else the size rule's other algorithms,
// else the cheapest by the cost model; not the first in registry order.
#include <catch2/catch.hpp>

#include <string>

#include "src/plan/alg_selection.h"
#include "src/plan/planner.h"

using namespace braid;

namespace {

uint32_t selection(const char* text, Collective c) {
  uint32_t bits = 0;
  const Status s = parse_alg_selection(text, c, &bits);
  INFO(text << ": " << s.message());
  REQUIRE(s.is_ok());
  return bits;
}

std::string planned(PlanCache& plans, Collective c, int n, uint64_t bytes, uint32_t algorithms) {
  std::shared_ptr<const Schedule> s;
  const Status st = plans.schedule_for(c, n, c == Collective::Broadcast ? 0 : -1, bytes, &s, -1, Placement::Unknown,
                                       algorithms);
  INFO(st.message());
  REQUIRE(st.is_ok());
  return s->name;
}

}  // namespace

TEST_CASE("selected algorithm: braid's usual choice where admitted, else the size rule's", "[planner][algo]") {
  const HostTuning tuning;  // recursive doubling up to 32 KiB, ring above
  const uint32_t ring_rd = selection("ring,rd", Collective::AllReduce);
  CHECK(selected_algorithm(Collective::AllReduce, 4, 8, "rd", tuning, ring_rd) == "rd");
  CHECK(selected_algorithm(Collective::AllReduce, 4, 64 << 20, "ring", tuning, ring_rd) == "ring");
  // The one-sided size rule's two-shot is not admitted: the two-sided rule's ring.
  CHECK(selected_algorithm(Collective::AllReduce, 4, 512 << 10, "twoshot", tuning, ring_rd) == "ring");
  const uint32_t not_ring = selection("^ring", Collective::AllReduce);
  CHECK(selected_algorithm(Collective::AllReduce, 4, 512 << 10, "twoshot", tuning, not_ring) == "twoshot");
  CHECK(selected_algorithm(Collective::AllReduce, 4, 8, "rd", tuning, not_ring) == "rd");
  CHECK(selected_algorithm(Collective::AllReduce, 4, 8, "rd", tuning, 0).empty());
}

TEST_CASE("selected algorithm: where the size rule's is excluded, the size rule's others, then the cheapest",
          "[planner][algo]") {
  const uint32_t not_ring = selection("^ring", Collective::AllReduce);
  PlanCache processes;  // no peer access: the one-sided ones cannot run
  for (uint64_t bytes : {uint64_t(8), uint64_t(1) << 20, uint64_t(64) << 20}) {
    INFO(bytes << " B");
    // Recursive doubling, the size rule's other AllReduce (direct is a
    // rank-order fold, which lost to it on the host however cheap its
    // closed form); AllGather's other, direct.
    CHECK(planned(processes, Collective::AllReduce, 4, bytes, not_ring) == "rd_allreduce");
    CHECK(planned(processes, Collective::AllGather, 4, bytes, selection("^ring", Collective::AllGather)) ==
          "direct_allgather");
    // ReduceScatter's size rule has only ring: the cheapest of the rest.
    CHECK(planned(processes, Collective::ReduceScatter, 4, bytes, selection("^ring", Collective::ReduceScatter)) ==
          "direct_reducescatter");
  }
  // Where ranks reach each other's buffers, the one-sided two-shot in the
  // size rules' range; beyond it recursive doubling.
  PlanCache threads;
  threads.set_peer_access(true);
  CHECK(planned(threads, Collective::AllReduce, 4, 512 << 10, not_ring) == "twoshot_allreduce");
  CHECK(planned(threads, Collective::AllReduce, 4, 64 << 20, not_ring) == "rd_allreduce");
  // Among what the size rules never pick, the cost model by size: one hop
  // for a small message, ring's bytes in two exchanges for a large one.
  const uint32_t folds = selection("direct,chain,allgather_fold", Collective::AllReduce);
  CHECK(planned(processes, Collective::AllReduce, 4, 8, folds) == "allgather_fold_allreduce");
  CHECK(planned(processes, Collective::AllReduce, 4, 64 << 20, folds) == "direct_allreduce");
  CHECK(planned(threads, Collective::AllReduce, 4, 64 << 20, selection("oneshot,twoshot", Collective::AllReduce)) ==
        "twoshot_allreduce");
  // StragglAR (no late rank known) only where nothing else is admitted.
  const uint32_t rd_stragglar = selection("rd,stragglar", Collective::AllReduce);
  CHECK(planned(processes, Collective::AllReduce, 4, 64 << 20, rd_stragglar) == "rd_allreduce");
  CHECK(planned(processes, Collective::AllReduce, 4, 64 << 20, selection("stragglar,chain", Collective::AllReduce)) ==
        "chain_allreduce");
  CHECK(planned(processes, Collective::AllReduce, 4, 64 << 20, selection("stragglar", Collective::AllReduce)) ==
        "stragglar_allreduce");
}

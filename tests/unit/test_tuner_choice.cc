// What a tuner plugin is shown and what its answer picks
// (src/plan/tuner_choice.h), and the cost model the table's entries hold.
#include <catch2/catch.hpp>
#include <cstring>

#include "braid/algorithms.h"
#include "src/plan/cost_model.h"
#include "src/plan/tuner_choice.h"

using namespace braid;

namespace {

float& entry(TunerTable& t, int algorithm, int protocol) { return t.cost[algorithm][protocol]; }

constexpr int kRing = BRAID_TUNER_ALGO_RING, kTree = BRAID_TUNER_ALGO_TREE;
constexpr int kLL = BRAID_TUNER_PROTO_LL, kSimple = BRAID_TUNER_PROTO_SIMPLE, kLL128 = BRAID_TUNER_PROTO_LL128;

TunerOffer both() { return TunerOffer{true, true, 20.0, 3.0}; }

}  // namespace

TEST_CASE("A tuner table lays out as NCCL's float[7][3] with -1 where braid offers nothing", "[tuner]") {
  static_assert(sizeof(TunerTable) == sizeof(float) * 7 * 3);
  TunerTable t = tuner_table(both());
  const float* flat = &t.cost[0][0];
  int offered = 0;
  for (int i = 0; i < 21; ++i) offered += flat[i] != kTunerIgnore;
  CHECK(offered == 2);
  CHECK(flat[kRing * 3 + kSimple] == 20.0f);  // what a plugin indexes as table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE]
  CHECK(flat[kRing * 3 + kLL] == 3.0f);
  TunerTable none = tuner_table(TunerOffer{});
  for (const auto& row : none.cost)
    for (float e : row) CHECK(e == kTunerIgnore);
}

TEST_CASE("An untouched tuner table leaves braid's own choice", "[tuner]") {
  CHECK(tuner_pick(both(), tuner_table(both())) == TunerPick::BraidsOwn);
  // Entries braid did not offer are not braid's to run, whatever the plugin wrote there.
  TunerTable t = tuner_table(both());
  entry(t, kTree, kSimple) = 0;
  entry(t, kRing, kLL128) = 0;
  CHECK(tuner_pick(both(), t) == TunerPick::BraidsOwn);
}

TEST_CASE("A tuner's lowered entry picks braid's ring or LL path, LL first on a tie", "[tuner]") {
  TunerTable t = tuner_table(both());
  entry(t, kRing, kSimple) = 0;
  CHECK(tuner_pick(both(), t) == TunerPick::Ring);
  t = tuner_table(both());
  entry(t, kRing, kLL) = 0;
  CHECK(tuner_pick(both(), t) == TunerPick::LL);
  t = tuner_table(both());
  entry(t, kRing, kLL) = 0;
  entry(t, kRing, kSimple) = 0;
  CHECK(tuner_pick(both(), t) == TunerPick::LL);  // NCCL scans protocols LL, LL128, Simple and keeps the first least
  // A plugin with its own model rewrites both: the cheaper wins, even if that raises LL above ring.
  t = tuner_table(both());
  entry(t, kRing, kLL) = 50;
  entry(t, kRing, kSimple) = 40;
  CHECK(tuner_pick(both(), t) == TunerPick::Ring);
}

TEST_CASE("A tuner that takes offered entries away leaves the other, or braid's own choice", "[tuner]") {
  TunerTable t = tuner_table(both());
  entry(t, kRing, kLL) = kTunerIgnore;
  CHECK(tuner_pick(both(), t) == TunerPick::Ring);
  entry(t, kRing, kSimple) = kTunerIgnore;
  CHECK(tuner_pick(both(), t) == TunerPick::BraidsOwn);
  // Ring alone offered: the LL entry is not braid's, even lowered.
  const TunerOffer ring_only{true, false, 20.0, 0};
  t = tuner_table(ring_only);
  entry(t, kRing, kLL) = 0;
  CHECK(tuner_pick(ring_only, t) == TunerPick::BraidsOwn);
  entry(t, kRing, kSimple) = 1;
  CHECK(tuner_pick(ring_only, t) == TunerPick::Ring);
}

TEST_CASE("A v2 tuner's answer lowers its entry only where it was offered", "[tuner]") {
  TunerTable t = tuner_table(both());
  apply_v2_answer(kRing, kSimple, &t);
  CHECK(tuner_pick(both(), t) == TunerPick::Ring);
  t = tuner_table(both());
  apply_v2_answer(kTree, kSimple, &t);  // braid has no tree
  CHECK(entry(t, kTree, kSimple) == kTunerIgnore);
  apply_v2_answer(-1, -1, &t);  // NCCL_ALGO_UNDEF: no answer
  apply_v2_answer(7, 0, &t);
  apply_v2_answer(1, 3, &t);
  const TunerTable shown = tuner_table(both());
  CHECK(std::memcmp(&t, &shown, sizeof t) == 0);
}

TEST_CASE("Tuners are asked about NCCL's five collectives with NCCL's nBytes", "[tuner]") {
  CHECK(tuner_func(Collective::Broadcast) == 0);
  CHECK(tuner_func(Collective::Reduce) == 1);
  CHECK(tuner_func(Collective::AllGather) == 2);
  CHECK(tuner_func(Collective::ReduceScatter) == 3);
  CHECK(tuner_func(Collective::AllReduce) == 4);
  CHECK(tuner_func(Collective::AlltoAll) == -1);
  CHECK(tuner_func(Collective::Gather) == -1);
  CHECK(tuner_func(Collective::Scatter) == -1);
  CHECK(tuner_bytes(Collective::AllReduce, 8, 1000) == 1000);
  CHECK(tuner_bytes(Collective::AllGather, 8, 1000) == 8000);  // what a rank receives
  CHECK(tuner_bytes(Collective::ReduceScatter, 8, 1000) == 8000);  // what a rank sends
  CHECK(tuner_bytes(Collective::Broadcast, 8, 1000) == 1000);
}

TEST_CASE("braid's ring bit is the registry's ring for the collective, none where it has none", "[tuner]") {
  for (Collective c : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter}) {
    const uint32_t bit = ring_algorithm_bit(c);
    REQUIRE(bit != 0);
    const AlgorithmInfo& info = algorithm_registry()[size_t(__builtin_ctz(bit))];
    CHECK(info.name == "ring");
    CHECK(info.collective == c);
  }
  CHECK(ring_algorithm_bit(Collective::Broadcast) == 0);
  CHECK(ring_algorithm_bit(Collective::Reduce) == 0);
}

TEST_CASE("The cost model's ring and LL estimates", "[tuner]") {
  const LinkCost l{2.0, 0.001};
  // Ring AllReduce of m bytes on n ranks: 2(n-1)(a + b m/n).
  CHECK(collective_us(Collective::AllReduce, 4, 4000, "ring", l) == Approx(6 * (2.0 + 1.0)));
  // The LL path: one hop, every peer's copy.
  CHECK(collective_us(Collective::AllReduce, 4, 4000, "ll", l) == Approx(2.0 + 3 * 4.0));
  CHECK(collective_us(Collective::AllGather, 4, 4000, "ring", l) == Approx(3 * (2.0 + 4.0)));
  CHECK(collective_us(Collective::AllReduce, 1, 4000, "ring", l) == 0);
  CHECK(link_cost(true).alpha_us > link_cost(false).alpha_us);
}

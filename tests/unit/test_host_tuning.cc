// The host AllReduce crossover (src/plan/host_tuning.cc): where the model
// puts it, and that the planner follows it.  The boards' size limits
// (src/plan/host_path.h) by rank count and oversubscription.
#include <catch2/catch.hpp>

#include "braid/verify.h"
#include "src/plan/host_path.h"
#include "src/plan/host_tuning.h"
#include "src/plan/planner.h"

using namespace braid;

TEST_CASE("host allreduce crossover: rd for small, ring for large, later when oversubscribed", "[plan][host]") {
  CHECK(host_allreduce_rd_max_bytes(1, false) == UINT64_MAX);
  // ~30 KiB with a core per rank (the measured latency and bandwidth).
  for (int n : {2, 4, 8}) {
    uint64_t fast = host_allreduce_rd_max_bytes(n, false), slow = host_allreduce_rd_max_bytes(n, true);
    INFO("n=" << n);
    CHECK(fast >= 16 * 1024);
    CHECK(fast <= 64 * 1024);
    CHECK(slow == fast);  // measured: oversubscription does not move the crossover up
  }
  // Folding (n not a power of two) costs rd two extra full-buffer steps.
  CHECK(host_allreduce_rd_max_bytes(3, false) < host_allreduce_rd_max_bytes(4, false));
  CHECK(default_algorithm(Collective::AllReduce, 2, 8) == "rd");
  CHECK(default_algorithm(Collective::AllReduce, 2, 64 << 20) == "ring");
}

TEST_CASE("host tuning: direct AllGather and AlltoAll only where a host has more ranks than cores", "[plan][host]") {
  const HostTuning spare{32 * 1024, false}, crowded{32 * 1024, true};
  CHECK(default_algorithm(Collective::AlltoAll, 4, 1 << 20, spare) == "pairwise");
  CHECK(default_algorithm(Collective::AlltoAll, 4, 1 << 20, crowded) == "direct");
  CHECK(default_algorithm(Collective::AlltoAll, 4, uint64_t(1) << 30, crowded) == "direct");
  CHECK(default_algorithm(Collective::AllGather, 4, 64 * 1024, spare) == "ring");
  CHECK(default_algorithm(Collective::AllGather, 4, kDirectAllGatherMaxBytes, crowded) == "direct");
  CHECK(default_algorithm(Collective::AllGather, 4, kDirectAllGatherMaxBytes + 1, crowded) == "ring");
  // Two ranks: both orders are the same exchange; the established names stay.
  CHECK(default_algorithm(Collective::AlltoAll, 2, 1 << 20, crowded) == "pairwise");
  CHECK(default_algorithm(Collective::AllGather, 2, 1024, crowded) == "ring");
  // Other collectives do not change.
  CHECK(default_algorithm(Collective::ReduceScatter, 4, 1024, crowded) == "ring");
  CHECK(default_algorithm(Collective::AllReduce, 4, 1 << 20, crowded) == "ring");
}

TEST_CASE("host tuning: every rank derives the same choice from all reports", "[plan][host]") {
  // Two hosts with 2 cores each: 2 ranks on each is not crowded, 3 on one is.
  std::vector<HostTuningReport> even = {{1, 40000, 2}, {1, 30000, 2}, {2, 50000, 2}, {2, 30000, 2}};
  HostTuning t = agree_host_tuning(even);
  CHECK(t.rd_max_bytes == 30000);  // the smallest crossover
  CHECK_FALSE(t.oversubscribed);
  std::vector<HostTuningReport> uneven = {{1, 40000, 2}, {1, 40000, 2}, {1, 40000, 2}, {2, 40000, 2}};
  CHECK(agree_host_tuning(uneven).oversubscribed);
  CHECK(agree_host_tuning(uneven).several_hosts);  // hosts 1 and 2
  // A rank allowed fewer cores than its host's rank count makes it crowded.
  std::vector<HostTuningReport> pinned = {{7, 40000, 1}, {7, 40000, 4}};
  CHECK(agree_host_tuning(pinned).oversubscribed);
  CHECK_FALSE(agree_host_tuning(pinned).several_hosts);  // both on host 7
}

TEST_CASE("host tuning: a call sending on many connections shares one ring's worth of slots", "[plan][host]") {
  CHECK(slots_per_connection(8, 1) == 8);  // ring and pairwise schedules: the whole ring
  CHECK(slots_per_connection(8, 2) == 4);  // a binomial root
  CHECK(slots_per_connection(8, 3) == 2);  // 4 ranks exchanging with all peers
  CHECK(slots_per_connection(8, 7) == 2);  // never below what deadlock freedom was verified with
  CHECK(slots_per_connection(16, 3) == 5);
  CHECK(slots_per_connection(8, 0) == 8);  // a call that sends nothing
  CHECK(slots_per_connection(2, 5) == kMinSlots);
}

TEST_CASE("host tuning: wide fragments only where every chunk holds enough of them", "[plan][host]") {
  constexpr uint64_t kNarrow = 256 * 1024, kWide = 512 * 1024;
  // A slot no wider than the communicator's fragment: always that fragment.
  CHECK(call_tile_bytes(kNarrow, kNarrow, UINT64_MAX) == kNarrow);
  // Chunks of kWideTileMinTiles wide fragments and more go wide; one byte less does not.
  CHECK(call_tile_bytes(kNarrow, kWide, kWideTileMinTiles * kWide) == kWide);
  CHECK(call_tile_bytes(kNarrow, kWide, 64 * kWide) == kWide);
  CHECK(call_tile_bytes(kNarrow, kWide, kWideTileMinTiles * kWide - 1) == kNarrow);
  CHECK(call_tile_bytes(kNarrow, kWide, 0) == kNarrow);
}

TEST_CASE("board limits: auto by rank count and oversubscription, a set value for every collective", "[plan][host]") {
  auto limits = [](uint64_t agreed, bool oversubscribed, int nranks) {
    const BoardLimits l = board_limits(agreed, oversubscribed, nranks);
    return std::pair{l.most, l.broadcast_gather};
  };
  CHECK(limits(kBoardAutoInAgreement, false, 2) == std::pair{uint64_t(8192), uint64_t(8192)});
  CHECK(limits(kBoardAutoInAgreement, false, 3) == std::pair{uint64_t(4096), uint64_t(4096)});
  CHECK(limits(kBoardAutoInAgreement, false, 64) == std::pair{uint64_t(4096), uint64_t(4096)});
  for (int nranks : {2, 3, 8})
    CHECK(limits(kBoardAutoInAgreement, true, nranks) == std::pair{uint64_t(65536), uint64_t(262144)});
  for (uint64_t set : {uint64_t(0), uint64_t(100), uint64_t(262144)})
    for (bool oversubscribed : {false, true}) CHECK(limits(set, oversubscribed, 2) == std::pair{set, set});
}

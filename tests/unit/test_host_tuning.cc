// The host AllReduce crossover (src/plan/host_tuning.cc): where the model
// puts it, and that the planner follows it.
#include <catch2/catch.hpp>

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

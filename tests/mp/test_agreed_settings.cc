// Settings every rank of a communicator must agree on (src/runtime/
// agreement.h): a rank that took another path than its peers would wait for
// them forever, so a difference fails init on every rank, and a value out of
// range is refused with the variable named.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "harness.h"

using namespace mp;

TEST_CASE("BRAID_STRAGGLAR_LANES: ranks that disagree fail init, a bad value is refused",
          "[mp][processes][stragglar]") {
  // A rank planning other lanes than its peers would wait for them forever.
  auto disagree = [](int rank) { setenv("BRAID_STRAGGLAR_LANES", rank == 0 ? "compact" : "connection", 1); };
  CHECK(init_must_fail(2, disagree, ncclInvalidUsage, "stragglar_lanes") == 0);
  auto bad = [](int) { setenv("BRAID_STRAGGLAR_LANES", "diagonal", 1); };
  CHECK(init_must_fail(2, bad, ncclInvalidArgument, "BRAID_STRAGGLAR_LANES=diagonal") == 0);
}

TEST_CASE("BRAID_CUDA_LL_MAX_BYTES out of range is refused at init", "[mp][processes]") {
  // Every rank sizes its LL region by it, so it is checked on every backend.
  auto huge = [](int) { setenv("BRAID_CUDA_LL_MAX_BYTES", "2097152", 1); };
  CHECK(init_must_fail(2, huge, ncclInvalidArgument, "BRAID_CUDA_LL_MAX_BYTES=2097152 (0..1048576)") == 0);
  auto negative = [](int) { setenv("BRAID_CUDA_LL_MAX_BYTES", "-1", 1); };
  CHECK(init_must_fail(2, negative, ncclInvalidArgument, "BRAID_CUDA_LL_MAX_BYTES=-1") == 0);
}

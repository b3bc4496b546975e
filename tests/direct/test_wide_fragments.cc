// Wide fragments (src/plan/host_tuning.h, call_tile_bytes): a call whose
// every chunk spans kWideTileMinTiles slot-wide fragments sends fragments
// that wide, a smaller call the communicator's narrow ones, and every
// collective is exact either side of the line, in place and out of place.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "collective_check.h"
#include "harness.h"
#include "scoped_env.h"
#include "src/exec/host/collective_task.h"
#include "src/plan/host_tuning.h"
#include "src/transport/transport.h"

using namespace mp;

namespace {

// Narrow fragments of 4 KiB make wide ones 8 KiB: calls go wide from chunks
// of 32 KiB, so the test runs on small buffers.
constexpr uint64_t kNarrow = 4096, kWide = braid::kShmSlotFragments * kNarrow;

uint64_t wide_calls() { return braid::wide_fragment_calls().load(); }

// The largest count whose larger buffer (n blocks at most) is under
// kWideTileMinTiles wide fragments: no chunk of it can go wide.
size_t narrow_count(int n) { return (braid::kWideTileMinTiles * kWide - 1) / (sizeof(float) * size_t(n)); }

}  // namespace

TEST_CASE("wide fragments: large chunks go wide, small calls stay narrow, exact either way",
          "[direct][wide_fragments][processes]") {
  ScopedEnv backend("BRAID_BACKEND", "host"), cma("BRAID_CMA", "off");  // every collective through the slots
  ScopedEnv narrow("BRAID_SHM_SLOT_BYTES", std::to_string(kNarrow));
  for (int nranks : {2, 3}) {
    INFO(nranks << " ranks");
    CHECK(run_ranks_as_processes(nranks, [](int rank, int n, ncclComm_t comm, Failures& f) {
            // Counts whose larger buffer is under kWideTileMinTiles wide
            // fragments (never wide), around the line, and far above it
            // (chunks of 256 KiB and more: always wide).
            const size_t small = narrow_count(n), large = size_t(n) * 256 * 1024 / sizeof(float) + 3;
            for (Coll coll : kAllColls)
              for (size_t count : {small, small + 1, 8 * small + 5, large})
                for (bool in_place : {false, true}) {
                  const CollCase c{.coll = coll, .count = count, .root = n - 1, .in_place = in_place};
                  const uint64_t before = wide_calls();
                  run_and_check(c, rank, n, comm, f);
                  const bool wide = wide_calls() != before;
                  if ((count == small && wide) || (count == large && !wide))
                    f.fail(fmt::format("{}: {} fragments", describe(c, rank, n), wide ? "wide" : "narrow"));
                }
          }, 120) == 0);
  }
}

// Ranks whose slots differ (a socket fragment set on one rank only) must
// still cut every call into the same tiles: they agree at init on the widest
// fragment all of them take.
TEST_CASE("wide fragments: ranks with different slot sizes agree on the width", "[direct][wide_fragments][processes]") {
  ScopedEnv backend("BRAID_BACKEND", "host"), transport("BRAID_TRANSPORT", "socket");
  ScopedEnv narrow("BRAID_SHM_SLOT_BYTES", std::to_string(kNarrow));
  const auto setup = [](int rank) {
    // Rank 0's sockets take 1.5 narrow fragments, the others' 1 MiB: wide
    // would be 6 KiB on rank 0 and 8 KiB elsewhere if each went by itself.
    setenv("BRAID_SOCKET_SLOT_BYTES", rank == 0 ? "6144" : "1048576", 1);
  };
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          for (Coll coll : {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::AlltoAll, Coll::Broadcast})
            for (bool in_place : {false, true})
              run_and_check(CollCase{.coll = coll, .count = 256 * 1024 + 7, .in_place = in_place}, rank, n, comm, f);
        }, 120, setup) == 0);
}

// How the executor stores into its send slots on calls that stream their
// output (src/plan/slot_stores.h): forced either way, or timed (auto), the
// results are exact, and the counters show which way each call went.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "braid/chunking.h"
#include "collective_check.h"
#include "harness.h"
#include "src/exec/host/collective_task.h"
#include "src/plan/host_tuning.h"
#include "src/plan/slot_stores.h"
#include "stream_rule.h"

using namespace mp;

namespace {

constexpr size_t kMB = size_t(1) << 20;
constexpr size_t kCount = 32 * kMB / sizeof(float) + 5;  // outputs of 32 MB and more

uint64_t streamed() { return braid::streamed_slot_calls().load(); }

void set_env(const char* mode) {
  setenv("BRAID_BACKEND", "host", 1);
  setenv("BRAID_CMA", "off", 1);  // every collective through the slots
  setenv("BRAID_SLOT_STORES", mode, 1);
  setenv("BRAID_LLC_BYTES", "33554432", 1);  // the cases below are sized for a 32 MB cache
}

// Whether a call's slot stores are concerned at all: its output is streamed
// (the cache rule) and at least kSlotStoresMinOutputBytes.
bool concerned(const CollCase& c, int n) {
  const uint64_t output = c.count * sizeof(float) * braid::output_blocks(to_collective(c.coll), n);
  return output >= braid::kSlotStoresMinOutputBytes && rule_streams(c.coll, n, c.count, c.in_place);
}

// Every collective with an output on every rank, in place and out of place,
// at 32 MB; then calls either side of the limits (on a 32 MB cache: a 16 MB
// AllReduce streams its output out of place, not in place; a ReduceScatter
// with 7 MB out streams its output but is under kSlotStoresMinOutputBytes).
// With the stores forced streamed, exactly the concerned calls stream their
// send slots; forced cached, none.
RankBody every_collective(bool forced_streamed) {
  return [forced_streamed](int rank, int n, ncclComm_t comm, Failures& f) {
    std::vector<CollCase> cases;
    for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::AlltoAll, Coll::Broadcast})
      for (bool in_place : {false, true})
        cases.push_back({.coll = coll, .count = kCount, .root = 1, .in_place = in_place});
    for (bool in_place : {false, true})
      cases.push_back({.coll = Coll::AllReduce, .count = 16 * kMB / sizeof(float), .in_place = in_place});
    cases.push_back({.coll = Coll::ReduceScatter, .count = 7 * kMB / sizeof(float)});
    int concerned_calls = 0;
    for (const CollCase& c : cases) {
      const uint64_t before = streamed();
      run_and_check(c, rank, n, comm, f);
      const bool expect = forced_streamed && concerned(c, n), did = streamed() != before;
      concerned_calls += concerned(c, n);
      if (did != expect)
        f.fail(fmt::format("{}: send slots {}streamed, expected {}", describe(c, rank, n), did ? "" : "not ",
                           expect ? "streamed" : "cached"));
    }
    if (concerned_calls == 0) f.fail("no call was concerned: the test checks nothing on this machine");
  };
}

}  // namespace

TEST_CASE("slot stores: streamed send slots are exact on every collective, 2 and 3 processes",
          "[direct][slot_stores][processes]") {
  set_env("streamed");
  // 3 ranks on the ring also receive, reduce (or copy) and send on.
  for (int n : {2, 3}) {
    INFO(n << " processes");
    CHECK(run_ranks_as_processes(n, every_collective(true), 120) == 0);
  }
  set_env("cached");
  CHECK(run_ranks_as_processes(2, every_collective(false), 120) == 0);
}

TEST_CASE("slot stores: auto times both ways and stays exact, and a bad BRAID_SLOT_STORES fails init",
          "[direct][slot_stores][processes]") {
  set_env("auto");
  if (braid::host_usable_cores() >= 2) {
    CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
            const uint64_t before = streamed();
            const int calls = 6;
            const CollCase big{.coll = Coll::AllReduce, .count = kCount};
            for (int i = 0; i < calls && !f.count; ++i) run_and_check(big, rank, n, comm, f);
            // Nothing measured at first: the cache first, then the streamed stores.
            const uint64_t got = streamed() - before;
            if (!concerned(big, n)) {
              if (got != 0) f.fail(fmt::format("rank {}: a call not streaming its output streamed its slots", rank));
            } else if (got == 0 || got == calls)
              f.fail(fmt::format("rank {}: {} of {} calls streamed; auto should have timed both ways", rank, got,
                                 calls));
            // Below the streaming size nothing streams.
            const uint64_t small_before = streamed();
            run_and_check(CollCase{.coll = Coll::AllReduce, .count = 1 << 20}, rank, n, comm, f);
            if (streamed() != small_before) f.fail("a 4 MB AllReduce streamed its send slots");
          }, 120) == 0);
  }
  // Ranks outnumbering cores: auto keeps the cache.
  const int crowded = braid::host_usable_cores() + 1;
  CHECK(run_ranks_as_processes(crowded, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const uint64_t before = streamed();
          for (int i = 0; i < 3; ++i)
            run_and_check(CollCase{.coll = Coll::AllReduce, .count = kCount}, rank, n, comm, f);
          if (streamed() != before) f.fail(fmt::format("rank {}/{}: streamed while oversubscribed", rank, n));
        }, 120) == 0);
  setenv("BRAID_SLOT_STORES", "sometimes", 1);
  CHECK(run_ranks_as_processes(1, [](int, int, ncclComm_t, Failures&) {}) == 1);  // init refuses the value
  unsetenv("BRAID_SLOT_STORES");
}

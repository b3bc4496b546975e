// How the executor stores into its send slots on calls that stream their
// output (src/plan/slot_stores.h): forced either way, or timed (auto), the
// results are exact, and the counters show which way each call went.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "collective_check.h"
#include "harness.h"
#include "src/exec/host/collective_task.h"
#include "src/plan/host_tuning.h"

using namespace mp;

namespace {

constexpr size_t kCount = (size_t(32) << 20) / sizeof(float) + 5;  // outputs of 32 MB and more stream

uint64_t streamed() { return braid::streamed_slot_calls().load(); }

void set_env(const char* mode) {
  setenv("BRAID_BACKEND", "host", 1);
  setenv("BRAID_CMA", "off", 1);  // every collective through the slots
  setenv("BRAID_SLOT_STORES", mode, 1);
}

// Every collective with an output on every rank, once in place and once
// out of place; expect 1: all of them streamed their send slots, 0: none.
RankBody every_collective(int expect) {
  return [expect](int rank, int n, ncclComm_t comm, Failures& f) {
    const uint64_t before = streamed();
    int calls = 0;
    for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::AlltoAll, Coll::Broadcast})
      for (bool in_place : {false, true}) {
        run_and_check(CollCase{.coll = coll, .count = kCount, .root = 1, .in_place = in_place}, rank, n, comm, f);
        ++calls;
      }
    const uint64_t got = streamed() - before;
    if (got != uint64_t(expect == 0 ? 0 : calls))
      f.fail(fmt::format("rank {}/{}: {} of {} calls streamed their send slots, expected {}", rank, n, got, calls,
                         expect == 0 ? 0 : calls));
  };
}

}  // namespace

TEST_CASE("slot stores: streamed send slots are exact on every collective, 2 and 3 processes",
          "[direct][slot_stores][processes]") {
  set_env("streamed");
  // 3 ranks on the ring also receive, reduce (or copy) and send on.
  for (int n : {2, 3}) {
    INFO(n << " processes");
    CHECK(run_ranks_as_processes(n, every_collective(1), 120) == 0);
  }
  set_env("cached");
  CHECK(run_ranks_as_processes(2, every_collective(0), 120) == 0);
}

TEST_CASE("slot stores: auto times both ways and stays exact, and a bad BRAID_SLOT_STORES fails init",
          "[direct][slot_stores][processes]") {
  set_env("auto");
  if (braid::host_usable_cores() >= 2) {
    CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
            const uint64_t before = streamed();
            const int calls = 6;
            for (int i = 0; i < calls && !f.count; ++i)
              run_and_check(CollCase{.coll = Coll::AllReduce, .count = kCount}, rank, n, comm, f);
            // Nothing measured at first: the cache first, then the streamed stores.
            const uint64_t got = streamed() - before;
            if (got == 0 || got == calls)
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

// Which user outputs the schedule executor streams (src/plan/output_stores.h):
// every call streams exactly when the rule says so for this machine's cache
// (braid's counter tells), and the results are exact either way.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "braid/chunking.h"
#include "collective_check.h"
#include "harness.h"
#include "src/exec/host/collective_task.h"
#include "src/plan/output_stores.h"

using namespace mp;

namespace {

braid::Collective to_collective(Coll c) {
  switch (c) {
    case Coll::AllReduce: return braid::Collective::AllReduce;
    case Coll::AllGather: return braid::Collective::AllGather;
    case Coll::ReduceScatter: return braid::Collective::ReduceScatter;
    case Coll::AlltoAll: return braid::Collective::AlltoAll;
    default: return braid::Collective::Custom;  // not used below
  }
}

// The rule for a call of `count` floats per block on n ranks of this host.
bool rule_streams(Coll coll, int n, size_t count, bool in_place) {
  const braid::Collective c = to_collective(coll);
  const uint64_t block = count * sizeof(float);
  return braid::executor_streams_output(braid::cache_share(n), braid::mean_rank_bytes(c, n, block),
                                        block * braid::output_blocks(c, n), in_place);
}

}  // namespace

TEST_CASE("output stores: calls stream their output as the cache rule says, exact either way",
          "[direct][output_stores][processes]") {
  setenv("BRAID_BACKEND", "host", 1);
  setenv("BRAID_CMA", "off", 1);  // every collective through the slots
  const braid::CacheShare share = braid::cache_share(2);
  INFO("last-level cache " << (share.bytes >> 20) << " MB shared by " << share.ranks << " of 2 ranks");
  // 1 MB blocks fit any cache; 12 MB blocks overflow this project's 32 MB
  // (2 ranks x (12 + 12) MB for AllReduce) out of place, not in place.
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::AlltoAll})
            for (size_t count : {size_t(1) << 18, size_t(3) << 20})
              for (bool in_place : {false, true}) {
                const uint64_t before = braid::streamed_output_calls().load();
                run_and_check(CollCase{.coll = coll, .count = count, .in_place = in_place}, rank, n, comm, f);
                const bool streamed = braid::streamed_output_calls().load() != before;
                if (streamed != rule_streams(coll, n, count, in_place))
                  f.fail(fmt::format("rank {}: {} of {} floats{}: output {}streamed, the rule says otherwise", rank,
                                     coll_name(coll), count, in_place ? " in place" : "", streamed ? "" : "not "));
              }
        }, 120) == 0);
}

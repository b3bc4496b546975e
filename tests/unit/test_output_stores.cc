// Which outputs the schedule executor streams (src/plan/output_stores.h):
// the cache-share arithmetic and the rule at the sizes it was measured at.
#include <catch2/catch.hpp>

#include "src/plan/output_stores.h"

using namespace braid;

namespace {
constexpr uint64_t MB = uint64_t(1) << 20;
}

TEST_CASE("cpu lists from sysfs are counted, malformed ones give 0", "[plan][host]") {
  CHECK(cpu_list_count("0-1") == 2);
  CHECK(cpu_list_count("0-1\n") == 2);
  CHECK(cpu_list_count("3") == 1);
  CHECK(cpu_list_count("0,2,4-7") == 6);
  CHECK(cpu_list_count("") == 0);
  CHECK(cpu_list_count("x") == 0);
  CHECK(cpu_list_count("5-3") == 0);
  CHECK(cpu_list_count("1-") == 0);
  CHECK(cpu_list_count("1;2") == 0);
}

TEST_CASE("ranks spread evenly over a host's caches share them", "[plan][host]") {
  CHECK(cache_share(32 * MB, 2, 2, 4).ranks == 4);    // one cache for the host: every rank
  CHECK(cache_share(32 * MB, 8, 64, 8).ranks == 1);   // 8 caches of 8 CPUs, 8 ranks
  CHECK(cache_share(32 * MB, 8, 64, 16).ranks == 2);
  CHECK(cache_share(32 * MB, 8, 64, 3).ranks == 1);
  CHECK(cache_share(32 * MB, 8, 64, 3).bytes == 32 * MB);
  const CacheShare unknown = cache_share(0, 0, 0, 3);  // nothing read: 32 MB for everyone
  CHECK(unknown.bytes == 32 * MB);
  CHECK(unknown.ranks == 3);
  CHECK(cache_share(32 * MB, 2, 2, 0).ranks == 1);
  // A VM's view of its host's cache counts 48 MB per CPU that shares it.
  CHECK(cache_share(480 * MB, 2, 2, 2).bytes == 96 * MB);
  CHECK(cache_share(480 * MB, 64, 64, 2).bytes == 480 * MB);
  CHECK(cache_share(96 * MB, 8, 8, 2).bytes == 96 * MB);  // a large-cache desktop part
  const CacheShare here = cache_share(4);  // this machine's sysfs
  CHECK(here.bytes > 0);
  CHECK(here.ranks >= 1);
  CHECK(here.ranks <= 4);
}

TEST_CASE("the bytes a rank's buffers span count a root's once, and in place the larger buffer", "[plan][host]") {
  const uint64_t b = 1000;
  CHECK(mean_rank_bytes(Collective::AllReduce, 2, b, false) == 2 * b);
  CHECK(mean_rank_bytes(Collective::AllGather, 2, b, false) == 3 * b);
  CHECK(mean_rank_bytes(Collective::AlltoAll, 4, b, false) == 8 * b);
  CHECK(mean_rank_bytes(Collective::ReduceScatter, 4, b, false) == 5 * b);
  CHECK(mean_rank_bytes(Collective::Broadcast, 2, b, false) == 3 * b / 2);
  CHECK(mean_rank_bytes(Collective::Reduce, 4, b, false) == 5 * b / 4);
  CHECK(mean_rank_bytes(Collective::Gather, 4, b, false) == 2 * b);
  CHECK(mean_rank_bytes(Collective::Scatter, 4, b, false) == 2 * b);
  // In place.
  CHECK(mean_rank_bytes(Collective::AllReduce, 2, b, true) == b);
  CHECK(mean_rank_bytes(Collective::AllGather, 4, b, true) == 4 * b);
  CHECK(mean_rank_bytes(Collective::ReduceScatter, 4, b, true) == 4 * b);
  CHECK(mean_rank_bytes(Collective::Broadcast, 4, b, true) == b);
  CHECK(mean_rank_bytes(Collective::Gather, 4, b, true) == 7 * b / 4);
}

TEST_CASE("outputs stream once the ranks sharing the cache overflow it", "[plan][host]") {
  const CacheShare two{32 * MB, 2}, four{32 * MB, 4};
  auto streams = [](const CacheShare& s, Collective c, int n, uint64_t block, bool in_place) {
    return should_stream_output(s, c, n, block, in_place);
  };
  // The sizes of the measurements in output_stores.h (perf tools' sizes).
  CHECK(streams(two, Collective::AllGather, 2, 8 * MB, false));       // 16 MB: 48 MB touched
  CHECK_FALSE(streams(two, Collective::AllGather, 2, 4 * MB, false)); // 8 MB: 24 MB
  CHECK(streams(two, Collective::AlltoAll, 2, 8 * MB, false));        // 16 MB: 64 MB
  CHECK_FALSE(streams(two, Collective::AlltoAll, 2, 4 * MB, false));  // 8 MB: 32 MB
  CHECK(streams(two, Collective::Broadcast, 2, 16 * MB, false));      // 48 MB
  CHECK_FALSE(streams(two, Collective::Broadcast, 2, 8 * MB, false));
  CHECK(streams(two, Collective::ReduceScatter, 2, 8 * MB, false));   // 48 MB
  CHECK(streams(four, Collective::AlltoAll, 4, 2 * MB, false));       // 8 MB: 64 MB
  CHECK_FALSE(streams(four, Collective::AlltoAll, 4, 1 * MB, false)); // 4 MB: 32 MB
  // In place: the buffer once.
  CHECK(streams(four, Collective::AllGather, 4, 4 * MB, true));       // 16 MB: 64 MB
  CHECK_FALSE(streams(four, Collective::AllGather, 4, 2 * MB, true)); // 8 MB: 32 MB
  CHECK(streams(two, Collective::Broadcast, 2, 64 * MB, true));       // non-roots never read their output
  // ... except where the rank read its whole output as input: never.
  for (Collective c : {Collective::AllReduce, Collective::Reduce, Collective::ReduceScatter, Collective::AlltoAll}) {
    CHECK_FALSE(streams(two, c, 2, 256 * MB, true));
    CHECK(streams(two, c, 2, 256 * MB, false));
  }
  // One rank alone under a large cache keeps its 16 MB output cached.
  CHECK_FALSE(streams(CacheShare{96 * MB, 1}, Collective::AllReduce, 2, 16 * MB, false));
}

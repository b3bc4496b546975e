// Which user outputs the schedule executor writes with streaming
// (non-temporal) stores.
//
// A streamed store skips the read-for-ownership of the line it writes and
// leaves nothing in the cache.  That pays when the call's buffers do not fit
// the last-level cache anyway (the lines would be evicted unread, and the
// cache keeps room for the slots the ranks hand fragments through), and
// costs when they do fit (whoever reads the output next finds it in cache).
// What has to fit is the buffers of every rank sharing the cache, not one
// rank's: 4 ranks of a 4 MB AlltoAll touch 4 x (4 + 4) MB.  So out of place
// the executor streams once the ranks sharing this cache touch more bytes
// than it holds.  Measured on this project's 2-core VM (one 32 MB L3), out
// of place, 4 alternating rounds, us, through the cache -> streamed
// (perf/results/compare_20261125k.txt):
//   2 ranks, 16 MB calls, 48-64 MB touched: AllGather 1064-1340 -> 970-1164,
//     AlltoAll 1486-1698 -> 1343-1482, Broadcast 1786-2041 -> 1119-1541,
//     ReduceScatter 830-1052 -> 769-926, AllReduce level (6 more rounds:
//     1517-1683 -> 1554-1638)
//   2 ranks, 8 MB calls, 24-32 MB touched: AlltoAll 516-656 -> 614-664,
//     ReduceScatter 265-503 -> 325-372, AllGather 356-528 -> 517-679
//   4 ranks AlltoAll: 8 MB (64 MB touched) 1924-2388 -> 1673-2069; 4 MB
//     (32 MB) level
// (An earlier run of 2-rank AllGather at 16 MB, 4 alternating rounds, had
// it the other way, 1065-1584 -> 1223-1859, and AlltoAll 10-20% faster
// streamed; this host's spread is wide, and those 2-rank 16 MB calls then
// stayed cached.)
// In place the lines a rank writes are mostly ones it has just read and
// owns, and streaming them lost where the buffers barely overflow the cache
// (2-rank AlltoAll 16 MB in place: 362-381 us through the cache, 861-939
// streamed; AllReduce 803-867 against 1198-1524), so in place the executor
// streams outputs of kExecutorStreamOutputBytes or more, as it always has.
#pragma once

#include <cstdint>
#include <string>

#include "braid/schedule.h"

namespace braid {

// The last-level cache of the CPU this process runs on, and how many of a
// communicator's ranks on this host share one such cache when the ranks are
// spread evenly over the host's CPUs.
struct CacheShare {
  uint64_t bytes = uint64_t(32) << 20;
  int ranks = 1;
};

// Read from sysfs; a 32 MB cache shared by every rank where it cannot be read.
CacheShare cache_share(int ranks_on_host);

// The same from given facts: the cache's size and how many of the host's
// `host_cpus` CPUs share it.
CacheShare cache_share(uint64_t cache_bytes, int cache_cpus, int host_cpus, int ranks_on_host);

// Number of CPUs in a sysfs CPU list ("0-3,8,10-11"); 0 if it does not parse.
int cpu_list_count(const std::string& list);

// Input plus output bytes of one rank, averaged over the ranks (a Broadcast
// root's input, a Reduce root's output count once), for blocks of
// `block_bytes` (the call's count times the element size).
uint64_t mean_rank_bytes(Collective c, int nranks, uint64_t block_bytes);

// Whether the executor streams a call's user output (`output_bytes` on this
// rank; `in_place`: it overlaps this rank's input).
bool executor_streams_output(const CacheShare& share, uint64_t mean_rank_bytes, uint64_t output_bytes,
                             bool in_place);

}  // namespace braid

// Which user outputs the host paths (the schedule executor, and the direct
// and pull paths of src/exec/host/single_copy.h) write with streaming
// (non-temporal) stores.
//
// A streamed store skips the read-for-ownership of the line it writes and
// leaves nothing in the cache.  That pays when the call's buffers do not fit
// the last-level cache anyway (the lines would be evicted unread, and the
// cache keeps room for the slots the ranks hand fragments through), and
// costs when they do fit (whoever reads the output next finds it in cache).
// What has to fit is the buffers of every rank sharing the cache, not one
// rank's: 4 ranks of a 4 MB AlltoAll touch 4 x (4 + 4) MB, or 4 x 4 MB in
// place.  So an output streams once the ranks sharing this cache touch more
// bytes than it holds.  Measured on this project's 2-core VM (one 32 MB L3),
// out of place, us, through the cache -> streamed (perf/results/
// compare_20261125k.txt).  The executor (plain buffers), 4 alternating rounds:
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
// stayed cached.)  The direct path (registered windows, -R 2), 2 rounds:
//   2 ranks, 8 MB (24 MB touched): AllGather 204-244 -> 400-423, Broadcast
//     249-380 -> 415-474; 16 MB (48-64 MB): AllGather 835-1381 -> 806-933,
//     AlltoAll 1325-1656 -> 1094-1175, AllReduce 1524-1951 -> 1116-1211
//   4 ranks, 8 MB: AllGather 934-1036 -> 871-872, AlltoAll 1434-1530 ->
//     1129-1151
// (Before, the executor streamed outputs of 32 MB or more, the direct path
// those of 8 MB or more.)
// In place the same rule holds with the shared buffer counted once.  There
// streaming lost where the buffers just fill the cache (2 ranks, 16 MB in
// place, 32 MB touched, on the executor: AlltoAll 362-381 us through the
// cache, 861-939 streamed, AllReduce 803-867 against 1198-1524; on the
// direct path AllGather 8 MB, 16 MB touched, 80-109 against 202-218) and
// won where they overflow it (direct path, 4 ranks, AllGather 16 MB in
// place, 64 MB touched: 1218-1381 streamed against 1624-2413).
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

// Read from sysfs (its size overridden by BRAID_LLC_BYTES when set); a
// 32 MB cache shared by every rank where it cannot be read.
CacheShare cache_share(int ranks_on_host);

// The most last-level cache one CPU is counted to have.  A VM reports its
// host's cache as its own: this project's 2-vCPU VM of 2026-11-26 reads a
// 480 MB L3 in sysfs, but behaves as if ~100 MB were its own.  2 ranks, out
// of place, us, counting the cache as 480 MB -> 96 MB (2 alternating rounds,
// perf/results/llc_cap_20261126.txt): AllReduce 32 MB (128 MB touched)
// 6306-6992 -> 5686-5761, 64 MB 15.5-16.2 ms -> 12.6-12.9; AllGather 128 MB
// (384 MB) 23.5-23.9 ms -> 18.4-18.6, Broadcast 128 MB 28.1-28.6 ms ->
// 23.5-23.9; while AllGather and Broadcast of 32 MB (96 MB touched) were
// 20-50% and 8% faster through the cache, which this cap keeps.  (In place,
// 2 x 64-128 MB touched, AllReduce and AlltoAll lost 5-33% streamed.)  No
// CPU has more than 24 MB of L3 per hardware thread (AMD's 16-core
// cache-stacked EPYC: 768 MB for 32 threads), so real caches are left alone.
constexpr uint64_t kMaxCacheBytesPerCpu = uint64_t(48) << 20;

// The same from given facts: the cache's size (capped at
// kMaxCacheBytesPerCpu for each CPU sharing it) and how many of the host's
// `host_cpus` CPUs share it.
CacheShare cache_share(uint64_t cache_bytes, int cache_cpus, int host_cpus, int ranks_on_host);

// Number of CPUs in a sysfs CPU list ("0-3,8,10-11"); 0 if it does not parse.
int cpu_list_count(const std::string& list);

// Bytes one rank's buffers span, averaged over the ranks (a Broadcast root's
// input, a Reduce root's output count once), for blocks of `block_bytes`
// (the call's count times the element size): input plus output, or in place
// the larger of the two.
uint64_t mean_rank_bytes(Collective c, int nranks, uint64_t block_bytes, bool in_place);

// Whether a call's user outputs are written with streaming stores: once the
// ranks sharing the cache overflow it, except in place where the rank read
// every byte of its output as input in the same call (AllReduce, Reduce,
// ReduceScatter, AlltoAll).  There a streamed store saves no read: the line
// was read anyway, and often still cached.  Measured on the 480 MB-L3 VM,
// 2 ranks in place, cached against streamed (perf/results/llc_cap_20261126.txt):
// AlltoAll 64 MB 4.6-4.8 ms against 6.9-7.9, 256 MB 22.9-23.7 against
// 27.5-28.1; AllReduce 64 MB 10.9 against 11.7-12.3, 256 MB level; on the
// 32 MB-L3 VM before, AllReduce and AlltoAll of 16 MB in place lost too.
bool should_stream_output(const CacheShare& share, Collective c, int nranks, uint64_t block_bytes, bool in_place);

}  // namespace braid

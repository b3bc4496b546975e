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
// out of place, through the cache against streamed (perf/results/
// compare_20261125k.txt, sections 1 and 4): on the executor (plain buffers)
// and on the direct path (registered windows) streaming won where the
// touched bytes overflow the cache, and lost or tied where they fit; the
// executor's AllReduce just past the cache came out level.  An earlier run
// had 2-rank AllGather at 16 MB the other way (compare_20261123_session6.txt):
// this host's spread is wide, and those calls then stayed cached.  Before,
// the executor streamed outputs of 32 MB or more, the direct path those of
// 8 MB or more.
// In place the same rule holds with the shared buffer counted once: there
// streaming lost where the buffers just fill the cache and won where they
// overflow it (same file, sections 1 and 4).
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
// 480 MB L3 in sysfs, but behaves as if only a fraction of it were its own.
// With 2 ranks, counting the cache as this cap allows instead of sysfs's
// size made large out-of-place AllReduce, AllGather and Broadcast faster
// (streamed), while the 32 MB AllGather and Broadcast, faster through the
// cache, stay cached under the cap; in place, large AllReduce and AlltoAll
// lost streamed (perf/results/llc_cap_20261126.txt).  No CPU has more
// than 24 MB of L3 per hardware thread (AMD's 16-core cache-stacked EPYC:
// 768 MB for 32 threads), so real caches are left alone.
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
// 2 ranks in place, streaming never won for AllReduce, AlltoAll or
// ReduceScatter (perf/results/llc_cap_20261126.txt, sections C and D);
// on the 32 MB-L3 VM before, AllReduce and AlltoAll of 16 MB in place
// lost too (compare_20261125k.txt section 1).
bool should_stream_output(const CacheShare& share, Collective c, int nranks, uint64_t block_bytes, bool in_place);

}  // namespace braid

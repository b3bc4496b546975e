// See output_stores.h for the rule and the measurements behind it.
#include "src/plan/output_stores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "braid/chunking.h"
#include "src/base/env.h"

namespace braid {

int cpu_list_count(const std::string& list) {
  int count = 0;
  std::stringstream ranges(list);
  std::string range;
  while (std::getline(ranges, range, ',')) {
    if (range.empty() || range == "\n") continue;
    char* end = nullptr;
    long lo = std::strtol(range.c_str(), &end, 10), hi = lo;
    if (end == range.c_str() || lo < 0) return 0;
    if (*end == '-') {
      const char* from = end + 1;
      hi = std::strtol(from, &end, 10);
      if (end == from || hi < lo) return 0;
    }
    if (*end != '\0' && *end != '\n') return 0;
    count += int(hi - lo + 1);
  }
  return count;
}

CacheShare cache_share(uint64_t cache_bytes, int cache_cpus, int host_cpus, int ranks_on_host) {
  CacheShare share;
  if (cache_bytes) share.bytes = cache_bytes;
  if (cache_cpus > 0) share.bytes = std::min<uint64_t>(share.bytes, uint64_t(cache_cpus) * kMaxCacheBytesPerCpu);
  ranks_on_host = std::max(1, ranks_on_host);
  if (cache_cpus <= 0 || host_cpus <= 0 || cache_cpus >= host_cpus) {
    share.ranks = ranks_on_host;
  } else {  // ranks spread evenly: ceil(ranks x the cache's share of the CPUs)
    const int64_t sharing = (int64_t(ranks_on_host) * cache_cpus + host_cpus - 1) / host_cpus;
    share.ranks = int(std::clamp<int64_t>(sharing, 1, ranks_on_host));
  }
  return share;
}

CacheShare cache_share(int ranks_on_host) {
  const int cpu = std::max(0, sched_getcpu());
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index";
  int best_level = 0;
  uint64_t bytes = 0;
  int cpus = 0;
  for (int index = 0; index < 16; ++index) {
    int level = 0;
    std::string size, list;
    if (!(std::ifstream(dir + std::to_string(index) + "/level") >> level)) break;
    std::ifstream(dir + std::to_string(index) + "/size") >> size;
    std::ifstream(dir + std::to_string(index) + "/shared_cpu_list") >> list;
    char* unit = nullptr;
    uint64_t value = std::strtoull(size.c_str(), &unit, 10);
    if (*unit == 'K') value <<= 10;
    else if (*unit == 'M') value <<= 20;
    if (level > best_level && value) {
      best_level = level;
      bytes = value;
      cpus = cpu_list_count(list);
    }
  }
  CacheShare share = cache_share(bytes, cpus, int(sysconf(_SC_NPROCESSORS_ONLN)), ranks_on_host);
  // The user (or a test) may know better than sysfs, either way.
  if (const int64_t forced = env_int("BRAID_LLC_BYTES"); forced > 0) share.bytes = uint64_t(forced);
  return share;
}

uint64_t mean_rank_bytes(Collective c, int nranks, uint64_t block_bytes, bool in_place) {
  const uint64_t n = uint64_t(std::max(1, nranks));
  const uint64_t in = input_blocks(c, nranks) * block_bytes, out = output_blocks(c, nranks) * block_bytes;
  auto spans = [&](bool has_input, bool has_output) {
    const uint64_t i = has_input ? in : 0, o = has_output ? out : 0;
    return in_place ? std::max(i, o) : i + o;
  };
  const uint64_t root = spans(true, true), others = spans(!rooted_input(c), !rooted_output(c));
  return (root + (n - 1) * others) / n;
}

bool should_stream_output(const CacheShare& share, Collective c, int nranks, uint64_t block_bytes, bool in_place) {
  const bool output_was_input = c == Collective::AllReduce || c == Collective::Reduce ||
                                c == Collective::ReduceScatter || c == Collective::AlltoAll;
  if (in_place && output_was_input) return false;
  return uint64_t(share.ranks) * mean_rank_bytes(c, nranks, block_bytes, in_place) > share.bytes;
}

}  // namespace braid

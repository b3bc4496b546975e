#include "perf/memory_cap.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "perf/device.h"

namespace perf {
namespace {

constexpr size_t kGiB = size_t(1) << 30;

// What nccl-tests leaves free of `total`: 1 GiB per 16 GiB (at most 4 GiB),
// and 1 GiB for the library's own allocations.  Half of a small memory.
size_t usable(size_t total) {
  const size_t reserve = std::min((total + 16 * kGiB - 1) / (16 * kGiB) * kGiB, 4 * kGiB) + kGiB;
  return total > 2 * reserve ? total - reserve : total / 2;
}

size_t host_available() {
  if (const char* text = std::getenv("BRAID_PERF_HOST_MEMORY")) {
    size_t bytes = 0;
    if (parse_size(text, &bytes)) return bytes;
    std::fprintf(stderr, "perf: BRAID_PERF_HOST_MEMORY=%s is not a size; ignored\n", text);
  }
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return size_t(kib) * 1024;
  }
  return size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
}

// This host, as nccl-tests tells hosts apart: its name and boot id.
double host_key() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string key = name;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char id[64] = {};
    if (std::fgets(id, sizeof id, f)) key += id;
    std::fclose(f);
  }
  return double(std::hash<std::string>{}(key) >> 12);  // 52 bits: exact in a double
}

// How many processes run on this host: one round of reductions per host.
int processes_here(World& world) {
  const double mine = host_key();
  bool counted = false;
  int here = 1;
  for (;;) {
    const double next = world.min(counted ? 1e300 : mine);
    if (next == 1e300) return here;
    const int on_next = int(world.sum(!counted && mine == next ? 1 : 0));
    if (mine == next) {
      here = on_next;
      counted = true;
    }
  }
}

}  // namespace

size_t memory_max_bytes(const Options& o, World& world) {
  const size_t pad = 8 * size_t(o.unalign);
  const size_t ranks_here = size_t(o.threads) * size_t(processes_here(world));
  size_t limit = usable(host_available()) / (2 * ranks_here);
  if (device_buffers()) limit = std::min(limit, usable(device_total_memory()) / (2 * size_t(o.threads)));
  limit = limit > pad ? limit - pad : 0;
  return size_t(world.min(double(limit)));
}

}  // namespace perf

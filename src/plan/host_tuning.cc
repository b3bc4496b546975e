// AllReduce algorithm choice by size on the host backend.
//
// Model (per rank, m = per-rank bytes, p = largest power of two <= n,
// L = log2 p, plus 2 fold steps when n is not a power of two):
//   recursive doubling  L' (alpha + (beta + gamma) m)        every step moves
//                        and reduces the whole buffer
//   ring                2(n-1) alpha + 2(n-1)/n beta m + (n-1)/n gamma m
// alpha: one dependent step (a fragment handed to a peer and picked up),
// beta: bytes moved through shared memory, gamma: bytes reduced.  rd wins
// below m* = alpha (2(n-1) - L') / ((L' - 2(n-1)/n) beta + (L' - (n-1)/n) gamma).
//
// Constants (kAlphaNs and the rest below), from this project's 2-core VM
// (perf/compare): alpha is what a 2-rank 8 B allreduce (one rd step) takes
// with a core per rank (perf/results/allreduce_vs_mpi.txt); with 4 ranks
// on 2 cores a small allreduce takes far longer per step, each step
// waiting for the peer to be scheduled; beta = gamma from the rate at
// which one rank copies and reduces.  This gives m* ~30 KiB for 2 and 4
// ranks with a core each (the 32 KiB the planner used before, now
// derived); the same when oversubscribed (see kAlphaOversubscribedNs).
//
// Exchanging with all peers at once (direct AllGather and AlltoAll, one
// lane per peer) against ring or pairwise order: the same bytes cross, but
// a ring or pairwise step waits for one particular peer.  With a core per
// rank that wait is short; with more ranks than cores the named peer is
// often descheduled (the long oversubscribed step above), and a rank that
// can take whichever peer's data is there gets on.  Direct AllGather pays
// for it by reading its input once per peer ((n-2) m more than ring, from
// cache while it fits), so it wins below m ~ (that step) / beta, where
// kDirectAllGatherMaxBytes sits; direct AlltoAll reads every block once,
// like pairwise, and has no such cost.  Measured with 4 ranks on 2 cores,
// 3 alternating runs each, pairwise/ring against direct: AlltoAll direct
// faster up to 4 MB (the perf tools' whole buffer) and within the noise
// above; AllGather direct faster up to 128 KiB per rank, ring above.
// With a core per rank (2 ranks here: the two orders are the same schedule)
// the established orders stay.
#include "src/plan/host_tuning.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "braid/verify.h"

namespace braid {
namespace {

// Oversubscribed alpha is NOT raised: with 4 ranks on 2 cores, rd at 8-256
// KiB was slower than ring at 512 KiB (perf/results/compare_20261122.txt,
// part 1): rd's full-buffer steps cost more than ring's extra hand-overs
// there.
constexpr double kAlphaNs = 1500, kAlphaOversubscribedNs = 1500;
constexpr double kBetaNsPerByte = 0.1, kGammaNsPerByte = 0.1;

}  // namespace

// CPUs online (or this process's affinity if wider): mpirun binds each of
// 2 ranks to its own core, which is not oversubscription.
int host_usable_cores() {
  static const int cores = [] {
    cpu_set_t set;
    int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return std::max({1, mine, int(sysconf(_SC_NPROCESSORS_ONLN))});
  }();
  return cores;
}

uint64_t host_allreduce_rd_max_bytes(int nranks, bool oversubscribed) {
  if (nranks <= 1) return UINT64_MAX;
  int p = 1, log_p = 0;
  while (p * 2 <= nranks) {
    p *= 2;
    ++log_p;
  }
  const double n = nranks;
  const double rd_steps = log_p + (p == nranks ? 0 : 2);
  const double ring_steps = 2 * (n - 1);
  const double alpha = oversubscribed ? kAlphaOversubscribedNs : kAlphaNs;
  const double extra_per_byte =
      (rd_steps - 2 * (n - 1) / n) * kBetaNsPerByte + (rd_steps - (n - 1) / n) * kGammaNsPerByte;
  if (ring_steps <= rd_steps) return 0;          // rd saves no step: ring everywhere
  if (extra_per_byte <= 0) return UINT64_MAX;    // rd moves no more bytes: rd everywhere
  return uint64_t(alpha * (ring_steps - rd_steps) / extra_per_byte);
}

uint64_t host_allreduce_rd_max_bytes(int nranks) {
  return host_allreduce_rd_max_bytes(nranks, nranks > host_usable_cores());
}

// Measured with 4 ranks on the 2-core VM, AlltoAll 4 MB (1 MB per peer),
// vCPUs near: a 2-slot ring was much faster than 8 slots per connection,
// while keeping only 2 of the 8 in flight (a window) was not
// (perf/results/compare_20261125l.txt section 1).  What helps is the
// memory the fragments cycle through, not how many are in flight.
int slots_per_connection(int slots, int connections) {
  return std::max(kMinSlots, slots / std::max(1, connections));
}

uint64_t call_tile_bytes(uint64_t base, uint64_t wide, uint64_t min_chunk_bytes) {
  return wide > base && min_chunk_bytes / kWideTileMinTiles >= wide ? wide : base;
}

HostTuning local_host_tuning(int nranks) {
  return HostTuning{host_allreduce_rd_max_bytes(nranks), nranks > host_usable_cores()};
}

HostTuning agree_host_tuning(const std::vector<HostTuningReport>& reports) {
  HostTuning t{UINT64_MAX, false};
  std::map<uint64_t, int> ranks_on_host;
  for (const HostTuningReport& r : reports) {
    t.rd_max_bytes = std::min(t.rd_max_bytes, r.rd_max_bytes);
    ranks_on_host[r.host]++;
  }
  for (const HostTuningReport& r : reports) t.oversubscribed |= ranks_on_host[r.host] > r.cores;
  t.several_hosts = ranks_on_host.size() > 1;
  return t;
}

}  // namespace braid

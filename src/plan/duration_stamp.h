// One rank's entry on the StragglAR duration board (duration_board.h), and
// what a rank's device writes into it around a tracked AllReduce.  Written
// once, for the CUDA kernels (kernels.cu) and for host producers (the
// tests), so the host tests exercise exactly the device's protocol.
//
// Protocol, per entry: the arrival stamp goes into start_ns as the call
// begins on the device (its clock: %globaltimer, which needs no sync with
// any other rank's), the duration into duration_ns when the call has
// completed there, and only then seq = call + 1, behind a system-scope
// fence, so a host that reads seq first reads the duration it publishes.
#pragma once

#include <cstdint>

#include "braid/hd.h"

namespace braid {

struct DurationEntry {
  uint64_t seq;         // tracked call number + 1 once duration_ns is final (0: nothing yet)
  uint64_t start_ns;    // the call began on this rank's device (its own clock)
  int64_t duration_ns;  // from start_ns to the call's completion on this rank
  uint64_t unused;      // pads to 32 bytes: no entry straddles a cache line
};

BRAID_HD void stamp_arrival(DurationEntry* e, uint64_t now_ns) {
#if defined(__CUDA_ARCH__)
  *(volatile uint64_t*)&e->start_ns = now_ns;
#else
  __atomic_store_n(&e->start_ns, now_ns, __ATOMIC_RELAXED);
#endif
}

BRAID_HD void stamp_completion(DurationEntry* e, uint64_t call, uint64_t now_ns) {
#if defined(__CUDA_ARCH__)
  const uint64_t start = *(volatile uint64_t*)&e->start_ns;
  *(volatile int64_t*)&e->duration_ns = int64_t(now_ns - start);
  __threadfence_system();
  *(volatile uint64_t*)&e->seq = call + 1;
  __threadfence_system();
#else
  const uint64_t start = __atomic_load_n(&e->start_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&e->duration_ns, int64_t(now_ns - start), __ATOMIC_RELAXED);
  __atomic_store_n(&e->seq, call + 1, __ATOMIC_RELEASE);
#endif
}

}  // namespace braid

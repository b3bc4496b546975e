// Which way a copy collective (AllGather, AlltoAll, Broadcast) on plain
// buffers moves its data between processes on one host: through the shared-
// memory slots of its schedule (every byte copied in by the sender and out
// by the receiver), or pulled by each receiver straight out of the senders'
// buffers with cross-memory attach (one kernel copy; src/core/cross_memory.h).
//
// Neither wins everywhere, and which one does depends on where the ranks'
// cores sit, which can change while the job runs.  Measured on this
// project's 2-core VM, 2-rank AllGather, best of 20 (core round trip from
// perf/core_probe):
//                         cores near (~55 ns)     cores far (~340 ns)
//   1 MB  slots / pull        41 / 53 us            128 / 91 us
//   4 MB                     183 / 205             568 / 342
//   16 MB                   1544 / 1900           4062 / 2396
// Near, the slots win by 15-25% (a user-space copy of data hot in a
// neighbour's cache beats the kernel's page-pinning copy); far, every slot
// line crosses the slow link twice (the receiver's read, then the sender's
// next write invalidating it) and pulling wins 1.4-2x, 4x when the inputs
// did not change since the last call (a benchmark loop).  The host moves
// this VM's cores between the two states every few seconds.
//
// So the choice is measured, per collective and size class (powers of
// two): each path is timed twice first (the first call on a path pays for
// cold pages and caches); then every call's duration on the faster path
// feeds its moving average, and the slower path is timed again once the
// calls on the faster one since its last sample add up to kExploreBudget
// times the gap between the two (and at least kMinCallsBetweenChecks calls
// went by).  A recheck costs at most the gap, so rechecking spends about
// 1/kExploreBudget of the time, whatever the sizes and call rates; a change
// of placement is noticed within about kExploreBudget gaps.  Rank 0
// chooses and its choice travels in its descriptor, so every rank takes
// the same path.
#pragma once

#include <array>
#include <cstdint>

#include "braid/schedule.h"

namespace braid {

enum class CopyPath : uint8_t { Slots = 0, Pull = 1 };

class CopyPathChooser {
 public:
  static constexpr double kExploreBudget = 20;  // rechecks cost ~5% at most
  static constexpr uint32_t kMinCallsBetweenChecks = 4;

  // The path for a call of `c` moving `bytes` (its larger buffer).
  CopyPath choose(Collective c, uint64_t bytes) const;
  // A call that took `us` on `path`.
  void record(Collective c, uint64_t bytes, CopyPath path, double us);

 private:
  struct Estimate {
    double us = 0;
    uint32_t samples = 0;
  };
  struct SizeClass {
    Estimate path[2];
    CopyPath best = CopyPath::Slots;
    double us_since_check = 0;  // on `best`, since the other path was last timed
    uint32_t calls_since_check = 0;
  };
  static constexpr int kCollectives = int(Collective::Custom);
  static size_t log2_class(uint64_t bytes) { return bytes ? size_t(63 - __builtin_clzll(bytes)) : 0; }
  std::array<std::array<SizeClass, 64>, kCollectives> classes_{};
};

}  // namespace braid

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
// two).  A class's first calls time each path twice (the first call on a
// path pays for cold pages and caches and does not count), unless the
// class next to it is measured already: then its estimates, scaled by the
// size, stand in (a sweep over sizes does not pay the warm-up at every
// size).  From then on every call's duration on the faster path feeds its
// moving average, and the slower path is timed again once the calls on
// the faster one since its last sample add up to kExploreBudget times the
// gap between the two (and at least kMinCallsBetweenChecks calls went by).
// A recheck costs at most the gap, so rechecking spends about
// 1/kExploreBudget of the time, whatever the sizes and call rates; a change
// of placement is noticed within about kExploreBudget gaps.
//
// Rank 0 chooses and its choice travels in its descriptor, so every rank
// takes the same path.  Pulling needs that exchange on every call (peers
// must know where to read), the slots do not: when the slots are chosen,
// the choice comes with a lease, the number of following calls of the
// class that run on the slots without exchanging anything (as many as
// there are until the next recheck is due).
#pragma once

#include <array>
#include <cstdint>

#include "braid/schedule.h"

namespace braid {

enum class CopyPath : uint8_t { Slots = 0, Pull = 1 };

// The size class of a call whose larger buffer is `bytes`: its power of two.
inline int copy_size_class(uint64_t bytes) { return bytes ? 63 - __builtin_clzll(bytes) : 0; }
constexpr int kCopySizeClasses = 64;

// Per collective and size class, how many more calls take the slots
// without an exchange (the same on every rank: all make the same calls).
struct SlotLeases {
  uint32_t remaining[int(Collective::Custom)][kCopySizeClasses] = {};
};

struct CopyChoice {
  CopyPath path = CopyPath::Slots;
  uint32_t lease = 0;  // Slots: this many following calls of the class take the slots unasked
};

class CopyPathChooser {
 public:
  static constexpr double kExploreBudget = 20;  // rechecks cost ~5% at most
  static constexpr uint32_t kMinCallsBetweenChecks = 4;
  static constexpr uint32_t kMaxLease = 256;  // so a class is looked at again now and then

  // The path for a call of `c` moving `bytes` (its larger buffer).
  CopyChoice choose(Collective c, uint64_t bytes);
  // A call that took `us` on `path`.
  void record(Collective c, uint64_t bytes, CopyPath path, double us);
  // A call that ran on the slots under a lease (not timed).
  void leased_call(Collective c, uint64_t bytes);

 private:
  struct Estimate {
    double us = 0;
    uint32_t samples = 0;  // real ones
    bool known = false;    // `us` means something: a warm sample, or a neighbour's estimate
  };
  struct SizeClass {
    Estimate path[2];
    CopyPath best = CopyPath::Slots;
    double us_since_check = 0;  // on `best`, since the other path was last timed
    uint32_t calls_since_check = 0;
  };
  static constexpr int kCollectives = int(Collective::Custom);
  SizeClass& size_class(Collective c, uint64_t bytes);
  std::array<std::array<SizeClass, kCopySizeClasses>, kCollectives> classes_{};
};

}  // namespace braid

// Which way a copy collective (AllGather, AlltoAll, Broadcast) on plain
// buffers moves its data between processes on one host: through the shared-
// memory slots of its schedule (every byte copied in by the sender and out
// by the receiver), or pulled by each receiver straight out of the senders'
// buffers with cross-memory attach (one kernel copy; src/core/cross_memory.h).
//
// Neither wins everywhere, and which one does depends on where the ranks'
// cores sit, which can change while the job runs.  Measured on this
// project's 2-core VM with perf/copy_path_probe (2-process AllGather, best
// of 20 calls, rounds tagged by the core-to-core round trip; the runs are
// in perf/results/compare_20261125.txt), slots / pull in us:
//                       cores near (~60 ns)     cores far (~210-350 ns)
//   1 MB                     41 / 52                    -
//   4 MB                    196 / 203        645 / 366 (fresh inputs), 1004 / 206 (reused)
//   16 MB                  1760 / 1915       3939 / 2279 (fresh),      4920 / 2162 (reused)
// Near, the slots win by 4-23% (a user-space copy of data hot in a
// neighbour's cache beats the kernel's page-pinning copy); far, every slot
// line crosses the slow link twice (the receiver's read, then the sender's
// next write invalidating it) and pulling wins 1.7x, 2-5x when the inputs
// did not change since the last call (a benchmark loop).  The host moves
// this VM's cores between the two states every few seconds.
//
// With more ranks than cores the slots won or tied everywhere, near or far: out-of-
// place us, slots / pull, -n 40 -w 5 (3 ranks at 384K / 1.5M / 6M; 4 ranks
// at 512K / 2M / 8M), perf/results/compare_20261125b.txt:
//   3 ranks   AlltoAll  24 / 45    99 / 185    739 / 1101
//             AllGather 23 / 46    80 / 178    438 / 702
//             Broadcast 35 / 85   136 / 293    541 / 856
//   4 ranks   AlltoAll  42 / 71   243 / 252   1830 / 1795
//             AllGather 48 / 73   202 / 259    869 / 1160
//             Broadcast 28 / 82   125 / 314    909 / 1596
// Every rank that waits there waits for a peer to be scheduled, whichever
// path it is on, and pulling adds the kernel's page pinning to each copy.
// So BRAID_CMA=auto pulls only where every rank has a core (the agreed
// HostTuning::oversubscribed); BRAID_CMA=on still pulls everywhere.
//
// Where it may pull, the choice is measured, per collective and size class
// (powers of two).  A path's estimate is the faster of its last two calls: calls are
// slowed down (a first call faulting its buffers in, a preemption) far more
// often than sped up, and rarely twice in a row; a longer window would keep
// a time from before the placement changed.  Until a class has kTrusted
// calls on a path of its own, a neighbouring class that has them speaks
// for it (its estimate scaled by the size), and lends it how sure it is
// (how many calls it goes between rechecks): a sweep over sizes, or a mix
// of sizes, does not explore afresh at every size.  The faster path is
// taken; the slower is timed again after a number of calls that starts at
// 1 and doubles each time a recheck confirms the choice, up to as many
// calls as add up to kExploreBudget times the gap between the two.  A
// recheck costs the gap, so in a steady state rechecking spends about
// 1/kExploreBudget of the time, whatever the sizes and call rates; the
// doubling from 1 corrects a first estimate that was wrong (a path first
// timed while the buffers were still being faulted in looks several times
// slower than it is), and a change of placement is noticed within about
// kExploreBudget gaps.
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
  static constexpr uint32_t kMaxCallsBetweenChecks = 1024;
  static constexpr uint32_t kTrusted = 3;  // calls on a path before a class's own estimate counts

  // The path for a call of `c` moving `bytes` (its larger buffer).
  CopyChoice choose(Collective c, uint64_t bytes);
  // A call that took `us` on `path`.
  void record(Collective c, uint64_t bytes, CopyPath path, double us);
  // A call that ran on the slots under a lease (not timed).
  void leased_call(Collective c, uint64_t bytes);

 private:
  struct Estimate {
    double recent[2] = {};  // the last two calls' times
    uint32_t count = 0;     // calls timed, ever
    double us() const { return count > 1 && recent[1] < recent[0] ? recent[1] : recent[0]; }
    void add(double us) { recent[count++ % 2] = us; }
  };
  struct SizeClass {
    Estimate path[2];
    uint32_t calls_since_check = 0;  // on the faster path, since the slower was last timed
    uint32_t check_every = 1;        // doubles while rechecks confirm the choice
  };
  using Classes = std::array<SizeClass, kCopySizeClasses>;
  // What is known of class k: estimates of both paths (own, or a trusted
  // neighbour's) and how often to recheck; false while a path is unknown
  // (v->best is then that path).
  struct View {
    double us[2] = {};
    CopyPath best = CopyPath::Slots;
    uint32_t check_every = 1;
  };
  static bool view(const Classes& classes, int k, View* v);
  static uint32_t calls_between_checks(const View& v);
  std::array<Classes, int(Collective::Custom)> classes_{};
};

}  // namespace braid

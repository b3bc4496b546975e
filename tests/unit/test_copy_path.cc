// The copy-path chooser (src/plan/copy_path.h): time both paths, take the
// faster, time the other again at a cost bounded by the gap between them.
#include <catch2/catch.hpp>

#include "src/plan/copy_path.h"

using braid::Collective;
using braid::CopyPath;
using braid::CopyPathChooser;

namespace {
constexpr uint64_t kMB = 1 << 20;

// `calls` calls on whatever is chosen, each taking `slots_us` or `pull_us`;
// returns how many pulled.
int run(CopyPathChooser& c, int calls, double slots_us, double pull_us, uint64_t bytes = kMB,
        Collective coll = Collective::AllGather) {
  int pulled = 0;
  for (int i = 0; i < calls; ++i) {
    CopyPath p = c.choose(coll, bytes);
    pulled += p == CopyPath::Pull;
    c.record(coll, bytes, p, p == CopyPath::Pull ? pull_us : slots_us);
  }
  return pulled;
}
}  // namespace

TEST_CASE("copy path: each path is timed twice, the first (cold) time does not count", "[unit][copy_path]") {
  CopyPathChooser c;
  const Collective ag = Collective::AllGather;
  CHECK(c.choose(ag, kMB) == CopyPath::Slots);
  c.record(ag, kMB, CopyPath::Slots, 500);  // cold: pages and caches
  CHECK(c.choose(ag, kMB) == CopyPath::Slots);
  c.record(ag, kMB, CopyPath::Slots, 40);
  CHECK(c.choose(ag, kMB) == CopyPath::Pull);
  c.record(ag, kMB, CopyPath::Pull, 300);
  CHECK(c.choose(ag, kMB) == CopyPath::Pull);
  c.record(ag, kMB, CopyPath::Pull, 60);
  CHECK(c.choose(ag, kMB) == CopyPath::Slots);  // 40 < 60
}

TEST_CASE("copy path: the faster path is kept, the slower timed again at ~1/20 of the time", "[unit][copy_path]") {
  CopyPathChooser c;
  run(c, 4, 100, 60);  // warm-up: pull is faster
  // Gap 40 us: a recheck after 20 x 40 us = 800 us of pulls (~14 calls),
  // each costing the gap: ~5% of the time.
  int pulled = run(c, 1500, 100, 60);
  CHECK(pulled >= 1390);
  CHECK(pulled <= 1420);
  CHECK((1500 - pulled) * 40.0 <= 0.055 * pulled * 60);
  // The same with the slots faster: gap 20 us, a recheck every ~11 calls.
  CopyPathChooser d;
  run(d, 4, 40, 60);
  const int rechecks = run(d, 1500, 40, 60);
  CHECK(rechecks >= 100);
  CHECK(rechecks * 20.0 <= 0.055 * (1500 - rechecks) * 40);
}

TEST_CASE("copy path: a change of which path is faster is followed within ~20 gaps", "[unit][copy_path]") {
  CopyPathChooser c;
  run(c, 4, 100, 60);
  run(c, 200, 100, 60);
  // The cores move: the slots become faster.  The next recheck of the slots
  // (within ~14 calls) finds it, and from then on the slots are taken.
  int pulled = run(c, 30, 30, 60);
  CHECK(pulled <= 15);
  CHECK(c.choose(Collective::AllGather, kMB) == CopyPath::Slots);
  // And back: pull faster again, noticed after ~20 x 30 us of slots.
  run(c, 40, 100, 60);
  CHECK(c.choose(Collective::AllGather, kMB) == CopyPath::Pull);
}

TEST_CASE("copy path: collectives and size classes are timed apart", "[unit][copy_path]") {
  CopyPathChooser c;
  run(c, 10, 100, 50, kMB, Collective::AllGather);
  run(c, 10, 50, 100, 4 * kMB, Collective::AllGather);
  run(c, 10, 50, 100, kMB, Collective::Broadcast);
  CHECK(c.choose(Collective::AllGather, kMB + 5) == CopyPath::Pull);  // same class as 1 MB
  CHECK(c.choose(Collective::AllGather, 4 * kMB) == CopyPath::Slots);
  CHECK(c.choose(Collective::Broadcast, kMB) == CopyPath::Slots);
  CHECK(c.choose(Collective::AlltoAll, kMB) == CopyPath::Slots);  // never timed: the slots first
}

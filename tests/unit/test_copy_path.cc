// The copy-path chooser (src/plan/copy_path.h): time both paths, take the
// faster, time the other again at a cost bounded by the gap between them,
// and lease the slots for the calls in between.
#include <catch2/catch.hpp>

#include "src/plan/copy_path.h"

using braid::Collective;
using braid::CopyChoice;
using braid::CopyPath;
using braid::CopyPathChooser;

namespace {
constexpr uint64_t kMB = 1 << 20;

struct Tally {
  int pulled = 0, slots = 0, leased = 0;
};

// `calls` calls as the direct path makes them: a choice, then the call on
// that path taking `slots_us` or `pull_us`, then the leased calls (untimed).
Tally run(CopyPathChooser& c, int calls, double slots_us, double pull_us, uint64_t bytes = kMB,
          Collective coll = Collective::AllGather) {
  Tally t;
  for (int i = 0; i < calls; ++i) {
    CopyChoice choice = c.choose(coll, bytes);
    (choice.option == CopyPath::Pull ? t.pulled : t.slots)++;
    c.record(coll, bytes, choice.option, choice.option == CopyPath::Pull ? pull_us : slots_us);
    for (uint32_t l = 0; l < choice.lease && i + 1 < calls; ++l, ++i) {
      c.leased_call(coll, bytes);
      ++t.leased;
    }
  }
  return t;
}
}  // namespace

TEST_CASE("copy path: a first call untimed, each way timed twice (the slots first), then the faster, a cold time "
          "outvoted",
          "[unit][copy_path]") {
  CopyPathChooser c;
  const Collective ag = Collective::AllGather;
  CHECK(c.choose(ag, kMB).option == CopyPath::Slots);
  c.record(ag, kMB, CopyPath::Slots, 4000);  // the class's first call: not timed
  CopyChoice again = c.choose(ag, kMB);
  CHECK(again.option == CopyPath::Slots);  // still nothing known of the slots
  CHECK(again.lease == 0);
  c.record(ag, kMB, CopyPath::Slots, 500);  // cold: pages and caches
  CHECK(c.choose(ag, kMB).option == CopyPath::Slots);  // one call is not enough to go by
  c.record(ag, kMB, CopyPath::Slots, 40);
  CHECK(c.choose(ag, kMB).option == CopyPath::Pull);
  c.record(ag, kMB, CopyPath::Pull, 300);  // cold too
  CopyChoice next = c.choose(ag, kMB);
  CHECK(next.option == CopyPath::Pull);
  CHECK(next.lease == 0);  // pulls are never leased
  c.record(ag, kMB, CopyPath::Pull, 60);
  CopyChoice settled = c.choose(ag, kMB);
  CHECK(settled.option == CopyPath::Slots);  // 40 < 60, each the faster of its two calls
  // Rechecked after 20 x (60 - 40) us of slots: 10 calls, this one and 9 leased.
  CHECK(settled.lease == 9);
}

TEST_CASE("copy path: a chooser with a cold way sends a new class's untimed first call there", "[unit][copy_path]") {
  CopyPathChooser c(CopyPathChooser::kDefaultWindow, CopyPath::Pull);
  const Collective ag = Collective::AllGather;
  CHECK(c.choose(ag, kMB).option == CopyPath::Pull);
  c.record(ag, kMB, CopyPath::Pull, 900);  // the first read of the buffers: not timed
  // Then as without: the slots timed first, twice, then pull, twice.
  Tally t = run(c, 4, 100, 50);
  CHECK(t.slots == 2);
  CHECK(t.pulled == 2);
  CHECK(c.choose(ag, kMB).option == CopyPath::Pull);
  // A class a neighbour speaks for is not new: its first call takes the word.
  run(c, 10, 50, 100, 8 * kMB);  // 8 MB: the slots faster
  CHECK(c.choose(ag, 16 * kMB).option == CopyPath::Slots);
}

TEST_CASE("copy path: in a steady state the slots are leased for 20 gaps' worth of calls", "[unit][copy_path]") {
  CopyPathChooser c;
  run(c, 100, 40, 60);
  // 20 x (60 - 40) us of slots is 10 calls: this one and 9 leased.
  CopyChoice next = c.choose(Collective::AllGather, kMB);
  CHECK(next.option == CopyPath::Slots);
  CHECK(next.lease + 1 <= 10);
  // Per 11 calls: a recheck of pull, one exchanged call on the slots, 9 leased.
  Tally t = run(c, 1000, 40, 60);
  CHECK(t.leased >= 780);
}

TEST_CASE("copy path: the faster path is kept, the slower timed again at ~1/20 of the time", "[unit][copy_path]") {
  CopyPathChooser c;
  run(c, 4, 100, 60);  // warm-up: pull is faster
  // Gap 40 us: a recheck after 20 x 40 us = 800 us of pulls (~14 calls),
  // each costing the gap: ~5% of the time.  Pulls are never leased.
  Tally t = run(c, 1500, 100, 60);
  CHECK(t.leased == 0);
  CHECK(t.slots >= 90);
  CHECK(t.slots <= 110);
  CHECK(t.slots * 40.0 <= 0.055 * t.pulled * 60);
  // The slots faster: gap 20 us, a recheck every ~10 calls, and the calls
  // in between leased, so only about one call in five exchanges anything.
  CopyPathChooser d;
  run(d, 4, 40, 60);
  t = run(d, 1500, 40, 60);
  CHECK(t.pulled >= 100);
  CHECK(t.pulled * 20.0 <= 0.055 * (1500 - t.pulled) * 40);
  CHECK(t.leased >= 1500 * 3 / 4);
}

TEST_CASE("copy path: a change of which path is faster is followed", "[unit][copy_path]") {
  CopyPathChooser c;
  run(c, 4, 100, 60);
  run(c, 200, 100, 60);
  // The cores move: the slots become faster.  The next recheck of the slots
  // (within ~14 calls) finds it, and from then on the slots are taken.
  Tally t = run(c, 30, 30, 60);
  CHECK(t.pulled <= 15);
  CHECK(t.leased > 0);
  // From then on the slots, with a recheck of pull every ~20 calls.
  t = run(c, 200, 30, 60);
  CHECK(t.pulled <= 12);
  // And back: the slots slow down.  Their estimate moves only on calls
  // that exchange (one per lease), so it takes a few leases; within 100
  // calls pull is chosen again.
  run(c, 100, 100, 60);
  CHECK(c.choose(Collective::AllGather, kMB).option == CopyPath::Pull);
}

TEST_CASE("copy path: a measured neighbour class stands in for a new one, scaled", "[unit][copy_path]") {
  CopyPathChooser c;
  run(c, 10, 100, 50, kMB);  // 1 MB: pull twice as fast
  // 2 MB, never timed: pull at once (its estimate: 2 x 50 us), and the
  // slots timed again only after 20 gaps' worth of calls (their estimate:
  // 2 x 100 us), so not within these 10.
  CHECK(c.choose(Collective::AllGather, 2 * kMB).option == CopyPath::Pull);
  Tally t = run(c, 10, 200, 100, 2 * kMB);
  CHECK(t.pulled >= 8);
  // Not next to a measured class: timed afresh (the slots first).
  CHECK(c.choose(Collective::AllGather, 16 * kMB).option == CopyPath::Slots);
}

TEST_CASE("copy path: a sweep by doubling times the way it does not take once, not at every other size",
          "[unit][copy_path]") {
  CopyPathChooser c;
  const Collective ag = Collective::AllGather;
  run(c, 10, 100, 50, kMB);           // 1 MB: both ways timed, pull twice as fast
  run(c, 10, 200, 100, 2 * kMB);      // 2 MB: pull on 1 MB's word, the slots never timed
  // 4 MB: the slots' word comes from 1 MB through 2 MB (4 x 100 us).
  CHECK(c.choose(ag, 4 * kMB).option == CopyPath::Pull);
  CHECK(run(c, 10, 400, 200, 4 * kMB).slots == 0);
  // 16 MB: 8 MB never ran, so nothing speaks for it: timed afresh.
  CHECK(c.choose(ag, 16 * kMB).option == CopyPath::Slots);
}

TEST_CASE("copy path: a way first timed cold is timed again before the other", "[unit][copy_path]") {
  // As in a benchmark that warms up every size before timing any: the
  // slots' first timed call faulted the buffers in.
  CopyPathChooser c;
  const Collective ag = Collective::AllGather;
  c.record(ag, kMB, CopyPath::Slots, 4000);
  c.record(ag, kMB, CopyPath::Slots, 160);  // really 40
  // Pull (really 60) would look 2.7x faster; the slots are timed again
  // first, and win.
  Tally t = run(c, 8, 40, 60);
  CHECK(t.pulled == 2);
  CHECK(c.choose(ag, kMB).option == CopyPath::Slots);
}

TEST_CASE("copy path: a class a neighbour misled turns at its first recheck", "[unit][copy_path]") {
  CopyPathChooser c;
  const Collective ag = Collective::AllGather;
  run(c, 10, 200, 50, kMB);  // 1 MB: pull four times as fast
  // 2 MB, where the slots are a little faster (250 us against 300): pull
  // is taken on 1 MB's word (the slots at 2 x 200 us), and the slots are
  // timed again after 20 x (400 - 300) / 300 calls of it.  That one call
  // turns the choice: a time of the class's own below its neighbour's word
  // counts before the class has kTrusted of them.
  int pulls = 0;
  for (; pulls < 30; ++pulls) {
    const CopyChoice choice = c.choose(ag, 2 * kMB);
    const bool slots = choice.option == CopyPath::Slots;
    c.record(ag, 2 * kMB, choice.option, slots ? 250 : 300);
    if (slots) break;
  }
  CHECK(pulls >= 3);
  CHECK(pulls <= 10);
  CHECK(c.faster(ag, 2 * kMB) == CopyPath::Slots);
}

TEST_CASE("copy path: collectives and size classes are timed apart", "[unit][copy_path]") {
  CopyPathChooser c;
  run(c, 10, 100, 50, kMB, Collective::AllGather);
  run(c, 10, 50, 100, 4 * kMB, Collective::AllGather);
  run(c, 10, 50, 100, kMB, Collective::Broadcast);
  CHECK(c.choose(Collective::AllGather, kMB + 5).option == CopyPath::Pull);  // same class as 1 MB
  CHECK(c.choose(Collective::AllGather, 4 * kMB).option == CopyPath::Slots);
  CHECK(c.choose(Collective::Broadcast, kMB).option == CopyPath::Slots);
  CHECK(c.choose(Collective::AlltoAll, kMB).option == CopyPath::Slots);  // never timed: the slots first
}

TEST_CASE("measured choice: a new class times the slower way twice, then as often as the gap allows",
          "[unit][copy_path]") {
  // A benchmark's 25 calls of a new size where one way takes twice as long
  // as the other: the untimed first call, two on each way, and then the
  // first recheck is due only after 20 gaps' worth of calls, past the
  // 25th.  (Rechecks that started after 1 call and doubled put 5 of the 25
  // on the slower way.)
  for (const bool slots_faster : {true, false}) {
    INFO("slots faster: " << slots_faster);
    CopyPathChooser c;
    Tally t = slots_faster ? run(c, 25, 100, 200) : run(c, 25, 200, 100);
    CHECK(t.pulled + t.slots + t.leased == 25);
    if (slots_faster) {
      CHECK(t.pulled == 2);
    } else {
      CHECK(t.slots == 3);  // the untimed call and two timed
      CHECK(t.leased == 0);
    }
  }
}

TEST_CASE("measured choice: a longer window keeps a way's fast call in its estimate through that many calls",
          "[unit][copy_path]") {
  // The slots steady at 200 us; pull once at 100, then at 300.  With the
  // default window (2) pull's estimate is 300 after two slow calls; with 4
  // it stays 100 until four slow calls have pushed the fast one out.
  for (uint32_t window : {2u, 4u}) {
    INFO("window " << window);
    braid::MeasuredChooser<CopyPath> c(window);
    const Collective ag = Collective::AllGather;
    c.record(ag, kMB, CopyPath::Slots, 9000);  // the class's first call: not timed
    for (int i = 0; i < 3; ++i) c.record(ag, kMB, CopyPath::Slots, 200);
    c.record(ag, kMB, CopyPath::Pull, 100);
    for (int slow = 1; slow <= 4; ++slow) {
      c.record(ag, kMB, CopyPath::Pull, 300);
      INFO(slow << " slow pulls");
      const bool fast_one_counts = slow < int(window);
      CHECK((c.faster(ag, kMB) == CopyPath::Pull) == fast_one_counts);
    }
  }
}

// Choosing between two ways of running a call by timing both.
//
// Some choices on the host backend (where a copy collective moves its bytes,
// src/plan/copy_path.h; how the executor stores into its send slots,
// src/plan/slot_stores.h) have no winner that holds: which way is faster
// depends on where the host has put the ranks' cores, and that changes while
// the job runs.  So the choice is measured, per collective and size class
// (powers of two).  A way's estimate is the faster of its last two calls
// (by default; the window is the chooser's parameter):
// calls are slowed down (a first call faulting its buffers in, a preemption)
// far more often than sped up, and rarely twice in a row; a longer window
// would keep a time from before the placement changed.  A class's very
// first call is not timed at all: it pays what only a first call pays (a
// schedule planned, slots and buffers touched for the first time).  Timed,
// it made the default look slower than the other way's first, warm, call:
// in a 2-process AllReduce of 64 MB with the cores near, the cold first
// call on the cached slots looked slower than the streamed slots, so
// streamed was taken for several calls before a recheck found the cached
// slots well ahead (perf/results/compare_20261126e.txt section 1).
//
// Then each way is timed kTrusted times, the default first, unless a
// neighbouring class (twice or half the size) already has that many calls
// on it: the neighbour speaks for the class (its estimate scaled by the
// size) until the class has its own, so a sweep over sizes, or a mix of
// sizes, does not explore afresh at every size; a call of the class's own
// that beats the neighbour's word counts at once.  A neighbour the job ran
// that took its own neighbour's word for a way passes that word on (the
// nearest class that timed the way speaks, through such classes): a sweep
// by doubling sizes then times the way it does not take once, not at
// every other size (2-process AlltoAll 1.10x faster over such a sweep,
// perf/results/copy_path_in_place_20261204.txt section 3).  Classes
// further away speaking over sizes the job never ran did not pay
// (perf/results/copy_path_rechecks_20261204.txt).
// From then on the faster way is taken, and the slower is timed again
// after as many calls as add up to kExploreBudget times the gap between
// the two.  A recheck costs the gap, so rechecking spends about
// 1/kExploreBudget of the time, whatever the sizes and call rates, and a
// change of placement is noticed within about kExploreBudget gaps.  An
// estimate that started wrong (a way first timed while still warming up,
// or a neighbour's that does not hold here) is corrected the same way,
// sooner the smaller the gap it shows.  The rechecks used to start after 1
// call and double up to that bound, to correct such a start at once; in a
// benchmark's 20 calls per size that put 4 or 5 of them on the slower way,
// and their cost outgrew what the choice won (same file).
//
// A chooser given a `cold` way sends there the untimed first call of a
// class not yet known: where that way's first calls cost more than its
// later ones (the pull path's first reads of a buffer), the cold call takes
// the cost out of the timed calls.
//
// Option is an enum of two values.  Option(0) is the default and is timed
// first; when it is chosen, the choice comes with a lease: the number of
// following calls of the class that take it without asking (as many as
// there are until the next recheck is due), for callers that must agree
// on a choice with their peers and need not when it is the default.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>

#include "braid/schedule.h"

namespace braid {

// The size class of a call whose larger buffer is `bytes`: its power of two.
inline int size_class(uint64_t bytes) { return bytes ? 63 - __builtin_clzll(bytes) : 0; }
constexpr int kSizeClasses = 64;

template <class Option>
struct MeasuredChoice {
  Option option = Option(0);
  uint32_t lease = 0;  // Option(0): this many following calls of the class take it unasked
};

template <class Option>
class MeasuredChooser {
 public:
  static constexpr double kExploreBudget = 20;  // rechecks cost ~5% at most
  static constexpr uint32_t kMaxCallsBetweenChecks = 1024;
  static constexpr uint32_t kTrusted = 2;  // timed calls on a way before its estimate counts

  static constexpr uint32_t kDefaultWindow = 2, kMaxWindow = 8;

  // window: how many of a way's last calls its estimate is the fastest of
  // (2, as above; more where calls are slowed down more often than
  // placements change, as where ranks outnumber cores and wait for one).
  // cold: the way of a class's untimed first call while a way is not known
  // (unset: the way to time next).
  explicit MeasuredChooser(uint32_t window = kDefaultWindow, std::optional<Option> cold = std::nullopt)
      : window_(std::clamp<uint32_t>(window, 1, kMaxWindow)), cold_(cold) {}

  // The way for a call of `c` moving `bytes` (its larger buffer).
  MeasuredChoice<Option> choose(Collective c, uint64_t bytes) const {
    const Classes& classes = classes_[size_t(c)];
    const int k = size_class(bytes);
    View v;
    if (!view(classes, k, &v)) return {!classes[size_t(k)].warm && cold_ ? *cold_ : v.best, 0};  // time it
    const uint32_t every = calls_between_checks(v), since = classes[size_t(k)].calls_since_check;
    if (since >= every) return {other(v.best), 0};
    // The default until the recheck is due, this call included.
    return {v.best, v.best == Option(0) ? every - since - 1 : 0};
  }

  // The faster way of `c` at `bytes` by what is known now, leaving out
  // the rechecks choose() schedules (the way to time next while one is
  // not known well enough): for tests and logs.
  Option faster(Collective c, uint64_t bytes) const {
    View v;
    view(classes_[size_t(c)], size_class(bytes), &v);
    return v.best;
  }

  // A call that took `us` the way `option`.
  void record(Collective c, uint64_t bytes, Option option, double us) {
    Classes& classes = classes_[size_t(c)];
    const int k = size_class(bytes);
    SizeClass& s = classes[size_t(k)];
    if (!s.warm) {  // the class's first call: cold, not timed
      s.warm = true;
      return;
    }
    View before;
    const bool knew = view(classes, k, &before);
    s.way[int(option)].add(us, window_);
    // On the faster way, one call nearer the recheck; otherwise a recheck
    // (or a way timed before the rechecks start): the count starts again.
    s.calls_since_check = knew && option == before.best ? s.calls_since_check + 1 : 0;
  }

  // A call that took the default under a lease (not timed).
  void leased_call(Collective c, uint64_t bytes) { ++classes_[size_t(c)][size_t(size_class(bytes))].calls_since_check; }

 private:
  struct Estimate {
    double recent[kMaxWindow] = {};  // the last calls' times, a ring
    uint32_t count = 0;              // calls timed, ever
    double us(uint32_t window) const {
      const uint32_t n = std::min(count, window);
      return *std::min_element(recent, recent + std::max(n, 1u));
    }
    void add(double us, uint32_t window) { recent[count++ % window] = us; }
  };
  struct SizeClass {
    Estimate way[2];
    uint32_t calls_since_check = 0;  // on the faster way, since the slower was last timed
    bool warm = false;               // its first call is over (and was not timed)
  };
  using Classes = std::array<SizeClass, kSizeClasses>;
  // What is known of class k: estimates of both ways (own, or a
  // neighbour's); false while a way has neither (v->best is then that way).
  struct View {
    double us[2] = {};
    Option best = Option(0);
  };

  static Option other(Option o) { return o == Option(0) ? Option(1) : Option(0); }

  bool view(const Classes& classes, int k, View* v) const {
    for (int p = 0; p < 2; ++p) {
      const Estimate& own = classes[size_t(k)].way[p];
      bool found = own.count >= kTrusted;
      if (found) v->us[p] = own.us(window_);
      for (int d : {-1, +1}) {
        // The nearest class that timed the way, through classes the job ran
        // that took a neighbour's word for it.
        int j = k + d;
        while (j >= 0 && j < kSizeClasses && classes[size_t(j)].warm && classes[size_t(j)].way[p].count < kTrusted)
          j += d;
        if (found || j < 0 || j >= kSizeClasses) continue;
        const Estimate& n = classes[size_t(j)].way[p];
        if (n.count < kTrusted) continue;
        v->us[p] = std::ldexp(n.us(window_), k - j);  // time scales with size
        // A call of its own faster than that counts as one more sample
        // (calls are slowed down, rarely sped up).
        if (own.count > 0) v->us[p] = std::min(v->us[p], own.us(window_));
        found = true;
      }
      if (!found) {
        v->best = Option(p);  // the way to time next
        return false;
      }
    }
    v->best = v->us[1] < v->us[0] ? Option(1) : Option(0);
    return true;
  }

  // As many calls as take kExploreBudget gaps.
  static uint32_t calls_between_checks(const View& v) {
    const double best_us = v.us[int(v.best)], gap = std::max(0.0, v.us[int(other(v.best))] - best_us);
    const double budget = best_us > 0 ? std::ceil(kExploreBudget * gap / best_us) : kMaxCallsBetweenChecks;
    return uint32_t(std::clamp(budget, 1.0, double(kMaxCallsBetweenChecks)));
  }

  uint32_t window_;
  std::optional<Option> cold_;
  std::array<Classes, int(Collective::Custom)> classes_{};
};

}  // namespace braid

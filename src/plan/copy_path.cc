#include "src/plan/copy_path.h"

#include <algorithm>
#include <cmath>

namespace braid {

CopyPathChooser::SizeClass& CopyPathChooser::size_class(Collective c, uint64_t bytes) {
  auto& classes = classes_[size_t(c) % kCollectives];
  const int k = copy_size_class(bytes);
  SizeClass& s = classes[size_t(k)];
  if (s.path[0].known || s.path[0].samples || s.path[1].known || s.path[1].samples) return s;
  // First touch: a measured neighbour's estimates, scaled by the size, stand in.
  for (int j : {k - 1, k + 1}) {
    if (j < 0 || j >= kCopySizeClasses) continue;
    const SizeClass& n = classes[size_t(j)];
    if (!n.path[0].known || !n.path[1].known) continue;
    const double scale = std::ldexp(1.0, k - j);
    for (int p = 0; p < 2; ++p) s.path[p] = Estimate{n.path[p].us * scale, 0, true};
    s.best = n.best;
    break;
  }
  return s;
}

CopyChoice CopyPathChooser::choose(Collective c, uint64_t bytes) {
  const SizeClass& s = size_class(c, bytes);
  for (CopyPath p : {CopyPath::Slots, CopyPath::Pull})
    if (!s.path[int(p)].known) return {p, 0};
  const CopyPath other = s.best == CopyPath::Slots ? CopyPath::Pull : CopyPath::Slots;
  const double best_us = s.path[int(s.best)].us;
  const double budget = kExploreBudget * std::max(0.0, s.path[int(other)].us - best_us);
  const bool due = s.calls_since_check >= kMinCallsBetweenChecks && s.us_since_check >= budget;
  if (due) return {other, 0};
  if (s.best == CopyPath::Pull) return {CopyPath::Pull, 0};
  // Calls on the slots until a recheck is due, counting this one.
  const double by_time = best_us > 0 ? std::ceil((budget - s.us_since_check) / best_us) : 0;
  const double by_count = double(kMinCallsBetweenChecks) - double(s.calls_since_check);
  const double calls = std::clamp(std::max(by_time, by_count), 1.0, double(kMaxLease) + 1);
  return {CopyPath::Slots, uint32_t(calls) - 1};
}

void CopyPathChooser::record(Collective c, uint64_t bytes, CopyPath path, double us) {
  SizeClass& s = size_class(c, bytes);
  Estimate& e = s.path[int(path)];
  if (!e.known && e.samples == 0) {
    e.samples = 1;  // cold: timed again before it counts
    return;
  }
  // A warm first sample, one replacing a neighbour's estimate, and a
  // recheck of the slower path stand alone; the faster path's are averaged.
  const bool average = e.samples >= 2 && path == s.best;
  e.us = average ? 0.75 * e.us + 0.25 * us : us;
  e.known = true;
  ++e.samples;
  if (path == s.best) {
    s.us_since_check += us;
    ++s.calls_since_check;
  } else {
    s.us_since_check = 0;
    s.calls_since_check = 0;
  }
  const Estimate& slots = s.path[int(CopyPath::Slots)];
  const Estimate& pull = s.path[int(CopyPath::Pull)];
  if (slots.known && pull.known) s.best = pull.us < slots.us ? CopyPath::Pull : CopyPath::Slots;
  else s.best = path;
}

void CopyPathChooser::leased_call(Collective c, uint64_t bytes) {
  SizeClass& s = size_class(c, bytes);
  s.us_since_check += s.path[int(CopyPath::Slots)].us;
  ++s.calls_since_check;
}

}  // namespace braid

#include "src/plan/copy_path.h"

#include <algorithm>

namespace braid {

CopyPath CopyPathChooser::choose(Collective c, uint64_t bytes) const {
  const SizeClass& s = classes_[size_t(c) % kCollectives][log2_class(bytes)];
  for (CopyPath p : {CopyPath::Slots, CopyPath::Pull})
    if (s.path[int(p)].samples < 2) return p;
  const CopyPath other = s.best == CopyPath::Slots ? CopyPath::Pull : CopyPath::Slots;
  const double gap = std::max(0.0, s.path[int(other)].us - s.path[int(s.best)].us);
  const bool due = s.calls_since_check >= kMinCallsBetweenChecks && s.us_since_check >= kExploreBudget * gap;
  return due ? other : s.best;
}

void CopyPathChooser::record(Collective c, uint64_t bytes, CopyPath path, double us) {
  SizeClass& s = classes_[size_t(c) % kCollectives][log2_class(bytes)];
  Estimate& e = s.path[int(path)];
  // The first sample (cold) and a recheck of the slower path stand alone;
  // the faster path's samples are averaged.
  const bool average = e.samples >= 2 && path == s.best;
  e.us = average ? 0.75 * e.us + 0.25 * us : us;
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
  if (slots.samples && pull.samples) s.best = pull.us < slots.us ? CopyPath::Pull : CopyPath::Slots;
  else s.best = path;
}

}  // namespace braid

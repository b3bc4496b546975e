#include "src/plan/copy_path.h"

#include <algorithm>
#include <cmath>

namespace braid {

bool CopyPathChooser::view(const Classes& classes, int k, View* v) {
  const SizeClass& own = classes[size_t(k)];
  v->check_every = own.check_every;
  for (int p = 0; p < 2; ++p) {
    const Estimate& e = own.path[p];
    bool found = e.count >= kTrusted;
    if (found) v->us[p] = e.us();
    for (int j : {k - 1, k + 1}) {
      if (found || j < 0 || j >= kCopySizeClasses) continue;
      const SizeClass& n = classes[size_t(j)];
      if (n.path[p].count < kTrusted) continue;
      v->us[p] = std::ldexp(n.path[p].us(), k - j);  // time scales with size
      v->check_every = std::max(v->check_every, n.check_every);
      found = true;
    }
    if (!found && e.count > 0) {
      v->us[p] = e.us();
      found = true;
    }
    if (!found) {
      v->best = CopyPath(p);  // the path to time first
      return false;
    }
  }
  v->best = v->us[int(CopyPath::Pull)] < v->us[int(CopyPath::Slots)] ? CopyPath::Pull : CopyPath::Slots;
  return true;
}

uint32_t CopyPathChooser::calls_between_checks(const View& v) {
  const CopyPath other = v.best == CopyPath::Slots ? CopyPath::Pull : CopyPath::Slots;
  const double best_us = v.us[int(v.best)], gap = std::max(0.0, v.us[int(other)] - best_us);
  // As many calls as take kExploreBudget gaps.
  const double budget = best_us > 0 ? std::ceil(kExploreBudget * gap / best_us) : kMaxCallsBetweenChecks;
  return std::min(v.check_every, uint32_t(std::clamp(budget, 1.0, double(kMaxCallsBetweenChecks))));
}

CopyChoice CopyPathChooser::choose(Collective c, uint64_t bytes) {
  const Classes& classes = classes_[size_t(c)];
  const int k = copy_size_class(bytes);
  View v;
  if (!view(classes, k, &v)) return {v.best, 0};  // a path nothing is known of: time it
  const uint32_t every = calls_between_checks(v), since = classes[size_t(k)].calls_since_check;
  if (since >= every) return {v.best == CopyPath::Slots ? CopyPath::Pull : CopyPath::Slots, 0};
  // The slots until the recheck is due, this call included.
  return {v.best, v.best == CopyPath::Slots ? every - since - 1 : 0};
}

void CopyPathChooser::record(Collective c, uint64_t bytes, CopyPath path, double us) {
  Classes& classes = classes_[size_t(c)];
  const int k = copy_size_class(bytes);
  SizeClass& s = classes[size_t(k)];
  View before;
  const bool knew = view(classes, k, &before);
  s.path[int(path)].add(us);
  View after;
  if (!knew || !view(classes, k, &after)) return;
  if (path == before.best) {
    ++s.calls_since_check;
    return;
  }
  // A recheck: it confirmed the choice (look less often) or overturned it.
  s.calls_since_check = 0;
  s.check_every = after.best == before.best ? std::min(2 * before.check_every, kMaxCallsBetweenChecks) : 1;
}

void CopyPathChooser::leased_call(Collective c, uint64_t bytes) {
  ++classes_[size_t(c)][size_t(copy_size_class(bytes))].calls_since_check;
}

}  // namespace braid

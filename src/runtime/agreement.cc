#include "src/runtime/agreement.h"

#include <algorithm>

namespace braid {
namespace {

template <class T>
T fold(Fold rule, T a, T b) {
  switch (rule) {
    case Fold::Equal: return a;
    case Fold::Min: return std::min(a, b);
    case Fold::Max: return std::max(a, b);
    case Fold::Any: return T(a || b);
    case Fold::And: return T(a & b);
  }
  return a;
}

}  // namespace

Status fold_agreed(const std::vector<AgreedValues>& ranks, AgreedValues* out) {
  if (ranks.empty()) return BRAID_ERROR(ncclInternalError, "no rank's values to agree on");
  *out = ranks[0];
  for (size_t r = 1; r < ranks.size(); ++r) {
    const AgreedValues& v = ranks[r];
#define BRAID_AGREED_FOLD(type, name, rule, what)                                                                  \
  if (rule == Fold::Equal && v.name != ranks[0].name)                                                              \
    return BRAID_ERROR(ncclInvalidUsage, "ranks disagree on {} ({}): rank 0 has {}, rank {} has {}", #name, what, \
                       ranks[0].name, r, v.name);                                                                  \
  out->name = fold<type>(rule, out->name, v.name);
    BRAID_AGREED_VALUES(BRAID_AGREED_FOLD)
#undef BRAID_AGREED_FOLD
  }
  return Status::ok();
}

}  // namespace braid

// How many elements of two reduction results differ, for the reduction
// tests (test_host_reduce.cc, test_vector_fold.cc).
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "src/ops/reduce_ops.h"

namespace braid {

// Elements whose bits differ, except NaN vs NaN: when both operands are
// NaNs, which one propagates (and so the result's sign) depends on operand
// order the compiler may commute (IEEE leaves it open); every other bit is
// compared exactly.
inline size_t mismatches(const void* want, const void* got, size_t n, ncclDataType_t type) {
  size_t bad = 0;
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    for (size_t i = 0; i < n; ++i) {
      S w, g;
      std::memcpy(&w, static_cast<const char*>(want) + i * sizeof(S), sizeof(S));
      std::memcpy(&g, static_cast<const char*>(got) + i * sizeof(S), sizeof(S));
      if (std::memcmp(&w, &g, sizeof(S)) == 0) continue;
      if constexpr (!std::is_integral_v<S>) {
        auto wv = Elem<S>::load(w), gv = Elem<S>::load(g);
        if (wv != wv && gv != gv) continue;
      }
      ++bad;
    }
  });
  return bad;
}

}  // namespace braid

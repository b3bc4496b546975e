// Overlap of two byte ranges: in-place calls, and copies that must not
// stream or fuse over memory they also read.
#pragma once

#include <cstdint>

namespace braid {

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (an empty range shares none).
inline bool ranges_overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace braid

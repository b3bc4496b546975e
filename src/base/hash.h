// FNV-1a, 64 bits: the one hash braid uses to name things by their bytes
// (hosts, GPUs, tuning tables, hidden values), never for security.
#pragma once

#include <cstdint>
#include <string_view>

namespace braid {

inline uint64_t fnv1a(std::string_view bytes, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace braid

// The rank-order fold BRAID_DETERMINISTIC promises, computed here without
// braid's reduction code: the compiler's float and double arithmetic, and
// half and bfloat16 rounded to nearest even by hand.  Shared by the
// host test (tests/mp/test_deterministic.cc) and the GPU one
// (tests/gpu/deterministic_cuda.cc), so both backends are held to the same
// bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nccl.h"
#include "values.h"

namespace rank_order {

using mp::mix;

inline float bits_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline uint16_t bf16_round(float f) {  // to nearest even (the sums here are finite)
  const uint32_t b = float_bits(f);
  return uint16_t((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}
inline float half_value(uint16_t b) {  // finite halves only
  const int e = (b >> 10) & 0x1f;
  const double m = b & 0x3ff, v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return float(b >> 15 ? -v : v);
}
inline uint16_t half_round(float f) {  // to nearest even; |f| stays below 65504 here
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a == 0) return sign;
  const int e = std::max(std::ilogb(a), -14);               // the binade; subnormals share -14's step
  const double units = std::nearbyint(std::ldexp(a, 10 - e));  // in steps of 2^(e-10), ties to even
  if (units == 0) return sign;
  const int e2 = std::max(std::ilogb(std::ldexp(units, e - 10)), -14);  // rounding may carry into the next binade
  const double mant = std::ldexp(units, e - 10 - (e2 - 10));
  const bool normal = mant >= 1024;
  return uint16_t(sign | (normal ? (e2 + 15) << 10 : 0) | (uint16_t(mant) & 0x3ff));
}

inline size_t size_of(ncclDataType_t t) { return t == ncclFloat64 ? 8 : t == ncclFloat32 ? 4 : 2; }

// Rank `rank`'s input at element `i` of the whole input, as bits: a random
// sign, mantissa and exponent over about 2^-8..2^16 (Max: mostly zeros of
// either sign, which Max orders by which operand comes first).
inline uint64_t input_bits(ncclDataType_t t, ncclRedOp_t op, int rank, size_t i) {
  const uint64_t h = mix(uint64_t(rank) << 40 ^ i);
  const uint64_t sign = h >> 63, e = (h >> 40) % 24;
  if (op == ncclMax) {
    const float v = (h & 3) == 3 ? 1.0f : 0.0f;
    return float_bits(sign ? -v : v);
  }
  switch (t) {
    case ncclFloat64: return sign << 63 | (1023 + e - 8) << 52 | (h & ((1ULL << 52) - 1));
    case ncclFloat32: return sign << 31 | (127 + e - 8) << 23 | (h & ((1u << 23) - 1));
    case ncclBfloat16: return sign << 15 | (127 + e % 16 - 8) << 7 | (h & 0x7f);
    default: return sign << 15 | (15 + e % 12 - 6) << 10 | (h & 0x3ff);  // half: sums stay finite
  }
}

// a (+) b in the element type, as the executors compute it.
inline uint64_t combine(ncclDataType_t t, ncclRedOp_t op, uint64_t a, uint64_t b) {
  switch (t) {
    case ncclFloat64: {
      double x, y;
      std::memcpy(&x, &a, 8);
      std::memcpy(&y, &b, 8);
      const double s = x + y;
      uint64_t out;
      std::memcpy(&out, &s, 8);
      return out;
    }
    case ncclFloat32: {
      const float x = bits_float(uint32_t(a)), y = bits_float(uint32_t(b));
      return float_bits(op == ncclMax ? (x > y ? x : y) : x + y);
    }
    case ncclBfloat16: return bf16_round(bits_float(uint32_t(a) << 16) + bits_float(uint32_t(b) << 16));
    default: return half_round(half_value(uint16_t(a)) + half_value(uint16_t(b)));
  }
}

inline uint64_t rank_order_fold(ncclDataType_t t, ncclRedOp_t op, int n, size_t i) {
  uint64_t acc = input_bits(t, op, 0, i);
  for (int r = 1; r < n; ++r) acc = combine(t, op, acc, input_bits(t, op, r, i));
  return acc;
}

inline uint64_t load_bits(const char* p, size_t i, size_t es) {
  uint64_t v = 0;
  std::memcpy(&v, p + i * es, es);
  return v;
}

}  // namespace rank_order

// Conversions between float and the narrow floating formats NCCL reduces:
// IEEE half, bfloat16, and the OCP fp8 formats e4m3 (no infinities, max 448)
// and e5m2 (IEEE-like, max 57344).
//
// All conversions to a narrow format round to nearest even.  fp8 conversions
// saturate finite overflow (and infinities) to the largest finite value, the
// CUDA __NV_SATFINITE behaviour NCCL's fp8 reductions use; NaN stays NaN.
//
// Everything is integer arithmetic on the float's bits: the same code runs in
// host loops and in CUDA kernels (BRAID_HD) with bit-identical results, and it
// has no libm calls on the hot path.
#pragma once

#include <cstdint>
#include <cstring>

#include "braid/hd.h"

namespace braid {

BRAID_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

BRAID_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

BRAID_HD float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

BRAID_HD uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // keep it a (quiet) NaN
  u += 0x7fffu + ((u >> 16) & 1);                                           // round to nearest even
  return uint16_t(u >> 16);
}

// A small binary float: E exponent bits, M mantissa bits, a sign bit on top.
// kIeeeSpecial: the top exponent means inf/NaN (half, e5m2); otherwise only
// the all-ones pattern is NaN (e4m3).
template <int E, int M, bool kIeeeSpecial>
struct SmallFloat {
  static constexpr int kExpBits = E, kManBits = M;
  static constexpr bool kIeeeLike = kIeeeSpecial;
  static constexpr int kBias = (1 << (E - 1)) - 1;
  static constexpr uint32_t kExpAll = (1u << E) - 1;
  static constexpr uint32_t kSign = 1u << (E + M);
  static constexpr uint32_t kMaxFinite =
      kIeeeSpecial ? ((kExpAll - 1) << M) | ((1u << M) - 1) : (kExpAll << M) | ((1u << M) - 2);
  static constexpr uint32_t kNaN = kIeeeSpecial ? (kExpAll << M) | (1u << (M - 1)) : (kExpAll << M) | ((1u << M) - 1);
  static constexpr uint32_t kInf = kExpAll << M;  // only meaningful when kIeeeSpecial

  BRAID_HD static float decode(uint32_t bits) {
    const uint32_t sign = (bits & kSign) ? 0x80000000u : 0;
    const uint32_t exp = (bits >> M) & kExpAll;
    const uint32_t man = bits & ((1u << M) - 1);
    if (kIeeeSpecial && exp == kExpAll) return bits_float(sign | 0x7f800000u | (man << (23 - M)) | (man ? 0x400000u : 0));
    if (!kIeeeSpecial && exp == kExpAll && man == (1u << M) - 1) return bits_float(sign | 0x7fc00000u);
    if (exp == 0) {  // subnormal: man * 2^(1 - bias - M), exact in float
      const float scale = bits_float(uint32_t(127 + 1 - kBias - M) << 23);
      float v = float(man) * scale;
      return bits_float(float_bits(v) | sign);
    }
    return bits_float(sign | ((exp + 127 - kBias) << 23) | (man << (23 - M)));
  }

  // Round to nearest even; overflow saturates (kSaturate) or becomes inf.
  template <bool kSaturate>
  BRAID_HD static uint32_t encode(float f) {
    const uint32_t u = float_bits(f);
    const uint32_t sign = (u & 0x80000000u) ? kSign : 0;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | kNaN;
    const uint32_t overflow = kSaturate ? kMaxFinite : (kIeeeSpecial ? kInf : kNaN);
    if (a == 0x7f800000u) return sign | overflow;
    const int exp = int(a >> 23) - 127;  // unbiased exponent of a normal float
    if (exp >= 1 - kBias) {
      // Normal in the target: drop 23-M mantissa bits with round-to-nearest-
      // even; a carry out of the mantissa bumps the exponent, as it should.
      constexpr int kShift = 23 - M;
      const uint32_t rounded = a + ((1u << (kShift - 1)) - 1) + ((a >> kShift) & 1);
      const uint32_t t = (rounded >> kShift) - (uint32_t(127 - kBias) << M);
      return sign | (t > kMaxFinite ? overflow : t);
    }
    if ((a >> 23) == 0) return sign;  // float subnormals are far below any target quantum
    // Subnormal in the target: quantum 2^(1-bias-M); q = round(m24 * 2^(exp-23) / quantum).
    const uint32_t m24 = (a & 0x7fffffu) | 0x800000u;
    const int shift = 23 + (1 - kBias - M) - exp;  // > 23 - M here
    if (shift > 25) return sign;                    // below half the smallest subnormal
    uint32_t q = m24 >> shift;
    const uint32_t rem = m24 & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | q;  // q == 1 << M is the smallest normal, encoded the same way
  }
};

using Half = SmallFloat<5, 10, true>;
using E4M3 = SmallFloat<4, 3, false>;
using E5M2 = SmallFloat<5, 2, true>;

BRAID_HD float half_to_float(uint16_t h) { return Half::decode(h); }
BRAID_HD uint16_t float_to_half(float f) { return uint16_t(Half::encode<false>(f)); }
BRAID_HD float e4m3_to_float(uint8_t b) { return E4M3::decode(b); }
BRAID_HD uint8_t float_to_e4m3(float f) { return uint8_t(E4M3::encode<true>(f)); }
BRAID_HD float e5m2_to_float(uint8_t b) { return E5M2::decode(b); }
BRAID_HD uint8_t float_to_e5m2(float f) { return uint8_t(E5M2::encode<true>(f)); }

}  // namespace braid

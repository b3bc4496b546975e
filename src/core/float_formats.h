// Software conversions between float and the narrow floating formats NCCL
// reduces: IEEE half, bfloat16, and the OCP fp8 formats e4m3 (no infinities,
// max 448) and e5m2 (IEEE-like, max 57344).
//
// All conversions to a narrow format round to nearest even.  fp8 conversions
// saturate finite overflow to the largest finite value (the CUDA
// __NV_SATFINITE behaviour NCCL's fp8 reductions use); NaN stays NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace braid {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);  // keep it a (quiet) NaN
  u += 0x7fff + ((u >> 16) & 1);                         // round to nearest even
  return uint16_t(u >> 16);
}

// Generic decoder for a small binary float with `e` exponent bits and `m`
// mantissa bits (sign bit on top).  `ieee_special`: top exponent means
// inf/NaN (half, e5m2); otherwise only the all-ones pattern is NaN (e4m3).
inline float small_float_to_float(uint32_t bits, int e, int m, bool ieee_special) {
  const uint32_t sign = (bits >> (e + m)) & 1;
  const uint32_t exp = (bits >> m) & ((1u << e) - 1);
  const uint32_t man = bits & ((1u << m) - 1);
  const int bias = (1 << (e - 1)) - 1;
  float v;
  if (ieee_special && exp == (1u << e) - 1) {
    v = man ? NAN : INFINITY;
  } else if (!ieee_special && exp == (1u << e) - 1 && man == (1u << m) - 1) {
    v = NAN;
  } else if (exp == 0) {
    v = std::ldexp(float(man), 1 - bias - m);
  } else {
    v = std::ldexp(float(man | (1u << m)), int(exp) - bias - m);
  }
  return sign ? -v : v;
}

// Encoder matching small_float_to_float.  `max_finite` is the largest finite
// magnitude; `saturate` clamps overflow to it, otherwise overflow is inf.
inline uint32_t float_to_small_float(float f, int e, int m, bool ieee_special, bool saturate) {
  const int bias = (1 << (e - 1)) - 1;
  const uint32_t sign = std::signbit(f) ? 1u << (e + m) : 0;
  const uint32_t exp_all = (1u << e) - 1;
  // Largest finite encoding: for IEEE-like formats exponent all-ones is
  // reserved; for e4m3 only mantissa all-ones under it is (NaN).
  const uint32_t max_bits = ieee_special ? ((exp_all - 1) << m) | ((1u << m) - 1)
                                         : (exp_all << m) | ((1u << m) - 2);
  const uint32_t nan_bits = ieee_special ? (exp_all << m) | (1u << (m - 1)) : (exp_all << m) | ((1u << m) - 1);
  if (std::isnan(f)) return sign | nan_bits;
  float a = std::fabs(f);
  const float max_finite = small_float_to_float(max_bits, e, m, ieee_special);
  if (std::isinf(a) && !saturate) return sign | (ieee_special ? exp_all << m : nan_bits);
  // Exact scaling: find the quantum (spacing of representable values) at a.
  int exp2;
  std::frexp(a, &exp2);                    // a = f * 2^exp2, f in [0.5, 1)
  int unbiased = exp2 - 1;                 // a in [2^unbiased, 2^(unbiased+1))
  if (unbiased < 1 - bias) unbiased = 1 - bias;  // subnormal range
  const float quantum = std::ldexp(1.0f, unbiased - m);
  float q = std::nearbyint(a / quantum);   // round half to even (default mode)
  float rounded = q * quantum;
  if (rounded > max_finite || std::isinf(a)) {
    if (saturate) return sign | max_bits;
    return sign | (ieee_special ? exp_all << m : nan_bits);
  }
  if (rounded == 0) return sign;
  std::frexp(rounded, &exp2);
  int re = exp2 - 1;
  if (re < 1 - bias) {  // subnormal
    return sign | uint32_t(rounded / std::ldexp(1.0f, 1 - bias - m));
  }
  uint32_t man = uint32_t(rounded / std::ldexp(1.0f, re - m)) & ((1u << m) - 1);
  return sign | (uint32_t(re + bias) << m) | man;
}

inline float half_to_float(uint16_t h) { return small_float_to_float(h, 5, 10, true); }
inline uint16_t float_to_half(float f) { return uint16_t(float_to_small_float(f, 5, 10, true, false)); }
inline float e4m3_to_float(uint8_t b) { return small_float_to_float(b, 4, 3, false); }
inline uint8_t float_to_e4m3(float f) { return uint8_t(float_to_small_float(f, 4, 3, false, true)); }
inline float e5m2_to_float(uint8_t b) { return small_float_to_float(b, 5, 2, true); }
inline uint8_t float_to_e5m2(float f) { return uint8_t(float_to_small_float(f, 5, 2, true, true)); }

}  // namespace braid

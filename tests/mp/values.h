// Typed test values for every NCCL datatype, decoded independently of braid.
//
// Inputs are small integers so every sum/product/max/min/avg a test asks for
// is exactly representable, even in fp8 e5m2; results are compared exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "nccl.h"

namespace mp {

inline size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

inline double decode_minifloat(uint32_t bits, int exp_bits, int man_bits, int bias) {
  uint32_t sign = bits >> (exp_bits + man_bits), e = (bits >> man_bits) & ((1u << exp_bits) - 1),
           m = bits & ((1u << man_bits) - 1);
  double v = e == 0 ? std::ldexp(double(m), 1 - bias - man_bits)
                    : std::ldexp(double(m | (1u << man_bits)), int(e) - bias - man_bits);
  return sign ? -v : v;
}

inline double load(const void* p, size_t i, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return static_cast<const int8_t*>(p)[i];
    case ncclUint8: return static_cast<const uint8_t*>(p)[i];
    case ncclInt32: return static_cast<const int32_t*>(p)[i];
    case ncclUint32: return static_cast<const uint32_t*>(p)[i];
    case ncclInt64: return double(static_cast<const int64_t*>(p)[i]);
    case ncclUint64: return double(static_cast<const uint64_t*>(p)[i]);
    case ncclFloat16: return decode_minifloat(static_cast<const uint16_t*>(p)[i], 5, 10, 15);
    case ncclFloat32: return static_cast<const float*>(p)[i];
    case ncclFloat64: return static_cast<const double*>(p)[i];
    case ncclBfloat16: {
      uint32_t bits = uint32_t(static_cast<const uint16_t*>(p)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case ncclFloat8e4m3: return decode_minifloat(static_cast<const uint8_t*>(p)[i], 4, 3, 7);
    case ncclFloat8e5m2: return decode_minifloat(static_cast<const uint8_t*>(p)[i], 5, 2, 15);
    default: return NAN;
  }
}

// Stores a small non-negative integer v (exactly representable) as type t.
inline void store(void* p, size_t i, ncclDataType_t t, double v) {
  auto encode_search = [&](int bits, int exp_bits, int man_bits, int bias) -> uint32_t {
    for (uint32_t b = 0; b < (1u << bits); ++b)
      if (decode_minifloat(b, exp_bits, man_bits, bias) == v) return b;
    return 0;
  };
  switch (t) {
    case ncclInt8: static_cast<int8_t*>(p)[i] = int8_t(v); break;
    case ncclUint8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    case ncclInt32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case ncclUint32: static_cast<uint32_t*>(p)[i] = uint32_t(v); break;
    case ncclInt64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    case ncclUint64: static_cast<uint64_t*>(p)[i] = uint64_t(v); break;
    case ncclFloat32: static_cast<float*>(p)[i] = float(v); break;
    case ncclFloat64: static_cast<double*>(p)[i] = v; break;
    case ncclBfloat16: {
      float f = float(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(p)[i] = uint16_t(bits >> 16);  // small integers: exact truncation
      break;
    }
    case ncclFloat16: {
      // v is a small non-negative integer: 1.m * 2^e, always a normal half.
      uint16_t bits = 0;
      if (v != 0) {
        int e = int(std::floor(std::log2(v)));
        uint32_t m = uint32_t(std::ldexp(v, 10 - e)) & 0x3ff;
        bits = uint16_t(((e + 15) << 10) | m);
      }
      static_cast<uint16_t*>(p)[i] = bits;
      break;
    }
    case ncclFloat8e4m3: static_cast<uint8_t*>(p)[i] = uint8_t(encode_search(8, 4, 3, 7)); break;
    case ncclFloat8e5m2: static_cast<uint8_t*>(p)[i] = uint8_t(encode_search(8, 5, 2, 15)); break;
    default: break;
  }
}

inline bool is_fp8(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

// Input value of element i on rank r for op: chosen so results stay exact.
inline double input_value(ncclRedOp_t op, ncclDataType_t t, int rank, int nranks, size_t i) {
  switch (op) {
    case ncclProd: return (size_t(rank) == i % size_t(nranks)) && (i % 3 == 0) ? 2 : 1;  // product is 1 or 2
    case ncclAvg: return double((i * 5) % (is_fp8(t) ? 3 : 7));  // same on every rank: avg == value
    default: return double((size_t(rank) * 7 + i * 3) % (is_fp8(t) ? 2 : 4));  // fp8: keep nranks <= 8
  }
}

// Input value of element i on rank r for a collective that only moves data:
// hashed, so no two ranks' blocks and no two nearby offsets repeat a pattern
// (input_value's period of 4 would let rank 4's block pass for rank 0's), in
// a range of integers the type holds exactly.
inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline double moved_value(ncclDataType_t t, int rank, size_t i) {
  const uint64_t h = mix(mix(uint64_t(rank)) ^ i);
  uint64_t range = 100000;
  switch (t) {
    case ncclInt8: range = 128; break;
    case ncclUint8: range = 256; break;
    case ncclFloat16: range = 2049; break;
    case ncclBfloat16: range = 257; break;
    case ncclFloat8e4m3: range = 17; break;
    case ncclFloat8e5m2: range = 9; break;
    default: break;
  }
  return double(h % range);
}

inline double reduce_expected(ncclRedOp_t op, ncclDataType_t t, int nranks, size_t i) {
  double acc = input_value(op, t, 0, nranks, i);
  for (int r = 1; r < nranks; ++r) {
    double v = input_value(op, t, r, nranks, i);
    switch (op) {
      case ncclSum: case ncclAvg: acc += v; break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  return op == ncclAvg ? acc / nranks : acc;
}

}  // namespace mp

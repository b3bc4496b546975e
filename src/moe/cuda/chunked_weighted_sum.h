// The CUDA combine's weighted sum, 16 bytes of a token's row at a time: each
// element is the sum over k of weight[k] x result_k, every product and
// every sum rounded to float one by one (no fused multiply-add), in k
// order, as the tests' reference rounds (tests/moe/moe_reference.h).
//
// A CUDA thread takes one 16-byte chunk of a row (4 to 16 elements): it
// first loads that chunk of up to kSumBatch results, independent 16-byte
// loads all in flight at once, then does the arithmetic.  An element at a
// time, a thread had one 2-byte load in flight and waited for each.
// Written for host and device (BRAID_HD), so that the host tests check
// what the kernel computes; the host backend's combine sums in address
// order instead (src/ops/weighted_sum.h).
#pragma once

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "braid/hd.h"
#include "nccl.h"
#include "src/ops/row_elements.h"

namespace braid::moe {

// Unrolled on the device, so that the chunks stay in registers.
#if defined(__CUDA_ARCH__)
#define BRAID_SUM_UNROLL _Pragma("unroll")
#else
#define BRAID_SUM_UNROLL
#endif

constexpr int32_t kSumBatch = 8;  // results whose chunks one thread loads before it adds them

// 16 bytes of a row of T, in registers: its elements as T's storage type
// (so the host reads them as what they are; the device moves the 16 bytes
// with one 128-bit load or store).
template <ncclDataType_t T>
using ElementBits = std::conditional_t<T == ncclFloat32, float,
                                       std::conditional_t<T == ncclFloat16 || T == ncclBfloat16, uint16_t, uint8_t>>;
template <ncclDataType_t T>
struct Chunk {
  static constexpr int32_t kElements = int32_t(16 / sizeof(ElementBits<T>));
  alignas(16) ElementBits<T> e[kElements];
};

BRAID_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
BRAID_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

template <ncclDataType_t T>
BRAID_HD void load_chunk(Chunk<T>* c, const char* p) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(c->e) = *reinterpret_cast<const uint4*>(p);
#else
  memcpy(c->e, p, 16);
#endif
}
template <ncclDataType_t T>
BRAID_HD void store_chunk(char* p, const Chunk<T>& c) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(c.e);
#else
  memcpy(p, c.e, 16);
#endif
}

// Bytes [at, at + 16) of the token's output row: rows[k] is result k's row
// (null: no result, skipped), weights[k] its weight.  Every row and `out`
// 16-byte aligned, `at` a multiple of 16.
template <ncclDataType_t T>
BRAID_HD void weighted_sum_chunk(const char* const* rows, const float* weights, int32_t K, int64_t at, char* out) {
  constexpr int32_t n = Chunk<T>::kElements;
  float acc[n];
  BRAID_SUM_UNROLL
  for (int32_t j = 0; j < n; ++j) acc[j] = 0.0f;
  for (int32_t k0 = 0; k0 < K; k0 += kSumBatch) {
    Chunk<T> v[kSumBatch] = {};
    BRAID_SUM_UNROLL
    for (int32_t b = 0; b < kSumBatch; ++b)
      if (k0 + b < K && rows[k0 + b]) load_chunk(&v[b], rows[k0 + b] + at);
    BRAID_SUM_UNROLL
    for (int32_t b = 0; b < kSumBatch; ++b) {
      if (k0 + b >= K || !rows[k0 + b]) continue;
      const float w = weights[k0 + b];
      BRAID_SUM_UNROLL
      for (int32_t j = 0; j < n; ++j) acc[j] = add_rn(acc[j], mul_rn(w, element<T>(v[b].e, j)));
    }
  }
  Chunk<T> o;
  BRAID_SUM_UNROLL
  for (int32_t j = 0; j < n; ++j) set_element<T>(o.e, j, acc[j]);
  store_chunk(out + at, o);
}

// Element x of the token's output row, one element at a time: for rows or
// an output that are not 16-byte aligned.
template <ncclDataType_t T>
BRAID_HD void weighted_sum_element(const char* const* rows, const float* weights, int32_t K, int64_t x, char* out) {
  float acc = 0.0f;
  for (int32_t k = 0; k < K; ++k)
    if (rows[k]) acc = add_rn(acc, mul_rn(weights[k], element<T>(rows[k], x)));
  set_element<T>(out, x, acc);
}

#undef BRAID_SUM_UNROLL

}  // namespace braid::moe

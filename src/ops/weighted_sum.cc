// The loops of weighted_sum.h: one element loop per row type over
// row_elements.h's conversions, compiled twice where the compiler
// vectorizes it (the build's baseline, SSE2 on x86-64, and AVX2, chosen at
// run time as reduce() chooses: reduce_isa()); half converts eight at a
// time with F16C.  AVX2 without FMA: GCC would fuse acc + w * x into one
// rounding, and the bits must not depend on the CPU.
#include "src/ops/weighted_sum.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

#include "src/ops/row_elements.h"
#include "src/ops/host_kernels.h"

namespace braid {
namespace {

template <ncclDataType_t T>
void add_loop(float* acc, const void* row, float w, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += w * element<T>(row, i);
}

template <ncclDataType_t T>
void store_loop(void* row, const float* acc, size_t n) {
  for (size_t i = 0; i < n; ++i) set_element<T>(row, i, acc[i]);
}

#if defined(__x86_64__)
bool use_avx2() {
  static const bool yes = std::strcmp(reduce_isa(), "avx2") == 0;
  return yes;
}
bool use_f16c() {
  static const bool yes = use_avx2() && __builtin_cpu_supports("f16c");
  return yes;
}

template <ncclDataType_t T>
__attribute__((target("avx2"))) void add_loop_avx2(float* acc, const void* row, float w, size_t n) {
  add_loop<T>(acc, row, w, n);
}

__attribute__((target("avx2"))) void store_bf16_avx2(void* row, const float* acc, size_t n) {
  store_loop<ncclBfloat16>(row, acc, n);
}

// half -> float is exact in F16C as in half_to_float (a NaN stays a NaN
// with its payload, made quiet); returns the elements done.
__attribute__((target("avx2,f16c"))) size_t add_half_f16c(float* acc, const uint16_t* x, float w, size_t n) {
  const __m256 vw = _mm256_set1_ps(w);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(vw, v)));
  }
  return i;
}
#endif

template <ncclDataType_t T>
void add_any(float* acc, const void* row, float w, size_t n) {
#if defined(__x86_64__)
  if constexpr (T == ncclFloat16) {
    if (use_f16c()) {
      const size_t done = add_half_f16c(acc, static_cast<const uint16_t*>(row), w, n);
      return add_loop<T>(acc + done, static_cast<const uint16_t*>(row) + done, w, n - done);
    }
  } else if (use_avx2()) {
    return add_loop_avx2<T>(acc, row, w, n);
  }
#endif
  add_loop<T>(acc, row, w, n);
}

}  // namespace

void add_scaled_row(float* acc, const void* row, float w, size_t n, ncclDataType_t type) {
  with_element_type(type, [&]<ncclDataType_t T>() { add_any<T>(acc, row, w, n); });
}

void store_row(void* row, const float* acc, size_t n, ncclDataType_t type) {
  with_element_type(type, [&]<ncclDataType_t T>() {
    if constexpr (T == ncclFloat32) {
      std::memcpy(row, acc, n * sizeof(float));
      return;
    }
#if defined(__x86_64__)
    if constexpr (T == ncclBfloat16) {
      if (use_avx2()) return store_bf16_avx2(row, acc, n);
    }
#endif
    store_loop<T>(row, acc, n);
  });
}

}  // namespace braid

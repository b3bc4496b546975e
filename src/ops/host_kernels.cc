// Host reductions for every NCCL datatype: loops over the element semantics
// in src/ops/reduce_ops.h, which the CUDA kernels share.
#include "src/ops/host_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>  // SSE2 (every x86-64); AVX2/F16C paths are chosen at run time
#endif

#include <cstring>
#include <type_traits>

#include "src/base/env.h"
#include "src/ops/reduce_ops.h"

namespace braid {
namespace {

// Whole-buffer loops over reduce_ops.h's element semantics.  The op is a
// template parameter so each loop is branch-free and the compiler vectorizes
// the native types; narrow floats convert element by element in registers.
template <ReduceKind K, typename S>
inline void reduce_loop(void* dst, const void* a, const void* b, size_t n) {
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = reduce_elem<K>(x[i], y[i]);
}

#if defined(__x86_64__)
// The same loop compiled for AVX2 (32-byte vectors; the default build may
// only assume SSE2).  Element-wise, so the bits are the same as the scalar
// semantics.  It pays where the data is in cache, as the executor's slot
// fragments are; from memory it makes no difference (perf/results/
// compare_20261125j.txt section 1).
// BRAID_REDUCE_ISA=baseline keeps the build's own loops on a CPU with AVX2,
// so that the tests run those too (comm init rejects other values).
bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && env_string("BRAID_REDUCE_ISA") != "baseline";
  return yes;
}

template <ReduceKind K, typename S>
__attribute__((target("avx2"))) void reduce_loop_avx2(void* dst, const void* a, const void* b, size_t n) {
  reduce_loop<K, S>(dst, a, b, n);
}
#endif

// reduce_loop for a native type, on the widest vectors this CPU has.
template <ReduceKind K, typename S>
void reduce_native(void* dst, const void* a, const void* b, size_t n) {
#if defined(__x86_64__)
  if (have_avx2()) return reduce_loop_avx2<K, S>(dst, a, b, n);
#endif
  reduce_loop<K, S>(dst, a, b, n);
}

// fp8 (F: E4M3 or E5M2 of float_formats.h), one element at a time (the
// baseline, and the tail of the vector loop fp8_avx2): decoding is a
// 256-entry table built from the shared decoder (so bit-identical by
// construction); encoding is the shared integer code.
template <class F>
const float* fp8_table() {
  static const struct Table {
    float v[256];
    Table() {
      for (int i = 0; i < 256; ++i) v[i] = F::decode(uint32_t(i));
    }
  } table;
  return table.v;
}

template <ReduceKind K, class F>
void fp8_loop(uint8_t* d, const uint8_t* x, const uint8_t* y, size_t n) {
  const float* v = fp8_table<F>();
  for (size_t i = 0; i < n; ++i) d[i] = uint8_t(F::template encode<true>(combine<K>(v[x[i]], v[y[i]])));
}

#if defined(__x86_64__)
// half and bfloat16, 8 elements at a time in AVX2 registers: widen to float,
// combine, round back to nearest even.  Same float arithmetic as
// reduce_elem (a (op) b in that order: NaN propagation follows the first
// operand as the scalar code does).  half uses the F16C converters; their
// rounding is the same RNE, but a NaN result keeps its payload where the
// shared encoder returns the canonical quiet NaN, so blocks holding a NaN
// are redone by the scalar code.
template <ReduceKind K>
__attribute__((target("avx2,fma"))) inline __m256 combine8(__m256 a, __m256 b) {
  if constexpr (K == ReduceKind::Sum) return _mm256_add_ps(a, b);
  else if constexpr (K == ReduceKind::Prod) return _mm256_mul_ps(a, b);
  else if constexpr (K == ReduceKind::Max) return _mm256_max_ps(a, b);  // a > b ? a : b, as combine()
  else return _mm256_min_ps(a, b);                                       // a < b ? a : b
}

template <ReduceKind K>
__attribute__((target("avx2,f16c,fma"))) size_t half_avx2(uint16_t* d, const uint16_t* x, const uint16_t* y,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    __m256 r = combine8<K>(a, b);
    if (_mm256_movemask_ps(_mm256_cmp_ps(r, r, _CMP_UNORD_Q))) {
      for (size_t j = i; j < i + 8; ++j) d[j] = reduce_elem<K>(half_bits{x[j]}, half_bits{y[j]}).v;
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

// Eight bfloat16 (as the high halves of floats' bits) combined and rounded
// to nearest even, each result in the low half of its 32-bit lane.
template <ReduceKind K>
__attribute__((target("avx2,fma"))) inline __m256i bf16_combine8(__m256i xa, __m256i yb) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  __m256i u = _mm256_castps_si256(combine8<K>(_mm256_castsi256_ps(xa), _mm256_castsi256_ps(yb)));
  // float_to_bf16: NaN -> (u >> 16) | 0x40; else round to nearest even
  // (the logical shifts leave at most 16 bits, as the packs need).
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet), nan);
}

// bfloat16, sixteen elements at a time: interleaving a register of them
// with zeros makes two registers of floats (elements 0-3 and 8-11, then 4-7
// and 12-15), and the pack of the two results puts them back in order.
// Eight at a time for the rest.  Faster in cache than the loop before it,
// eight at a time, widened and packed each round (perf/results/
// bf16_reduce.txt).
template <ReduceKind K>
__attribute__((target("avx2,fma"))) size_t bf16_avx2(uint16_t* d, const uint16_t* x, const uint16_t* y, size_t n) {
  const __m256i zero = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i vx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i vy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i));
    const __m256i lo = bf16_combine8<K>(_mm256_unpacklo_epi16(zero, vx), _mm256_unpacklo_epi16(zero, vy));
    const __m256i hi = bf16_combine8<K>(_mm256_unpackhi_epi16(zero, vx), _mm256_unpackhi_epi16(zero, vy));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_packus_epi32(lo, hi));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i xa = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))), 16);
    const __m256i yb = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i))), 16);
    const __m256i r = bf16_combine8<K>(xa, yb);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
  return i;
}

// fp8 -> float on eight lanes, through half and the F16C converter (exact:
// both formats fit in half with room to spare).  e5m2 is the top byte of a
// half.  e4m3's seven magnitude bits, placed as a half's exponent and top
// mantissa bits, read as the value times 2^-8 (normal and subnormal alike:
// the exponent biases differ by 8), so the float is scaled back; its one NaN
// pattern would read as a number, so it becomes half's quiet NaN.  The same
// bits as fp8_table (F16C makes a NaN quiet and keeps its payload, as
// decode() does).  At least as fast as computing decode()'s cases in
// 32-bit lanes, and well ahead of gathering from fp8_table (perf/results/
// fp8_reduce.txt).
template <class F>
__attribute__((target("avx2,f16c,fma"))) inline __m256 fp8_decode8(const uint8_t* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  if constexpr (F::kIeeeLike) {
    static_assert(F::kExpBits == 5, "e5m2: a half's top byte");
    return _mm256_cvtph_ps(_mm_slli_epi16(b, 8));
  } else {
    static_assert(F::kExpBits == 4 && F::kManBits == 3, "e4m3");
    const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8);
    const __m128i h = _mm_blendv_epi8(_mm_or_si128(_mm_slli_epi16(mag, 7), sign),
                                      _mm_or_si128(_mm_set1_epi16(0x7e00), sign),  // half's quiet NaN
                                      _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));  // a NaN passes unchanged
  }
}

// fp8, 8 elements at a time in AVX2 registers: decoded (fp8_decode8),
// combined in float (combine8, as for half), and encoded as
// SmallFloat::encode<true> does, on every lane at once: both of its
// branches (a normal or a subnormal in the format) are computed and the
// right one blended in, then NaN.  Bit for bit the scalar code, NaN
// included (the format's NaN with the result's sign, as encode() gives).
// Several times faster than the scalar loop in cache, though still slower
// than half (perf/results/fp8_reduce.txt).
template <ReduceKind K, class F>
__attribute__((target("avx2,f16c,fma"))) size_t fp8_avx2(uint8_t* d, const uint8_t* x, const uint8_t* y, size_t n) {
  static_assert(F::kSign == 0x80, "an 8-bit format");
  constexpr int M = F::kManBits, kShift = 23 - M, kBias = F::kBias;
  const __m256i one = _mm256_set1_epi32(1), abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000), sign_bit = _mm256_set1_epi32(0x80);
  const __m256i round_bias = _mm256_set1_epi32((1 << (kShift - 1)) - 1);
  const __m256i rebias = _mm256_set1_epi32((127 - kBias) << M);  // float exponent bias -> the format's
  const __m256i max_finite = _mm256_set1_epi32(int(F::kMaxFinite)), nan = _mm256_set1_epi32(int(F::kNaN));
  const __m256i below_normal = _mm256_set1_epi32(127 - kBias);  // biased float exponents of the format's subnormals
  // 2^(24 - bias - M): a float whose last mantissa bit weighs the format's subnormal quantum.
  const __m256 magic = _mm256_castsi256_ps(_mm256_set1_epi32((127 + 24 - kBias - M) << 23));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r = combine8<K>(fp8_decode8<F>(x + i), fp8_decode8<F>(y + i));
    const __m256i u = _mm256_castps_si256(r);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), sign_bit);
    const __m256i a = _mm256_and_si256(u, abs_mask), exp = _mm256_srli_epi32(a, 23);
    // Normal in the format: drop kShift mantissa bits rounding to nearest
    // even, rebias the exponent, saturate (infinity lands here too).
    const __m256i rounded =
        _mm256_add_epi32(a, _mm256_add_epi32(round_bias, _mm256_and_si256(_mm256_srli_epi32(a, kShift), one)));
    const __m256i normal = _mm256_min_epi32(_mm256_sub_epi32(_mm256_srli_epi32(rounded, kShift), rebias), max_finite);
    // Subnormal (or zero) in the format: adding `magic` makes the float
    // unit round to nearest even at the format's quantum, so the sum's low
    // bits are the quanta (the smallest normal, 1 << M, included).  Float
    // subnormals give 0, as in encode().
    const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)),
                                         _mm256_castps_si256(magic));
    __m256i res = _mm256_blendv_epi8(sub, normal, _mm256_cmpgt_epi32(exp, below_normal));
    res = _mm256_or_si256(_mm256_blendv_epi8(res, nan, _mm256_cmpgt_epi32(a, inf)), sign);
    // Eight 32-bit lanes (each < 256) to eight bytes, in order.
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(res), _mm256_extracti128_si256(res, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(d + i), _mm_packus_epi16(words, words));
  }
  return i;
}

bool have_avx2_f16c() {
  static const bool yes = have_avx2() && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

// The loop for one (storage type, op): vector code where there is some,
// the shared element semantics for the rest.
template <ReduceKind K, typename S>
void reduce_any(void* dst, const void* a, const void* b, size_t n) {
  if constexpr (std::is_arithmetic_v<S>) {
    reduce_native<K, S>(dst, a, b, n);
  } else if constexpr (std::is_same_v<S, e4m3_bits> || std::is_same_v<S, e5m2_bits>) {
    using F = std::conditional_t<std::is_same_v<S, e4m3_bits>, E4M3, E5M2>;
    auto* d = static_cast<uint8_t*>(dst);
    auto* x = static_cast<const uint8_t*>(a);
    auto* y = static_cast<const uint8_t*>(b);
    size_t done = 0;
#if defined(__x86_64__)
    if (have_avx2_f16c()) done = fp8_avx2<K, F>(d, x, y, n);
#endif
    fp8_loop<K, F>(d + done, x + done, y + done, n - done);
  } else {
    size_t done = 0;
#if defined(__x86_64__)
    if constexpr (std::is_same_v<S, half_bits> || std::is_same_v<S, bf16_bits>) {
      if (have_avx2_f16c()) {
        auto* d = static_cast<uint16_t*>(dst);
        auto* x = static_cast<const uint16_t*>(a);
        auto* y = static_cast<const uint16_t*>(b);
        done = std::is_same_v<S, half_bits> ? half_avx2<K>(d, x, y, n) : bf16_avx2<K>(d, x, y, n);
      }
    }
#endif
    reduce_loop<K, S>(static_cast<S*>(dst) + done, static_cast<const S*>(a) + done, static_cast<const S*>(b) + done,
                      n - done);
  }
}

template <typename S>
void divide_loop(void* data, size_t n, int divisor) {
  S* p = static_cast<S*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = divide_elem(p[i], divisor);
}

}  // namespace

const char* reduce_isa() {
#if defined(__x86_64__)
  if (have_avx2()) return "avx2";
#endif
  return "baseline";
}

void reduce(void* dst, const void* a, const void* b, size_t n, ncclDataType_t type, ncclRedOp_t op) {
  ReduceKind kind;
  if (!reduce_kind_of(op, &kind)) return;
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    with_reduce_kind(kind, [&](auto k) { reduce_any<decltype(k)::value, S>(dst, a, b, n); });
  });
}

namespace {

// Blocks the fused forms work in: small enough to stay in L1 between the
// reduction and the copies out of it.
constexpr size_t kBlockBytes = 8192;

// Non-temporal copy: 16-byte streaming stores (SSE2, every x86-64) once dst
// is aligned; the write-combining buffers merge them into full lines.
#if defined(__x86_64__)
void stream_copy(char* dst, const char* src, size_t bytes) {
  size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (head > bytes) head = bytes;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  size_t body = bytes & ~size_t(63);
  for (size_t i = 0; i < body; i += 64) {
    __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), x0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), x1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), x2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), x3);
  }
  std::memcpy(dst + body, src + body, bytes - body);
}
#else
void stream_copy(char* dst, const char* src, size_t bytes) { std::memcpy(dst, src, bytes); }
#endif

}  // namespace

#if defined(__x86_64__)
void store_fence() { _mm_sfence(); }
#else
void store_fence() {}
#endif

void copy_unfenced(void* dst, const void* src, size_t bytes, bool stream) {
  if (stream) stream_copy(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  else std::memcpy(dst, src, bytes);
}

void reduce_to(void* dst, void* dst2, const void* a, const void* b, size_t n, ncclDataType_t type, ncclRedOp_t op,
               bool stream_dst2) {
  if (!dst2) return reduce(dst, a, b, n, type, op);
  // Block by block, so each block of dst is still in L1 when copied to dst2.
  const size_t es = datatype_size(type), block = kBlockBytes / es;
  char* d = static_cast<char*>(dst);
  char* d2 = static_cast<char*>(dst2);
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  for (size_t i = 0; i < n; i += block) {
    const size_t m = n - i < block ? n - i : block, off = i * es;
    reduce(d + off, x + off, y + off, m, type, op);
    copy_unfenced(d2 + off, d + off, m * es, stream_dst2);
  }
  if (stream_dst2) store_fence();
}

void copy_to(void* dst, void* dst2, const void* src, size_t bytes, bool stream, bool stream_dst2) {
  char* d = static_cast<char*>(dst);
  char* d2 = static_cast<char*>(dst2);
  const char* s = static_cast<const char*>(src);
  // Block by block, so the second copy reads src from L1.
  for (size_t off = 0; off < bytes; off += kBlockBytes) {
    const size_t m = bytes - off < kBlockBytes ? bytes - off : kBlockBytes;
    copy_unfenced(d + off, s + off, m, stream);
    if (d2) copy_unfenced(d2 + off, s + off, m, stream_dst2);
  }
  if (stream || (d2 && stream_dst2)) store_fence();
}

namespace {

// reduce_many's streamed form for the native types: one 64-byte line of
// elements at a time in a local array (registers, SSE2: compiled for AVX2,
// GCC spilled it), folded over every source, then stored to every
// destination with streaming stores (plain ones where a destination is not
// 16-byte aligned), so the loads of the sources and the stores of the
// outputs stay in flight together.
template <ReduceKind K, typename S>
void reduce_lines(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t n, int divisor) {
  constexpr size_t kLine = 64 / sizeof(S);
  const S* const* in = reinterpret_cast<const S* const*>(srcs);
  S* const* out = reinterpret_cast<S* const*>(dsts);
  bool aligned = true;  // streaming stores need 16-byte aligned lines
  for (int d = 0; d < ndst; ++d) aligned &= reinterpret_cast<uintptr_t>(out[d]) % 16 == 0;
  size_t i = 0;
  for (; i + kLine <= n; i += kLine) {
    alignas(64) S v[kLine];
    for (size_t j = 0; j < kLine; ++j) v[j] = reduce_elem<K>(in[0][i + j], in[1][i + j]);
    for (int s = 2; s < nsrc; ++s)
      for (size_t j = 0; j < kLine; ++j) v[j] = reduce_elem<K>(v[j], in[s][i + j]);
    if (divisor > 0)
      for (size_t j = 0; j < kLine; ++j) v[j] = divide_elem(v[j], divisor);
    for (int d = 0; d < ndst; ++d) {
#if defined(__x86_64__)
      if (aligned) {
        const __m128i* x = reinterpret_cast<const __m128i*>(v);
        __m128i* y = reinterpret_cast<__m128i*>(out[d] + i);
        _mm_stream_si128(y, _mm_load_si128(x));
        _mm_stream_si128(y + 1, _mm_load_si128(x + 1));
        _mm_stream_si128(y + 2, _mm_load_si128(x + 2));
        _mm_stream_si128(y + 3, _mm_load_si128(x + 3));
        continue;
      }
#endif
      std::memcpy(out[d] + i, v, sizeof v);
    }
  }
  for (; i < n; ++i) {
    S v = reduce_elem<K>(in[0][i], in[1][i]);
    for (int s = 2; s < nsrc; ++s) v = reduce_elem<K>(v, in[s][i]);
    if (divisor > 0) v = divide_elem(v, divisor);
    for (int d = 0; d < ndst; ++d) out[d][i] = v;
  }
}

}  // namespace

void reduce_many(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t n, ncclDataType_t type,
                 ncclRedOp_t op, int divisor, bool stream) {
  ReduceKind kind;
  const size_t es = datatype_size(type);
  if (!reduce_kind_of(op, &kind) || es == 0) return;
  // Streamed outputs out of place (large buffers, memory-bound): line by
  // line.  Otherwise block by block through a staging block that stays in
  // L1: reduce()'s vector loops (AVX2 where there is) fold every source into
  // it, then it is copied to every destination.  The blocks won in cache
  // and in place, and lost streamed out of place (perf/results/
  // compare_20261125j.txt section 1).  A destination aliasing a source (at
  // the same index) is written only after that block of every source has
  // been read.
  bool in_place = false;
  for (int d = 0; d < ndst; ++d)
    for (int s = 0; s < nsrc; ++s) in_place |= dsts[d] == srcs[s];
  if (stream && !in_place) {
    bool by_lines = false;  // native types only: the narrow floats convert a block at a time
    with_storage_type(type, [&](auto storage) {
      using S = decltype(storage);
      if constexpr (std::is_arithmetic_v<S>) {
        by_lines = true;
        with_reduce_kind(kind, [&](auto k) {
          reduce_lines<decltype(k)::value, S>(dsts, ndst, srcs, nsrc, n, divisor);
        });
      }
    });
    if (by_lines) return;
  }
  const size_t block = kBlockBytes / es;
  alignas(64) char tmp[kBlockBytes];
  for (size_t i = 0; i < n; i += block) {
    const size_t m = n - i < block ? n - i : block, off = i * es;
    reduce(tmp, static_cast<const char*>(srcs[0]) + off, static_cast<const char*>(srcs[1]) + off, m, type, op);
    for (int s = 2; s < nsrc; ++s) reduce(tmp, tmp, static_cast<const char*>(srcs[s]) + off, m, type, op);
    if (divisor > 0) divide_by(tmp, m, type, divisor);
    for (int d = 0; d < ndst; ++d) copy_unfenced(static_cast<char*>(dsts[d]) + off, tmp, m * es, stream);
  }
}

void divide_by(void* data, size_t n, ncclDataType_t type, int divisor) {
  if (divisor == 1) return;
  with_storage_type(type, [&](auto storage) { divide_loop<decltype(storage)>(data, n, divisor); });
}

}  // namespace braid

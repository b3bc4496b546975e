// Host reductions for every NCCL datatype.
//
// Integer and float/double loops are plain element-wise loops the compiler
// vectorizes.  Narrow floats (half, bfloat16, fp8) are widened to float in
// blocks, combined, and rounded back (round to nearest even), which is how
// NCCL's kernels compute them too.  Signed integers wrap like NCCL's (done in
// unsigned arithmetic to stay defined behaviour in C++).
#include "src/core/datatype.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "src/core/float_formats.h"

namespace braid {
namespace {

template <typename T>
struct Sum { static T apply(T a, T b) { return a + b; } };
template <typename T>
struct Prod { static T apply(T a, T b) { return a * b; } };
template <typename T>
struct Max { static T apply(T a, T b) { return a > b ? a : b; } };
template <typename T>
struct Min { static T apply(T a, T b) { return a < b ? a : b; } };

// Signed integer + and * in unsigned arithmetic (wraps, no UB).
template <typename T>
struct WrapSum {
  static T apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return T(U(a) + U(b));
  }
};
template <typename T>
struct WrapProd {
  static T apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return T(U(a) * U(b));
  }
};

template <typename T, typename Op>
void loop(T* dst, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
}

template <typename T>
void reduce_native(void* dst, const void* a, const void* b, size_t n, ncclRedOp_t op) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  constexpr bool kSigned = std::is_integral_v<T> && std::is_signed_v<T>;
  switch (op) {
    case ncclSum:
    case ncclAvg:
      if constexpr (kSigned) loop<T, WrapSum<T>>(d, x, y, n);
      else loop<T, Sum<T>>(d, x, y, n);
      break;
    case ncclProd:
      if constexpr (kSigned) loop<T, WrapProd<T>>(d, x, y, n);
      else loop<T, Prod<T>>(d, x, y, n);
      break;
    case ncclMax: loop<T, Max<T>>(d, x, y, n); break;
    case ncclMin: loop<T, Min<T>>(d, x, y, n); break;
    default: break;
  }
}

// 64K-entry decode table: half -> float is on the hot path of fp16 reductions.
const float* half_table() {
  static const std::array<float, 65536>* table = [] {
    auto* t = new std::array<float, 65536>;
    for (uint32_t i = 0; i < 65536; ++i) (*t)[i] = half_to_float(uint16_t(i));
    return t;
  }();
  return table->data();
}

inline uint16_t encode_half(float f) {
#if defined(__FLT16_MAX__)
  return std::bit_cast<uint16_t>(static_cast<_Float16>(f));
#else
  return float_to_half(f);
#endif
}

template <typename Storage, typename Decode, typename Encode>
void reduce_narrow(void* dst, const void* a, const void* b, size_t n, ncclRedOp_t op, Decode decode,
                   Encode encode) {
  Storage* d = static_cast<Storage*>(dst);
  const Storage* x = static_cast<const Storage*>(a);
  const Storage* y = static_cast<const Storage*>(b);
  constexpr size_t kBlock = 256;
  float fa[kBlock], fb[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) {
      fa[i] = decode(x[base + i]);
      fb[i] = decode(y[base + i]);
    }
    reduce_native<float>(fa, fa, fb, m, op);
    for (size_t i = 0; i < m; ++i) d[base + i] = encode(fa[i]);
  }
}

template <typename T>
void divide_native(void* data, size_t n, int divisor) {
  T* p = static_cast<T*>(data);
  if constexpr (std::is_integral_v<T>) {
    for (size_t i = 0; i < n; ++i) p[i] = T(p[i] / T(divisor));
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = p[i] / T(divisor);
  }
}

template <typename Storage, typename Decode, typename Encode>
void divide_narrow(void* data, size_t n, int divisor, Decode decode, Encode encode) {
  Storage* p = static_cast<Storage*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = encode(decode(p[i]) / float(divisor));
}

}  // namespace

size_t datatype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* datatype_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "half";
    case ncclFloat32: return "float";
    case ncclFloat64: return "double";
    case ncclBfloat16: return "bfloat16";
    case ncclFloat8e4m3: return "f8e4m3";
    case ncclFloat8e5m2: return "f8e5m2";
    default: return "invalid";
  }
}

const char* redop_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "premulsum";
  }
}

void reduce(void* dst, const void* a, const void* b, size_t n, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclInt8: return reduce_native<int8_t>(dst, a, b, n, op);
    case ncclUint8: return reduce_native<uint8_t>(dst, a, b, n, op);
    case ncclInt32: return reduce_native<int32_t>(dst, a, b, n, op);
    case ncclUint32: return reduce_native<uint32_t>(dst, a, b, n, op);
    case ncclInt64: return reduce_native<int64_t>(dst, a, b, n, op);
    case ncclUint64: return reduce_native<uint64_t>(dst, a, b, n, op);
    case ncclFloat32: return reduce_native<float>(dst, a, b, n, op);
    case ncclFloat64: return reduce_native<double>(dst, a, b, n, op);
    case ncclFloat16: {
      const float* table = half_table();
      return reduce_narrow<uint16_t>(dst, a, b, n, op, [table](uint16_t h) { return table[h]; }, encode_half);
    }
    case ncclBfloat16: return reduce_narrow<uint16_t>(dst, a, b, n, op, bf16_to_float, float_to_bf16);
    case ncclFloat8e4m3: return reduce_narrow<uint8_t>(dst, a, b, n, op, e4m3_to_float, float_to_e4m3);
    case ncclFloat8e5m2: return reduce_narrow<uint8_t>(dst, a, b, n, op, e5m2_to_float, float_to_e5m2);
    default: return;
  }
}

void divide_by(void* data, size_t n, ncclDataType_t type, int divisor) {
  if (divisor == 1) return;
  switch (type) {
    case ncclInt8: return divide_native<int8_t>(data, n, divisor);
    case ncclUint8: return divide_native<uint8_t>(data, n, divisor);
    case ncclInt32: return divide_native<int32_t>(data, n, divisor);
    case ncclUint32: return divide_native<uint32_t>(data, n, divisor);
    case ncclInt64: return divide_native<int64_t>(data, n, divisor);
    case ncclUint64: return divide_native<uint64_t>(data, n, divisor);
    case ncclFloat32: return divide_native<float>(data, n, divisor);
    case ncclFloat64: return divide_native<double>(data, n, divisor);
    case ncclFloat16: return divide_narrow<uint16_t>(data, n, divisor, half_to_float, encode_half);
    case ncclBfloat16: return divide_narrow<uint16_t>(data, n, divisor, bf16_to_float, float_to_bf16);
    case ncclFloat8e4m3: return divide_narrow<uint8_t>(data, n, divisor, e4m3_to_float, float_to_e4m3);
    case ncclFloat8e5m2: return divide_narrow<uint8_t>(data, n, divisor, e5m2_to_float, float_to_e5m2);
    default: return;
  }
}

}  // namespace braid

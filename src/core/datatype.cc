// Host reductions for every NCCL datatype: loops over the element semantics
// in src/core/reduce_ops.h, which the CUDA kernels share.
#include "src/core/datatype.h"

#include <emmintrin.h>  // SSE2: part of every x86-64

#include <cstring>

#include "src/core/reduce_ops.h"

namespace braid {
namespace {

// Whole-buffer loops over reduce_ops.h's element semantics.  The op is a
// template parameter so each loop is branch-free and the compiler vectorizes
// the native types; narrow floats convert element by element in registers.
template <ReduceKind K, typename S>
void reduce_loop(void* dst, const void* a, const void* b, size_t n) {
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = reduce_elem<K>(x[i], y[i]);
}

template <typename S>
void divide_loop(void* data, size_t n, int divisor) {
  S* p = static_cast<S*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = divide_elem(p[i], divisor);
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
  ReduceKind kind;
  if (!reduce_kind_of(op, &kind)) return;
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    with_reduce_kind(kind, [&](auto k) { reduce_loop<decltype(k)::value, S>(dst, a, b, n); });
  });
}

namespace {

// Blocks the fused forms work in: small enough to stay in L1 between the
// reduction and the copies out of it.
constexpr size_t kBlockBytes = 8192;

// Non-temporal copy: 16-byte streaming stores (SSE2, every x86-64) once dst
// is aligned; the write-combining buffers merge them into full lines.
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

}  // namespace

void reduce_to(void* dst, void* dst2, const void* a, const void* b, size_t n, ncclDataType_t type, ncclRedOp_t op,
               bool stream) {
  const size_t es = datatype_size(type);
  if (!stream && !dst2) return reduce(dst, a, b, n, type, op);
  const size_t block = kBlockBytes / es;
  alignas(64) char tmp[kBlockBytes];
  char* d = static_cast<char*>(dst);
  char* d2 = static_cast<char*>(dst2);
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  for (size_t i = 0; i < n; i += block) {
    const size_t m = n - i < block ? n - i : block, off = i * es, bytes = m * es;
    if (stream) {
      reduce(tmp, x + off, y + off, m, type, op);
      stream_copy(d + off, tmp, bytes);
      if (d2) std::memcpy(d2 + off, tmp, bytes);
    } else {
      reduce(d + off, x + off, y + off, m, type, op);
      std::memcpy(d2 + off, d + off, bytes);
    }
  }
  if (stream) _mm_sfence();  // streaming stores are weakly ordered: publish before anyone looks
}

void copy_to(void* dst, void* dst2, const void* src, size_t bytes, bool stream) {
  char* d = static_cast<char*>(dst);
  char* d2 = static_cast<char*>(dst2);
  const char* s = static_cast<const char*>(src);
  // Block by block, so the second copy reads src from L1.
  for (size_t off = 0; off < bytes; off += kBlockBytes) {
    const size_t m = bytes - off < kBlockBytes ? bytes - off : kBlockBytes;
    if (stream) stream_copy(d + off, s + off, m);
    else std::memcpy(d + off, s + off, m);
    if (d2) std::memcpy(d2 + off, s + off, m);
  }
  if (stream) _mm_sfence();
}

void divide_by(void* data, size_t n, ncclDataType_t type, int divisor) {
  if (divisor == 1) return;
  with_storage_type(type, [&](auto storage) { divide_loop<decltype(storage)>(data, n, divisor); });
}

}  // namespace braid

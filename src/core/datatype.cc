// Host reductions for every NCCL datatype: loops over the element semantics
// in src/core/reduce_ops.h, which the CUDA kernels share.
#include "src/core/datatype.h"

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

void divide_by(void* data, size_t n, ncclDataType_t type, int divisor) {
  if (divisor == 1) return;
  with_storage_type(type, [&](auto storage) { divide_loop<decltype(storage)>(data, n, divisor); });
}

}  // namespace braid

// The reduction semantics of every NCCL datatype, element by element, for
// host loops and CUDA kernels alike (BRAID_HD).
//
// Storage types: the native C types, plus tag structs for the narrow floats
// (half, bfloat16, fp8 e4m3/e5m2) which are widened to float, combined and
// rounded back to nearest even: what NCCL's kernels do too.  Signed integer
// sum/prod wrap like NCCL's; done in unsigned arithmetic so it is defined C++.
// max/min use a > b / a < b (a NaN operand in b loses, as in NCCL's device code
// for the non-fp32 types).
#pragma once

#include <cstdint>
#include <type_traits>

#include "nccl.h"
#include "src/ops/float_formats.h"
#include "braid/hd.h"

namespace braid {

enum class ReduceKind : uint8_t { Sum, Prod, Max, Min };

// ncclAvg reduces as Sum (the division happens once, at the end).
BRAID_HD bool reduce_kind_of(ncclRedOp_t op, ReduceKind* kind) {
  switch (op) {
    case ncclSum:
    case ncclAvg: *kind = ReduceKind::Sum; return true;
    case ncclProd: *kind = ReduceKind::Prod; return true;
    case ncclMax: *kind = ReduceKind::Max; return true;
    case ncclMin: *kind = ReduceKind::Min; return true;
    default: return false;
  }
}

struct half_bits { uint16_t v; };
struct bf16_bits { uint16_t v; };
struct e4m3_bits { uint8_t v; };
struct e5m2_bits { uint8_t v; };

// Compute type and conversions for one storage type.
template <typename S>
struct Elem {
  using Compute = S;
  BRAID_HD static S load(S s) { return s; }
  BRAID_HD static S store(S c) { return c; }
};
template <>
struct Elem<half_bits> {
  using Compute = float;
  BRAID_HD static float load(half_bits s) { return half_to_float(s.v); }
  BRAID_HD static half_bits store(float c) { return {float_to_half(c)}; }
};
template <>
struct Elem<bf16_bits> {
  using Compute = float;
  BRAID_HD static float load(bf16_bits s) { return bf16_to_float(s.v); }
  BRAID_HD static bf16_bits store(float c) { return {float_to_bf16(c)}; }
};
template <>
struct Elem<e4m3_bits> {
  using Compute = float;
  BRAID_HD static float load(e4m3_bits s) { return e4m3_to_float(s.v); }
  BRAID_HD static e4m3_bits store(float c) { return {float_to_e4m3(c)}; }
};
template <>
struct Elem<e5m2_bits> {
  using Compute = float;
  BRAID_HD static float load(e5m2_bits s) { return e5m2_to_float(s.v); }
  BRAID_HD static e5m2_bits store(float c) { return {float_to_e5m2(c)}; }
};

// The type signed-integer arithmetic is done in (wraps instead of UB).
template <typename C, bool = std::is_integral_v<C>>
struct WrapType { using type = C; };
template <typename C>
struct WrapType<C, true> { using type = std::make_unsigned_t<C>; };

template <ReduceKind K, typename C>
BRAID_HD C combine(C a, C b) {
  using U = typename WrapType<C>::type;
  if constexpr (K == ReduceKind::Sum) return C(U(a) + U(b));
  else if constexpr (K == ReduceKind::Prod) return C(U(a) * U(b));
  else if constexpr (K == ReduceKind::Max) return a > b ? a : b;
  else return a < b ? a : b;
}

template <ReduceKind K, typename S>
BRAID_HD S reduce_elem(S a, S b) {
  return Elem<S>::store(combine<K>(Elem<S>::load(a), Elem<S>::load(b)));
}

// Avg's final step: integer division for integer types.
template <typename S>
BRAID_HD S divide_elem(S a, int divisor) {
  using C = typename Elem<S>::Compute;
  return Elem<S>::store(C(Elem<S>::load(a) / C(divisor)));
}

// Calls f(S{}) with the storage type of `type`; false for an invalid type.
template <typename F>
BRAID_HD bool with_storage_type(ncclDataType_t type, F&& f) {
  switch (type) {
    case ncclInt8: f(int8_t{}); return true;
    case ncclUint8: f(uint8_t{}); return true;
    case ncclInt32: f(int32_t{}); return true;
    case ncclUint32: f(uint32_t{}); return true;
    case ncclInt64: f(int64_t{}); return true;
    case ncclUint64: f(uint64_t{}); return true;
    case ncclFloat16: f(half_bits{}); return true;
    case ncclFloat32: f(float{}); return true;
    case ncclFloat64: f(double{}); return true;
    case ncclBfloat16: f(bf16_bits{}); return true;
    case ncclFloat8e4m3: f(e4m3_bits{}); return true;
    case ncclFloat8e5m2: f(e5m2_bits{}); return true;
    default: return false;
  }
}

template <typename F>
BRAID_HD void with_reduce_kind(ReduceKind kind, F&& f) {
  switch (kind) {
    case ReduceKind::Sum: f(std::integral_constant<ReduceKind, ReduceKind::Sum>{}); break;
    case ReduceKind::Prod: f(std::integral_constant<ReduceKind, ReduceKind::Prod>{}); break;
    case ReduceKind::Max: f(std::integral_constant<ReduceKind, ReduceKind::Max>{}); break;
    case ReduceKind::Min: f(std::integral_constant<ReduceKind, ReduceKind::Min>{}); break;
  }
}

}  // namespace braid

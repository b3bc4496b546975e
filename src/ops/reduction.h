// A collective's reduction, normalised once where the call enters braid
// (src/shim/api_coll.cc), so that no executor re-derives it.
//
// NCCL has five built-in ops and user PreMulSum ops; every executor folds
// with one of four element ops (Sum, Prod, Max, Min: reduce_ops.h), then
// may divide the result (Avg: Sum, then / nranks) or must first scale each
// rank's input by a scalar (PreMulSum: x * scalar, then Sum).
#pragma once

#include <cstdint>

#include "braid/schedule.h"
#include "nccl.h"

namespace braid {

// A ncclRedOpCreatePreMulSum op: sum of (scalar * input).  Immediate scalars
// are copied at creation; "device" ones (host memory on the host backend)
// are read when a collective runs, as NCCL reads them when its kernel runs.
struct PreMulSumOp {
  ncclDataType_t type = ncclFloat;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  uint64_t immediate = 0;         // the scalar's bytes (up to 8)
  const void* pointer = nullptr;  // ncclScalarDevice
};

struct Reduction {
  ncclRedOp_t fold = ncclSum;  // Sum, Prod, Max or Min: what every partial result is combined with
  int divisor = 0;             // > 0: the result is divided by it (Avg: the rank count)
  bool premul = false;         // each input is scaled by `scalar` first (PreMulSum)
  PreMulSumOp scalar;
};

// Whether a collective combines its ranks' inputs (its reduction matters).
constexpr bool collective_reduces(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}

// The reduction of a call of `c` with `op` on `nranks` ranks: `premul` is
// the op's definition when it is a PreMulSum op (nullptr otherwise).
Reduction normalise_reduction(Collective c, ncclRedOp_t op, const PreMulSumOp* premul, int nranks);

}  // namespace braid

// Weighted sums of rows in float, for MoE's combine on the host: each
// token's output is the sum over its top-k choices of weight x the expert's
// row.  Rows hold float, half, bfloat16 or fp8; the sum is kept in float
// and rounded to the row type once, at the end.
#pragma once

#include <cstddef>

#include "nccl.h"

namespace braid {

// acc[i] += w * row[i] for i < n: the row's elements widened to float
// (exactly), multiplied and added in float (two roundings, never fused, so
// every ISA gives the same bits).  type: ncclFloat32, ncclFloat16,
// ncclBfloat16, ncclFloat8e4m3 or ncclFloat8e5m2 (any other reads as e5m2).
void add_scaled_row(float* acc, const void* row, float w, size_t n, ncclDataType_t type);

// row[i] = acc[i] rounded to `type` (nearest even; fp8 saturates), as
// src/ops/float_formats.h's encoders.
void store_row(void* row, const float* acc, size_t n, ncclDataType_t type);

}  // namespace braid

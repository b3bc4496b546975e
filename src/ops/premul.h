// PreMulSum on the host backend: scale each rank's input by the op's scalar,
// then reduce with Sum.  NCCL multiplies each input element by the scalar
// before summing; multiplying first into a staging copy gives exactly that,
// element for element (narrow floats: the product of two such values is exact
// in float, so one rounding back, as NCCL's kernels round).
#pragma once

#include <cstddef>

#include "nccl.h"

namespace braid {

// dst[i] = src[i] * scalar, scalar of the same datatype.  dst may equal src.
void scale_by(void* dst, const void* src, size_t count, ncclDataType_t type, const void* scalar);

}  // namespace braid

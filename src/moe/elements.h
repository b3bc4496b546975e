// The element types MoE rows may hold, and their sizes (their conversions:
// src/ops/row_elements.h).
#pragma once

#include <cstdint>

#include "braid/hd.h"
#include "nccl.h"
#include "src/ops/row_elements.h"

namespace braid::moe {

inline int element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat32: return 4;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    default: return 0;  // not a type MoE rows may have
  }
}

}  // namespace braid::moe

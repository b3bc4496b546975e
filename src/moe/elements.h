// The element types MoE combine sums (in float): what a token row may hold.
#pragma once

#include <cstdint>
#include <cstring>

#include "nccl.h"
#include "src/ops/float_formats.h"

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

// acc[i] += w * row[i] for `n` elements of `type`.
inline void accumulate(ncclDataType_t type, const void* row, float w, float* acc, int64_t n) {
  switch (type) {
    case ncclFloat32: {
      const float* p = static_cast<const float*>(row);
      for (int64_t i = 0; i < n; ++i) acc[i] += w * p[i];
      break;
    }
    case ncclFloat16: {
      const uint16_t* p = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < n; ++i) acc[i] += w * half_to_float(p[i]);
      break;
    }
    case ncclBfloat16: {
      const uint16_t* p = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < n; ++i) acc[i] += w * bf16_to_float(p[i]);
      break;
    }
    case ncclFloat8e4m3: {
      const uint8_t* p = static_cast<const uint8_t*>(row);
      for (int64_t i = 0; i < n; ++i) acc[i] += w * e4m3_to_float(p[i]);
      break;
    }
    case ncclFloat8e5m2: {
      const uint8_t* p = static_cast<const uint8_t*>(row);
      for (int64_t i = 0; i < n; ++i) acc[i] += w * e5m2_to_float(p[i]);
      break;
    }
    default: break;
  }
}

inline void store(ncclDataType_t type, const float* acc, void* row, int64_t n) {
  switch (type) {
    case ncclFloat32: std::memcpy(row, acc, size_t(n) * sizeof(float)); break;
    case ncclFloat16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(row)[i] = float_to_half(acc[i]);
      break;
    case ncclBfloat16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(row)[i] = float_to_bf16(acc[i]);
      break;
    case ncclFloat8e4m3:
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(row)[i] = float_to_e4m3(acc[i]);
      break;
    case ncclFloat8e5m2:
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(row)[i] = float_to_e5m2(acc[i]);
      break;
    default: break;
  }
}

}  // namespace braid::moe

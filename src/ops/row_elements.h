// Element i of a row of NCCL type T, as float, and a float stored as one,
// written once for host loops and CUDA kernels (BRAID_HD, on the
// conversions of float_formats.h), so that both round alike.
#pragma once

#include <cstdint>

#include "braid/hd.h"
#include "nccl.h"
#include "src/ops/float_formats.h"

namespace braid {

// Element i of a row of T, as float.
template <ncclDataType_t T>
BRAID_HD float element(const void* row, int64_t i) {
  if constexpr (T == ncclFloat32) return static_cast<const float*>(row)[i];
  if constexpr (T == ncclFloat16) return half_to_float(static_cast<const uint16_t*>(row)[i]);
  if constexpr (T == ncclBfloat16) return bf16_to_float(static_cast<const uint16_t*>(row)[i]);
  if constexpr (T == ncclFloat8e4m3) return e4m3_to_float(static_cast<const uint8_t*>(row)[i]);
  if constexpr (T == ncclFloat8e5m2) return e5m2_to_float(static_cast<const uint8_t*>(row)[i]);
  return 0.0f;
}

// v stored as element i of a row of T (round to nearest even; fp8 saturates).
template <ncclDataType_t T>
BRAID_HD void set_element(void* row, int64_t i, float v) {
  if constexpr (T == ncclFloat32) static_cast<float*>(row)[i] = v;
  if constexpr (T == ncclFloat16) static_cast<uint16_t*>(row)[i] = float_to_half(v);
  if constexpr (T == ncclBfloat16) static_cast<uint16_t*>(row)[i] = float_to_bf16(v);
  if constexpr (T == ncclFloat8e4m3) static_cast<uint8_t*>(row)[i] = float_to_e4m3(v);
  if constexpr (T == ncclFloat8e5m2) static_cast<uint8_t*>(row)[i] = float_to_e5m2(v);
}

// f<T>() for the row type `type` (float32, float16, bfloat16, e4m3; any other: e5m2).
template <class F>
auto with_element_type(ncclDataType_t type, F&& f) {
  switch (type) {
    case ncclFloat32: return f.template operator()<ncclFloat32>();
    case ncclFloat16: return f.template operator()<ncclFloat16>();
    case ncclBfloat16: return f.template operator()<ncclBfloat16>();
    case ncclFloat8e4m3: return f.template operator()<ncclFloat8e4m3>();
    default: return f.template operator()<ncclFloat8e5m2>();
  }
}

}  // namespace braid

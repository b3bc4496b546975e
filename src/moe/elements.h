// The element types MoE rows may hold, and their conversions to and from
// float, written once for the host and CUDA (BRAID_HD, on the conversions of
// src/ops/float_formats.h), so that the host's combine and the kernels'
// round alike.
#pragma once

#include <cstdint>

#include "braid/hd.h"
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

// f<T>() for the row type `type` (one of element_bytes' five).
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

// acc[i] += w * row[i] for `n` elements of `type`.
inline void accumulate(ncclDataType_t type, const void* row, float w, float* acc, int64_t n) {
  with_element_type(type, [&]<ncclDataType_t T>() {
    for (int64_t i = 0; i < n; ++i) acc[i] += w * element<T>(row, i);
  });
}

inline void store(ncclDataType_t type, const float* acc, void* row, int64_t n) {
  with_element_type(type, [&]<ncclDataType_t T>() {
    for (int64_t i = 0; i < n; ++i) set_element<T>(row, i, acc[i]);
  });
}

}  // namespace braid::moe

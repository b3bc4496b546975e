// CUDA runtime errors as braid Statuses (host code of the CUDA backend).
#pragma once

#include <cuda_runtime.h>

#include "src/core/status.h"

#define CUDA_TRY(expr)                                                                                 \
  do {                                                                                                \
    cudaError_t e_ = (expr);                                                                          \
    if (e_ != cudaSuccess)                                                                            \
      return BRAID_ERROR(ncclUnhandledCudaError, "{} failed: {} ({})", #expr, cudaGetErrorString(e_), \
                         cudaGetErrorName(e_));                                                       \
  } while (0)

// BRAID_HD marks functions compiled for both the host and CUDA devices: the op
// semantics (conversions, reductions, chunk arithmetic) are written once and
// exercised by the host tests exactly as the kernels run them.
#pragma once

#if defined(__CUDACC__)
#define BRAID_HD __host__ __device__ __forceinline__
#else
#define BRAID_HD inline
#endif

// The host's data movement and reduction loops: every NCCL datatype and op,
// vectorised (AVX2 and F16C where the CPU has them, chosen at run time), bit
// for bit the element semantics of reduce_ops.h that the CUDA kernels share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"
#include "src/ops/datatype.h"

namespace braid {

// dst[i] = a[i] (op) b[i] for i < count.  op is Sum, Prod, Max or Min (Avg is
// Sum followed by divide_by).  dst may alias a or b.  half, bfloat16 and fp8
// are computed in float and rounded to nearest even.
void reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type, ncclRedOp_t op);
// The vector code reduce() runs on: "avx2" where the CPU has it (chosen at
// run time), else "baseline" (the build's own: SSE2 on x86-64), also where
// BRAID_REDUCE_ISA=baseline asks for it.
const char* reduce_isa();

// The executor's fused forms.  reduce_to: dst = a (op) b, and the same
// values into dst2 unless it is nullptr (a fragment to send), in one pass
// over the inputs; dst may alias a or b (not dst2).  copy_to: dst = src, and
// dst2 = src unless nullptr.  `stream`, `stream_dst2`: that destination is
// written with non-temporal stores (no read-for-ownership, nothing left in
// this core's cache: a large buffer nobody reads soon, or a slot a peer on
// a far core reads next), fenced before returning.
void reduce_to(void* dst, void* dst2, const void* a, const void* b, size_t count, ncclDataType_t type,
               ncclRedOp_t op, bool stream_dst2);
void copy_to(void* dst, void* dst2, const void* src, size_t bytes, bool stream, bool stream_dst2);
// One copy, streaming or not, without copy_to's closing fence: for a caller
// that writes many blocks and calls store_fence() once before publishing.
void copy_unfenced(void* dst, const void* src, size_t bytes, bool stream);
void store_fence();

// The single-copy reduction: for i < count, v = srcs[0][i] (op) srcs[1][i]
// (op) ... in that order, divided by `divisor` if > 0, stored into every
// dsts[k][i].  Inputs are read once and outputs written once: an L1-sized
// block at a time (folded at reduce()'s vector width in a staging block,
// then copied out), or, for native types streamed out of place, a 64-byte
// line at a time from registers.  `stream` writes with non-temporal stores
// (not fenced: call store_fence() before publishing).  nsrc >= 2.  A dst
// may alias a src only at the same index.
void reduce_many(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count, ncclDataType_t type,
                 ncclRedOp_t op, int divisor, bool stream);

// data[i] = data[i] / divisor (integer division for integer types): the
// second half of ncclAvg.
void divide_by(void* data, size_t count, ncclDataType_t type, int divisor);

}  // namespace braid

// How a call's element count maps onto a schedule's chunks.
//
// A buffer is `blocks` equal blocks of `block_elems` elements (AllGather's
// output is n blocks, one per rank; AllReduce's buffers are one block).  Its
// `chunks` chunks are spread evenly over the blocks, and inside a block chunk
// boundaries are ceil-divided and clipped, so uneven counts give shorter (or
// empty) trailing chunks.  Splitting per block keeps in-place aliasing exact:
// AllGather's input chunk i is always output chunk rank*chunks_per_block + i.
// Scratch chunks have the capacity of the largest input/output chunk.
// BRAID_HD: the CUDA executor computes the same ranges in its kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include "braid/hd.h"
#include "braid/schedule.h"

namespace braid {

struct ElemRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  BRAID_HD uint64_t size() const { return end - begin; }
};

struct BufferShape {
  uint64_t blocks = 1;
  uint64_t block_elems = 0;
  uint32_t chunks = 0;

  BRAID_HD uint64_t elems() const { return blocks * block_elems; }
  BRAID_HD uint32_t chunks_per_block() const { return blocks ? uint32_t(chunks / blocks) : 0; }
  BRAID_HD uint64_t chunk_capacity() const {
    uint32_t per = chunks_per_block();
    return per ? (block_elems + per - 1) / per : 0;
  }
  BRAID_HD ElemRange chunk(uint32_t k) const {
    uint32_t per = chunks_per_block();
    uint64_t block = k / per, in_block = k % per, cap = chunk_capacity();
    uint64_t lo = std::min(in_block * cap, block_elems), hi = std::min((in_block + 1) * cap, block_elems);
    return {block * block_elems + lo, block * block_elems + hi};
  }
};

// Number of per-rank blocks in the input and output buffers of a collective.
BRAID_HD uint64_t input_blocks(Collective c, int nranks) {
  switch (c) {
    case Collective::ReduceScatter:
    case Collective::AlltoAll:
    case Collective::Scatter: return uint64_t(nranks);
    default: return 1;
  }
}
BRAID_HD uint64_t output_blocks(Collective c, int nranks) {
  switch (c) {
    case Collective::AllGather:
    case Collective::AlltoAll:
    case Collective::Gather: return uint64_t(nranks);
    default: return 1;
  }
}

// Collectives whose input (output) only the root has: NCCL lets the other
// ranks pass NULL there.
BRAID_HD bool rooted_input(Collective c) { return c == Collective::Broadcast || c == Collective::Scatter; }
BRAID_HD bool rooted_output(Collective c) { return c == Collective::Reduce || c == Collective::Gather; }

// `count` is the NCCL call's count argument (per-peer count for AlltoAll,
// sendcount for AllGather, recvcount for ReduceScatter).
BRAID_HD BufferShape input_shape(Collective c, int nranks, uint64_t count, uint32_t chunks) {
  return {input_blocks(c, nranks), count, chunks};
}
BRAID_HD BufferShape output_shape(Collective c, int nranks, uint64_t count, uint32_t chunks) {
  return {output_blocks(c, nranks), count, chunks};
}
BRAID_HD uint64_t scratch_chunk_capacity(const BufferShape& in, const BufferShape& out) {
  return std::max(in.chunk_capacity(), out.chunk_capacity());
}

}  // namespace braid

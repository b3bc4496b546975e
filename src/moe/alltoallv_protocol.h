// The AlltoAllv's window and its senders' steps (alltoallv.h says the
// protocol), written once for the host and the CUDA kernel (BRAID_HD), over
// the MoE memory models (protocol.h's, plus window(peer) and flush()).
//
// Every rank's window: one count word per source rank, one
// acknowledgement word per destination rank (each on their own cache
// lines), then one block of max_count elements per source rank.
#pragma once

#include <stdint.h>

#include "braid/hd.h"
#include "braid/moe/layout.h"
#include "braid/moe/signal.h"

namespace braid::moe {

// A count word's "this call fails" is signal.h's kFailedSender: no data follows.

struct AlltoAllvLayout {
  int32_t nranks = 0;
  uint64_t elem_bytes = 0, max_count = 0;
  uint64_t counts = 0, acks = 0, data = 0, bytes = 0;

  BRAID_HD static AlltoAllvLayout of(int32_t nranks, uint64_t elem_bytes, uint64_t max_count) {
    AlltoAllvLayout w;
    w.nranks = nranks;
    w.elem_bytes = elem_bytes;
    w.max_count = max_count;
    const uint64_t words = uint64_t(round_up(int64_t(nranks) * 8, 128));
    w.counts = 0;
    w.acks = words;
    w.data = 2 * words;
    w.bytes = w.data + uint64_t(nranks) * max_count * elem_bytes;
    return w;
  }
  BRAID_HD uint64_t block(int32_t source) const { return data + uint64_t(source) * max_count * elem_bytes; }
};

// offsets[d] (d = 0..nranks) where each destination's elements start in the
// send buffer.  Returns the first destination whose count is not in
// [0, max_count], or -1.
BRAID_HD int32_t send_offsets(const int64_t* counts, int32_t nranks, uint64_t max_count, int64_t* offsets) {
  int32_t bad = -1;
  offsets[0] = 0;
  for (int32_t d = 0; d < nranks; ++d) {
    const int64_t c = counts[d];
    if (bad < 0 && (c < 0 || uint64_t(c) > max_count)) bad = d;
    offsets[d + 1] = offsets[d] + (c > 0 ? c : 0);
  }
  return bad;
}

// Agent `agent` of `agents` sends to its destinations, peers first and this
// rank last: the elements into the destination's block for this rank, then
// (after they are out) the count word; `bad`: the marker and no elements.
template <class MM>
BRAID_HD void alltoallv_send(MM& mm, const AlltoAllvLayout& w, int32_t rank, const char* send, const int64_t* offsets,
                             bool bad, uint32_t epoch, int32_t agent, int32_t agents) {
  for (int32_t i = 1 + agent; i <= w.nranks; i += agents) {
    const int32_t d = (rank + i) % w.nranks;
    const uint64_t count = bad ? 0 : uint64_t(offsets[d + 1] - offsets[d]);
    if (count) mm.put(d, mm.window(d) + w.block(rank), send + offsets[d] * w.elem_bytes, count * w.elem_bytes);
    mm.flush();
    const uint64_t word = signal_word(epoch, bad ? kFailedSender : uint32_t(count));
    mm.signal_words(d, reinterpret_cast<uint64_t*>(mm.window(d) + w.counts) + rank, &word, 1);
  }
}

// This rank copied out every source's block of call `epoch`: each source
// may write it again.
template <class MM>
BRAID_HD void alltoallv_ack(MM& mm, const AlltoAllvLayout& w, int32_t rank, uint32_t epoch) {
  const uint64_t word = signal_word(epoch, 0);
  for (int32_t i = 1; i <= w.nranks; ++i) {
    const int32_t s = (rank + i) % w.nranks;
    mm.signal_words(s, reinterpret_cast<uint64_t*>(mm.window(s) + w.acks) + rank, &word, 1);
  }
}

}  // namespace braid::moe

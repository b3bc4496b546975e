// MoE zero-copy (layout.h's kCombineBuffer and kDispatchBuffer), written
// once for host C++ and CUDA (BRAID_HD): what a rank writes into its own
// window so that its peers read rows in place, and where those peers find
// them.  The host's block threads and a CUDA kernel's threads each call
// the writers with their share, `first` and `stride` (0, 1: all of it).
//
// Dispatch: the source says per destination whether it reads this call's
// rows in the source's dispatch buffer (a pull word), and per (destination,
// local expert, slot) which token fills the slot (the pull list).
// Combine: the owner says per (source, local expert) block where its
// results start in the owner's combine buffer, or kRowsPut (the index).
// Both are written before the call's signals and read by a peer only once
// signalled (host_moe.h has the argument).
#pragma once

#include <stdint.h>

#include "braid/hd.h"
#include "braid/moe/layout.h"
#include "braid/moe/plan.h"

namespace braid::moe {

// The source's pull words: destination d reads in place where pulled[d]
// (nullptr: every destination, `all`).
BRAID_HD void write_dispatch_pulls(char* mine, const Shape& s, const WindowLayout& w, const uint8_t* pulled, bool all,
                                   int64_t first, int64_t stride) {
  auto* words = reinterpret_cast<int64_t*>(mine + w.dispatch_pulls);
  for (int64_t d = first; d < s.nranks; d += stride) words[d] = pulled ? pulled[d] : all;
}

// The source's pull list: each sent (token, k) to a destination that pulls.
BRAID_HD void write_pull_list(char* mine, const Shape& s, const WindowLayout& w, const int32_t* topk,
                              const int32_t* slots, int32_t ntokens, const uint8_t* pulled, int64_t first,
                              int64_t stride) {
  auto* list = reinterpret_cast<int32_t*>(mine + w.dispatch_list);
  for (int64_t i = first; i < int64_t(ntokens) * s.top_k; i += stride) {
    const int32_t slot = slots[i], e = topk[i];
    if (slot != kNoSlot && (!pulled || pulled[s.owner(e)]))
      list[WindowLayout::list_index(s, s.owner(e), s.local(e), slot)] = int32_t(i / s.top_k);
  }
}

// The destination's side: whether source `theirs` (its window as mapped
// here) left this call's rows for `rank` in its buffer.
BRAID_HD bool dispatch_pulled(const char* theirs, const WindowLayout& w, int32_t rank) {
  return reinterpret_cast<const int64_t*>(theirs + w.dispatch_pulls)[rank] != 0;
}
// Where row j of block (that source, local expert le) of `rank` is in it.
BRAID_HD const char* pulled_token_row(const char* theirs, const Shape& s, const WindowLayout& w, int32_t rank,
                                      int32_t le, int32_t j) {
  const int32_t token = reinterpret_cast<const int32_t*>(theirs + w.dispatch_list)[WindowLayout::list_index(s, rank,
                                                                                                           le, j)];
  return theirs + w.dispatch_buffer + int64_t(token) * s.row_bytes();
}

// The owner's pull index: block i's first row, or kRowsPut where its
// source is not pulled[src] (nullptr: every source, `all`).
BRAID_HD void write_pull_index(char* mine, const Shape& s, const WindowLayout& w, const int64_t* first_row,
                               const uint8_t* pulled, bool all, int64_t first, int64_t stride) {
  auto* index = reinterpret_cast<int64_t*>(mine + w.pull_index);
  for (int64_t i = first; i < s.blocks(); i += stride) {
    const bool pull = pulled ? pulled[i / s.local_experts] != 0 : all;
    index[i] = pull ? first_row[i] : WindowLayout::kRowsPut;
  }
}

// The source's side: where the result of the row it sent at `slot` of
// block (this rank `rank`, local expert le) is in owner `theirs`'s buffer,
// or nullptr where it was put.
BRAID_HD const char* pulled_result_row(const char* theirs, const Shape& s, const WindowLayout& w, int32_t rank,
                                       int32_t le, int32_t slot) {
  const int64_t first = reinterpret_cast<const int64_t*>(theirs + w.pull_index)[int64_t(rank) * s.local_experts + le];
  return first == WindowLayout::kRowsPut ? nullptr : theirs + w.combine_buffer + (first + slot) * s.row_bytes();
}

}  // namespace braid::moe

// MoE put / arrive / commit / test / wait (issue 40): the protocol, written
// once and templated on a memory model, so the host runs exactly what a
// device library will.
//
// Puts carry no signal.  Each sender agent (a thread block on a GPU, a block
// thread on the host) writes its rows into the destinations' windows with
// plain puts, then *arrives* on a per-destination counter in the sender's own
// memory.  The agent whose arrival completes the call's count for that
// destination is its *leader*: it issues one ordering point (fence) and then
// the destination's signal words, one per local expert, each carrying the
// block's row count and the call's epoch (signal.h).  This is Perseus'
// batching: on a transport where a put-with-signal costs a fence per put,
// the fences drop from one per row (or per agent) to one per destination per
// call.  Arrival counters are never reset either: a counter counts every
// arrival of every call, and the leader is the arrival that brings it to
// call * agents.
//
// The memory model MM (an object, so the host's can count what it moves):
//   put(peer, void* remote, const void* local, size_t bytes)  no ordering
//   fence()                            orders this agent's puts, and those
//                                      its arrival acquired, before its later signals
//   signal_words(peer, uint64_t* remote, const uint64_t* words, int32_t n)
//                                      n consecutive words, each a release
//                                      store (one message where the
//                                      transport has messages)
//   uint64_t load(const uint64_t* word)            an acquire load
//   uint32_t arrive(uint32_t* counter)             acq_rel fetch-add 1, the old value
//   (signal_tile / test_tile, for LSA combine tile by tile, use the same)
//   pause()                            back off while polling
// The host's (threads or processes over mapped windows) is src/moe/host_memory.h.
#pragma once

#include <stdint.h>

#include "braid/hd.h"
#include "braid/moe/layout.h"
#include "braid/moe/signal.h"

namespace braid::moe {

// One row into block (from, local_expert) of `peer`'s window half.
template <class MM>
BRAID_HD void put_row(MM& mm, int32_t peer, char* peer_half_data, const Shape& s, int32_t from, int32_t local_expert,
                      int32_t row, const void* src) {
  mm.put(peer, peer_half_data + WindowLayout::row_offset(s, from, local_expert, row), src, size_t(s.row_bytes()));
}

// `rows` consecutive rows of one block, from contiguous local memory.
template <class MM>
BRAID_HD void put_rows(MM& mm, int32_t peer, char* peer_half_data, const Shape& s, int32_t from, int32_t local_expert,
                       int32_t first_row, int32_t rows, const void* src) {
  if (rows <= 0) return;
  mm.put(peer, peer_half_data + WindowLayout::row_offset(s, from, local_expert, first_row), src,
         size_t(rows) * size_t(s.row_bytes()));
}

// This agent is done putting to one destination for call number `call`
// (1, 2, ...) of `agents` agents.  True for the leader, the last to arrive.
template <class MM>
BRAID_HD bool arrive(MM& mm, uint32_t* counter, uint64_t call, uint32_t agents) {
  const uint32_t before = mm.arrive(counter);
  return uint32_t(before + 1) == uint32_t(call * agents);
}

// Signal words go out kWordsPerBatch at a time: a source's words for one
// destination are consecutive (signal_index), so a transport with messages
// sends ceil(L / kWordsPerBatch) of them per destination and call, not L.
constexpr int32_t kWordsPerBatch = 64;
BRAID_HD int32_t word_batches(int32_t local_experts) {
  return (local_experts + kWordsPerBatch - 1) / kWordsPerBatch;
}

// The leader's commit to one destination: one ordering point, then every
// local expert's signal word (count, epoch) in the destination's half;
// counts nullptr: this rank's call failed, every word says kFailedSender.
// Returns the signal words sent.
template <class MM>
BRAID_HD int32_t commit(MM& mm, int32_t peer, uint64_t* peer_half_signals, const Shape& s, int32_t from,
                        const int32_t* counts /* [local_experts] or nullptr */, uint32_t epoch) {
  mm.fence();
  uint64_t words[kWordsPerBatch];
  for (int32_t first = 0; first < s.local_experts; first += kWordsPerBatch) {
    const int32_t n = s.local_experts - first < kWordsPerBatch ? s.local_experts - first : kWordsPerBatch;
    for (int32_t i = 0; i < n; ++i)
      words[i] = signal_word(epoch, counts ? uint32_t(counts[first + i]) : kFailedSender);
    mm.signal_words(peer, peer_half_signals + WindowLayout::signal_index(s, from, first), words, n);
  }
  return s.local_experts;
}

// Non-blocking: whether block (from, local_expert) of this rank's half has
// its epoch-`epoch` signal; then *count is its row count, or kFailedSender.
// A word of a later call reads as kFailedSender too: a sender goes on past
// a call its reader is still in only when that call failed (calls.h: it
// needs no more than the call's words to fail it), and its next call's
// word has replaced this one.
template <class MM>
BRAID_HD bool test(MM& mm, const uint64_t* my_half_signals, const Shape& s, int32_t from, int32_t local_expert,
                   uint32_t epoch, uint32_t* count) {
  const uint64_t word = mm.load(my_half_signals + WindowLayout::signal_index(s, from, local_expert));
  const uint32_t seen = signal_epoch(word);
  if (!epoch_reached(seen, epoch)) return false;
  *count = seen == epoch ? signal_count(word) : kFailedSender;
  return true;
}

// The per-tile signal of LSA combine: the rows of tile `tile` of block
// (from, local_expert) are in `peer`'s combine half (the caller put them);
// one ordering point, then the tile's word (epoch, rows in the tile).  A
// tile word is a signal of its own: the block's commit still follows, for
// the counts and the flow control.
template <class MM>
BRAID_HD void signal_tile(MM& mm, int32_t peer, uint64_t* peer_tiles, const Shape& s, int32_t from,
                          int32_t local_expert, int32_t tile, uint32_t rows, uint32_t epoch) {
  mm.fence();
  const uint64_t word = signal_word(epoch, rows);
  mm.signal_words(peer, peer_tiles + WindowLayout::tile_index(s, from, local_expert, tile), &word, 1);
}

// Non-blocking: whether tile `tile` of block (from, local_expert) of this
// rank's combine half has landed for `epoch`.
template <class MM>
BRAID_HD bool test_tile(MM& mm, const uint64_t* my_tiles, const Shape& s, int32_t from, int32_t local_expert,
                        int32_t tile, uint32_t epoch) {
  return epoch_reached(signal_epoch(mm.load(my_tiles + WindowLayout::tile_index(s, from, local_expert, tile))), epoch);
}

enum class WaitResult : int32_t { Ok = 0, Timeout = 1 };

// Bounded: polls test() until it holds or expired() (the caller's clock: the
// steady clock on the host, %globaltimer on a device) says the time is up.
template <class MM, class Expired>
BRAID_HD WaitResult wait(MM& mm, const uint64_t* my_half_signals, const Shape& s, int32_t from,
                         int32_t local_expert, uint32_t epoch, uint32_t* count, Expired& expired) {
  while (!test(mm, my_half_signals, s, from, local_expert, epoch, count)) {
    if (expired()) return WaitResult::Timeout;
    mm.pause();
  }
  return WaitResult::Ok;
}

}  // namespace braid::moe

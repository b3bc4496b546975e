// MoE signal words and epochs (issue 40), written once for host C++ and CUDA.
//
// A signal word is 64 bits: the epoch in the high half, the block's row
// count in the low half (FlashMoE: the count travels in the signal, so the
// receiver needs no separate count message, and an expert with no tokens
// still gets a signal, of count 0, so its receiver can finish).
//
// Epochs instead of resets: every call of a kind (dispatch, combine) has
// the next epoch, 1, 2, ... (0 is skipped when the counter wraps, since a
// fresh window is all zeros and must read as "nothing yet").  A receiver
// waits for the word to show its call's epoch; nobody ever clears a word, so
// back-to-back layers need no reset and no extra synchronisation.  Epochs
// compare wrap-safely (serial-number arithmetic): a word can be at most one
// call ahead of its reader, since the protocol's own data dependencies keep
// a sender from starting call n+1 before the reader finished call n, unless
// call n failed (a failed call lets the sender go on once it has the call's
// words; protocol.h test() reads the later word as that failure).
#pragma once

#include <stdint.h>

#include "braid/hd.h"

namespace braid::moe {

BRAID_HD uint64_t signal_word(uint32_t epoch, uint32_t count) { return (uint64_t(epoch) << 32) | count; }
BRAID_HD uint32_t signal_epoch(uint64_t word) { return uint32_t(word >> 32); }
BRAID_HD uint32_t signal_count(uint64_t word) { return uint32_t(word); }

// The count a word carries when its sender's call failed its own checks (a
// bad expert index, a NULL buffer): the sender puts no rows and commits this
// in every word instead, so each receiver's call fails at once, naming the
// sender, rather than waiting for rows that never come.  No real count is
// this large (counts are bounded by the capacity).
constexpr uint32_t kFailedSender = 0xffffffffu;

BRAID_HD uint32_t next_epoch(uint32_t epoch) { return epoch + 1 == 0 ? 1 : epoch + 1; }
// The epoch of call number `call` (1, 2, ...): next_epoch applied `call`
// times to 0, for a caller that keeps the call count and not the epoch (a
// kernel replayed from a CUDA graph reads the count from memory).
BRAID_HD uint32_t epoch_of_call(uint64_t call) { return uint32_t((call - 1) % 0xffffffffull) + 1; }

// Whether `seen` is `want` or later, wrap-safe.
BRAID_HD bool epoch_reached(uint32_t seen, uint32_t want) {
  return seen != 0 && int32_t(seen - want) >= 0;
}

}  // namespace braid::moe

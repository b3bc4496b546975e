// The schedule verifier: symbolic execution of a Schedule.
//
// It proves, without running anything, that
//  - structure is sound (peers and chunk indices in range, deps point at
//    earlier-declared ops of existing lanes, one sending / one receiving lane
//    per (peer, channel) on each rank, no op writes the input buffer, ranks
//    that the collective says hold no buffer never touch it);
//  - every send has its matching recv (same connection, same chunk count);
//  - no lane can deadlock when each connection buffers at most `slots` chunks;
//  - no two ops of one rank that are unordered (no path through lane order and
//    deps) touch the same chunk when at least one of them writes it;
//  - every output chunk ends holding exactly the right contributions: each
//    rank's input chunk once for reductions, the right source for copies.
// It checks the placements the schedule claims (in place, out of place).
#pragma once

#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid {

// Every transport buffers at least this many fragments per connection, and
// schedules are verified against it.  Two, not one: a fused recv-reduce-send
// holds its incoming fragment while it waits for room downstream, so a ring
// whose every link already holds one fragment could never move with one slot.
constexpr int kMinSlots = 2;

struct VerifyOptions {
  int slots = kMinSlots;  // chunks a connection buffers before a send blocks
  size_t max_errors = 8; // stop collecting after this many
};

struct VerifyResult {
  bool ok = true;
  std::vector<std::string> errors;  // human-readable, each names rank/lane/op
};

VerifyResult verify(const Schedule& schedule, const VerifyOptions& options = {});

}  // namespace braid

// The schedule verifier: symbolic execution of a Schedule.
//
// It proves, without running anything, that
//  - structure is sound (peers and chunk indices in range, deps point at
//    earlier-declared ops of existing lanes, one sending / one receiving lane
//    per (peer, channel) on each rank, no op writes the input buffer, ranks
//    that the collective says hold no buffer never touch it);
//  - every send has its matching recv (same connection, same chunk count);
//  - no lane can deadlock when each connection buffers at most `slots`
//    messages (the schedule's own Schedule::slots unless told otherwise);
//  - no two ops of one rank that are unordered (no path through lane order and
//    deps) touch the same chunk when at least one of them writes it; with
//    one-sided ops (schedule.h), the same across ranks (paths then also go
//    through messages), and a rank touches a peer's buffers only after a
//    signal from it and before an op of it;
//  - every output chunk ends holding exactly the right contributions: each
//    rank's input chunk once for reductions, the right source for copies;
//  - with `rank_order`, that every reduction is the left fold in rank order,
//    ((x0 (+) x1) (+) x2) ..., each step adding the next rank's input to
//    what went before (the executors' left operand).  Floating-point
//    reductions then give the same bits whatever the message size, the
//    element's position or the schedule: what BRAID_DETERMINISTIC runs.
// It checks the placements the schedule claims (in place, out of place).
#pragma once

#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid {

// The most fragments per connection a schedule may ask for (Schedule::slots):
// what MSCCL's LL and LL128 protocols buffer (NCCL_STEPS), and what
// BRAID_SHM_SLOTS gives by default.
constexpr int kMaxScheduleSlots = 8;

struct VerifyOptions {
  int slots = 0;  // messages a connection buffers before a send blocks; 0: the schedule's own
  size_t max_errors = 8;  // stop collecting after this many
  bool rank_order = false;  // reductions must fold in rank order (above)
};

struct VerifyResult {
  bool ok = true;
  bool deadlock = false;            // it failed because lanes got stuck (more slots might help)
  std::vector<std::string> errors;  // human-readable, each names rank/lane/op
};

VerifyResult verify(const Schedule& schedule, const VerifyOptions& options = {});

// Whether `schedule` verifies with rank_order: true for collectives that do
// not reduce, which have nothing to fold.
bool folds_in_rank_order(const Schedule& schedule);

// Sets schedule->slots to the fewest, from kMinSlots to max_slots, with
// which it verifies (only a deadlock depends on them: more never hurt), and
// returns that verification; if none does, the one at max_slots.
VerifyResult verify_fitting_slots(Schedule* schedule, int max_slots = kMaxScheduleSlots);

}  // namespace braid

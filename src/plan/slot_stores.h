// How the schedule executor writes the fragments it sends into a peer's
// shared-memory slots, for calls that stream their output and have outputs
// of kSlotStoresMinOutputBytes or more: through the cache (Cached), or with
// non-temporal stores (Streamed).
//
// Cached, a fragment sits in the sender's cache until the receiver reads
// it.  When the host has put the two cores on one cache cluster that read
// is cheap; when it has put them far apart, every slot line crosses the
// slow link twice (the receiver's read, then the sender's next write of the
// slot taking the line back), and streamed stores, which leave nothing
// in the sender's cache, win.  Measured on this project's 2-core VM with
// 2-process AllReduce and AlltoAll of 32-128 MB: far, streamed slots won,
// most in place; near, they lost as clearly (perf/results/
// compare_20261125d.txt section 3).
// The host moves the cores between the two states every few seconds, so a
// fixed choice loses more than it wins; BRAID_SLOT_STORES=auto (the
// default where every rank has a core) times both, per collective and size
// class (src/plan/measured_choice.h).  The choice is each rank's own: how a
// sender stores changes nothing its peers must know (the slot's release
// is fenced either way), and ranks making the same calls and timing the
// same collective mostly choose alike.  Where ranks outnumber cores the
// results were mixed and mostly worse: auto keeps the cache there.
#pragma once

#include <cstdint>

#include "src/base/status.h"
#include "src/plan/measured_choice.h"

namespace braid {

enum class SlotStores : uint8_t { Cached = 0, Streamed = 1 };

// Only calls that stream their output (src/plan/output_stores.h: their
// buffers overflow the cache) with outputs of at least this size are timed;
// smaller ones keep the slots cached, their fragments read from the
// sender's cache while it still has them.  The limit was 32 MB; at 16 MB,
// cores far, the cached slots made the 2-process out-of-place AllReduce
// nearly as slow as one of 32 MB, and timing made it and Broadcast
// clearly faster (AlltoAll level); near, timing costs a short sweep a
// little.  At 8 MB there was nothing to win: streamed stores were level
// far and slower near.  Calls that fit the cache keep their slots cached:
// streamed stores lost there even far (16 MB AllReduce in place).  All in
// perf/results/compare_20261126.txt.
constexpr uint64_t kSlotStoresMinOutputBytes = uint64_t(16) << 20;

using SlotStoreChooser = MeasuredChooser<SlotStores>;

// BRAID_SLOT_STORES: auto (measured; cached where ranks outnumber cores),
// cached or streamed (always, for calls that stream their output).
enum class SlotStoresMode : uint8_t { Auto, Cached, Streamed };
Status slot_stores_mode_from_env(SlotStoresMode* out);

}  // namespace braid

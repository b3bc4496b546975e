// Which way a copy collective (AllGather, AlltoAll, Broadcast) on plain
// buffers moves its data between processes on one host: through the shared-
// memory slots of its schedule (every byte copied in by the sender and out
// by the receiver), or pulled by each receiver straight out of the senders'
// buffers with cross-memory attach (one kernel copy; src/transport/cross_memory.h).
// (Reductions may pull too, but only under BRAID_CMA=on, where nothing is
// chosen: see pull_in_auto in src/exec/host/single_copy.h.)
//
// Neither wins everywhere, and which one does depends on where the ranks'
// cores sit, which can change while the job runs.  Measured on this
// project's 2-core VM with perf/copy_path_probe (2-process AllGather,
// rounds tagged by the core-to-core round trip; perf/results/
// compare_20261125.txt, section 2): with the cores near (sharing a cache)
// the slots win by a little (a user-space copy of data hot in a
// neighbour's cache beats the kernel's page-pinning copy); far, every slot
// line crosses the slow link twice (the receiver's read, then the sender's
// next write invalidating it) and pulling wins clearly, by more when the
// inputs did not change since the last call (a benchmark loop).  The host
// moves this VM's cores between the two states every few seconds.
//
// With more ranks than cores the slots won or tied everywhere on that VM,
// near or far: AlltoAll, AllGather and Broadcast at 3 and 4 ranks
// (perf/results/compare_20261125b.txt, section 1).  Every rank that waits
// there waits for a peer to be scheduled, whichever path it is on, and
// pulling adds the kernel's page pinning to each copy.
// That is not every machine's answer.  On a 2-vCPU Intel VM (2 MB of L2 per
// core, and beyond it copies no faster than memory) pulling, forced, beat
// the slots at 4 ranks from 256 KB to 16 MB (AlltoAll at 16 MB aside): a
// 4-rank AllGather or AlltoAll copies each block 4 times pulled (once per
// receiver, and its own) and 7 times through the slots.  So where ranks
// outnumber cores, BRAID_CMA=auto times AllGather and AlltoAll from 256 KB
// too, with two changes that made the timing hold there (perf/results/
// oversubscribed_pull_20261126.txt):
//  - a call rank 0 times on the slots ends with the pull path's "done"
//    exchange, so both ways are timed until every rank is done (a rank
//    that returns early leaves its peers' copying on the next call's time);
//  - a way's estimate is the fastest of its last 6 calls, not 2: per-call
//    times of processes sharing cores spread wider than the gap between
//    the ways, and with 2 the choice flipped every few calls.
// Over long runs this made 4-rank out-of-place AlltoAll and AllGather
// faster; over the comparison's 13 calls per size the exploring costs
// about what it wins (at the largest sizes, more).  A pulled Broadcast
// (every peer reading the root's buffer) did not beat the slots' tree
// there, and pulls under 256 KB lost (two exchanges, each waiting for
// every process to be scheduled), so neither is timed.  BRAID_CMA=on
// still pulls everything.
//
// A class's untimed first call pulls (the chooser's cold way): the
// kernel's first two or three reads of a buffer cost 2-3x the later ones
// (perf/results/copy_path_rechecks_20261204.txt section 9), and there they
// stay out of the timing; the slots are then timed first, as before
// (perf/results/copy_path_in_place_20261204.txt section 7).
//
// A Broadcast's root returns from the slots before its peers have copied
// its data out, so its slot calls that rank 0 times end with the "done"
// exchange too, wherever it runs (HostPaths::slot_calls_end_with_done).
//
// Where it may pull, the choice is measured (src/plan/measured_choice.h),
// by rank 0, and its choice travels in its descriptor, so every rank
// takes the same path.  Pulling needs that exchange on every call (peers
// must know where to read), the slots do not: when the slots are chosen,
// the choice comes with a lease, the number of following calls of the
// class that run on the slots without exchanging anything (as many as
// there are until the next recheck is due).
//
// An in-place AlltoAll of rank 0 never pulls, so it takes the slots with a
// lease of kInPlaceAlltoAllLease calls, untimed, rather than exchange
// descriptors on every call only to fall back; an out-of-place call of the
// class within the lease takes the slots too.  (In-place and out-of-place
// calls otherwise share the chooser's classes: a chooser for each made
// in-place calls up to 18% slower on this VM, exploring afresh what the
// out-of-place calls had found: perf/results/copy_path_in_place_20261204.txt.)
#pragma once

#include <cstdint>

#include "braid/schedule.h"
#include "src/plan/measured_choice.h"

namespace braid {

enum class CopyPath : uint8_t { Slots = 0, Pull = 1 };  // Slots: the default, leased

// Per collective and size class, how many more calls take the slots
// without an exchange (the same on every rank: all make the same calls),
// and whether the chooser leased them (it counts them) or rank 0's call
// could not pull (never_pulls).
struct SlotLeases {
  uint32_t remaining[int(Collective::Custom)][kSizeClasses] = {};
  bool chosen[int(Collective::Custom)][kSizeClasses] = {};
};

// A call that no rank pulls when some rank makes it in place: an in-place
// AlltoAll, whose output is input a peer may not have read yet.
inline bool never_pulls(Collective c, bool in_place) { return c == Collective::AlltoAll && in_place; }

using CopyChoice = MeasuredChoice<CopyPath>;
using CopyPathChooser = MeasuredChooser<CopyPath>;
constexpr uint32_t kOversubscribedCopyPathWindow = 6;
constexpr uint64_t kOversubscribedPullMinBytes = 256 << 10;
constexpr uint32_t kInPlaceAlltoAllLease = 16;

}  // namespace braid

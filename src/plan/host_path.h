// Which way a call takes through the host backend, decided in one place.
//
// A collective on the host backend takes the first of these that applies
// (docs/host-paths.md draws the decision):
//
//  1. A board (src/exec/host/oneshot.h, eager.h): in a group or not, every
//     rank on this host, at most board_max_bytes of input (BoardLimits), no
//     PreMulSum.  One-shot for AllReduce, ReduceScatter, AllGather and
//     AlltoAll (every rank stores its input, reads every peer's); eager for
//     Broadcast, Reduce, Gather and Scatter (the giving side does not wait).
//     No plan; a task only beside a group's other work.
//  2. StragglAR: an AllReduce with a fixed late rank, or one whose late
//     rank is decided as it starts (src/plan/straggler.h, src/exec/host/
//     straggler_task.h), runs its schedule on the slots (4).
//  3. A descriptor exchange (src/exec/host/single_copy.h), when the call's
//     buffers may be reachable: mapped windows or ranks that are threads of
//     one process (calls of direct_min_bytes or more), or the pull path
//     between processes (cross-memory attach, pull_collectives from
//     pull_min_bytes).  The ranks then decide together: mapped (every
//     buffer reachable), pulled (rank 0's measured choice), or the slots.
//     A pull-eligible call whose class rank 0 leased to the slots skips the
//     exchange (take_slot_lease).
//  4. The schedule on the transport's slots (src/exec/host/collective_task.h):
//     the output written with streaming stores where it overflows the cache
//     (src/plan/output_stores.h), the send slots cached or streamed
//     (src/plan/slot_stores.h), fragments of tile_bytes (wide ones for
//     calls with large chunks, src/plan/host_tuning.h).
//
// A fixed schedule (BRAID_ALGO, a schedule file) pins its collective to 4:
// such collectives are left out of the board and pull sets at init.
//
// Every rank must take the same path for the same call, so everything a
// path depends on is agreed at init (HostPathSettings) or exchanged with
// the peers at the call (the descriptors).  The exceptions are this rank's
// own: how it stores into its send slots and its output.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "braid/schedule.h"
#include "src/plan/call.h"
#include "src/plan/copy_path.h"
#include "src/plan/output_stores.h"
#include "src/plan/slot_stores.h"

namespace braid {

// The collectives each path serves.
bool oneshot_serves(Collective c);  // AllReduce, ReduceScatter, AllGather, AlltoAll
bool eager_serves(Collective c);    // Broadcast, Reduce, Gather, Scatter
bool single_copy_serves(Collective c);   // every collective but Gather and Scatter
// The pull path: every collective single_copy_serves under BRAID_CMA=on; the
// copy collectives under auto (reductions lost where the chooser could
// have picked them, perf/results/compare_20261125i.txt); where ranks
// outnumber cores, AllGather and AlltoAll only (oversubscribed_pull_20261126.txt).
bool pull_serves(Collective c);
bool pull_in_auto(Collective c);
bool pull_in_auto_oversubscribed(Collective c);
// A bit per Collective where `serves` holds.
uint32_t collectives_where(bool (*serves)(Collective));

// The largest BRAID_ONESHOT_MAX_BYTES honoured.
constexpr int64_t kBoardLimitBytes = 256 * 1024;
// BRAID_ONESHOT_MAX_BYTES=auto, the default: 4 KiB (8 KiB on 2 ranks), or
// where some host runs more ranks than it has cores, 64 KiB, and 256 KiB for
// Broadcast and Gather.  With ranks waiting for cores, a call on the slots hands the
// cores over at every step of its schedule, and a call on a board only
// once: with 4 and 8 ranks on 2 cores, calls of 8-64 KiB were mostly
// 1.2-2.7x faster on the boards, and rooted ones 1.1-10x; Broadcast and
// Gather, which only copy, kept winning up to 256 KiB (1.1-2.7x at 3, 4
// and 8 ranks), where one-shot calls lost 0.26-0.63x and a Reduce, whose
// root folds every input alone, 0.60-0.89x at 8 ranks (perf/results/
// eager_ring_20261204.txt, sections 1 and 8).  With a core per rank the
// slots are as fast from a few KiB, and a board's one-shot reads of every
// peer's whole input do not scale with the ranks: on 2 ranks 8 KiB calls
// were 1.07-1.47x faster on the boards (Scatter 0.86x), 16-32 KiB ones
// mostly slower (section 10).  More ranks, each with a core, could not be
// measured here: they keep 4 KiB.
constexpr uint64_t kBoardAutoBytes = 4096;
constexpr uint64_t kBoardAutoTwoRanksBytes = 8192;
constexpr uint64_t kBoardOversubscribedBytes = 64 * 1024;
// How the agreement carries "auto": above any value a rank may set, so a
// rank that set one decides (the smallest wins).
constexpr uint64_t kBoardAutoInAgreement = uint64_t(kBoardLimitBytes) + 1;
struct BoardLimits {
  uint64_t most = 0;              // one-shot collectives, Reduce, Scatter
  uint64_t broadcast_gather = 0;  // eager Broadcast and Gather
};
BoardLimits board_limits(uint64_t agreed, bool oversubscribed, int nranks);
// The bytes the largest writer of a call puts on a board: its input.
uint64_t board_payload_bytes(Collective c, size_t count, ncclDataType_t type, int nranks);

// What the ranks of a communicator agreed on at init (src/runtime/init.cc),
// and this rank's own settings.  Bits are per Collective.
struct HostPathSettings {
  int rank = 0, nranks = 1;
  uint32_t pinned_collectives = 0;  // a fixed schedule (BRAID_ALGO, a schedule file): path 4 only
  uint64_t tile_bytes = 0;       // the fragment size every transport's slot takes
  uint64_t wide_tile_bytes = 0;  // the widest: calls with large chunks (call_tile_bytes)
  uint32_t board_collectives = 0;  // path 1 (0: every rank is not on one host, or boards are off)
  BoardLimits board_max_bytes;    // the largest writer's input a board takes
  uint64_t direct_min_bytes = UINT64_MAX;  // path 3 on reachable buffers
  bool one_process = false;  // every rank a thread of this process: every buffer reachable
  uint32_t pull_collectives = 0;  // path 3 between processes
  uint64_t pull_min_bytes = UINT64_MAX;
  bool pull_always = false;  // BRAID_CMA=on: no timing, always pull
  bool can_pull = false;     // this rank could read every peer at init
  bool cma_checked = false;  // can_pull was probed (the same on every rank)
  // Every rank loads and stores every peer's buffers (threads of one
  // process, or every rank could_pull): one-sided schedules run.  Agreed.
  bool peer_access = false;
  bool oversubscribed = false;  // some host runs more ranks than it has cores
  // Between hosts: the slices a large call runs in, each on its own
  // connections (slices_for).  Over TCP NCCL_SOCKET_NTHREADS x
  // NCCL_NSOCKS_PERTHREAD; over a net the most NICs a rank uses
  // (Transport::wire_paths).
  uint32_t remote_slices = 1;
  // sliced_peers[r]: rank r is on another host, reached over TCP or a net
  // of several paths (the peers whose send/recv messages p2p_slices cuts);
  // empty where none is.
  std::vector<bool> sliced_peers;
  // Where ranks outnumber cores (BRAID_CMA=auto), a call rank 0 times on
  // the slots ends with the descriptors' "done" exchange, so both ways are
  // timed until every rank is done (src/plan/copy_path.h).
  bool time_slot_calls_to_all_done = false;
  // This rank's own (nothing its peers must know):
  SlotStoresMode slot_stores = SlotStoresMode::Cached;  // Auto: timed (only where every rank has a core)
  CacheShare cache_share;  // which outputs stream (src/plan/output_stores.h)
};

// How a call's schedule task stores (path 4).
struct TaskStores {
  bool stream_output = false;  // its user outputs, with streaming stores
  SlotStores slots = SlotStores::Cached;
  bool timed = false;  // the slot-store chooser wants this call's time (record_slot_stores)
};

class HostPaths {
 public:
  explicit HostPaths(const HostPathSettings& settings);
  ~HostPaths();
  const HostPathSettings& settings() const { return s_; }

  // Path 1 for a blocking call outside any group.
  enum class Board : uint8_t { None, OneShot, Eager };
  Board board_for(const CollectiveCall& c) const;

  // Path 3: whether a call of `c` whose larger buffer is `bytes` exchanges
  // descriptors.  Counts a call taken on a slot lease (the same on every
  // rank, as all make the same calls).
  bool exchanges_descriptors(Collective c, uint64_t bytes);
  // Whether the pull path admits calls of `c` moving `bytes` (its bits, and
  // a rank that could not read its peers has not turned it off).
  bool pull_admits(Collective c, uint64_t bytes) const;

  // Path 4.
  TaskStores stores_for(const CollectiveCall& c);  // may ask the slot-store chooser
  // The fragment size of call `c` on `schedule`: wide where every rank cuts
  // the call into chunks of kWideTileMinTiles wide fragments or more.
  uint64_t tile_bytes_for(const CollectiveCall& c, const Schedule& schedule) const;
  // The slices call `c` on `schedule` runs in (src/ops/op_step.h: each its
  // own part of every chunk, its own lanes, its own connections): 1, or
  // between hosts up to remote_slices, as many as give every slice at
  // least one whole fragment of the smallest chunk any rank cuts.  Each
  // slice's fragments wait only for their own lane, so a connection per
  // slice keeps that many fragments on the wire: what a network that caps
  // each TCP flow, or a path one flow's window cannot fill, needs, and
  // what puts a call on every NIC of a net transport that has several.
  uint32_t slices_for(const CollectiveCall& c, const Schedule& schedule) const;
  // The slices a send/recv message of `bytes` to or from `peer` travels in,
  // by the same rule on a message: 1, or to a peer in sliced_peers up to
  // remote_slices, as many as give each slice a whole fragment.  Both
  // ends cut a message alike, as their settings and its size are alike.
  uint32_t p2p_slices(int peer, uint64_t bytes) const;

  // What the descriptors of path 3 carry from rank 0, and what the ranks
  // report back.  choose_copy_path is rank 0's; every rank applies the
  // outcome it read from rank 0's descriptor, which says whether rank 0's
  // call was in place (`in_place`).
  CopyChoice choose_copy_path(Collective c, uint64_t bytes, bool in_place);
  void record_copy_path(Collective c, uint64_t bytes, CopyPath path, double us);
  void lease_slots(Collective c, uint64_t bytes, bool in_place, uint32_t lease);
  // Whether a call of `c` that exchanged descriptors and runs on the slots
  // ends with the "done" exchange, as a pulled call does, so that rank 0
  // times both ways to the same point: where ranks outnumber cores
  // (time_slot_calls_to_all_done), and for every Broadcast, whose root
  // returns from the slots before its peers have copied out (timed without
  // it, 2-process Broadcasts took the slots where pulling was 1.2-1.7x
  // faster: perf/results/copy_path_in_place_20261204.txt section 4).
  bool slot_calls_end_with_done(Collective c) const {
    return s_.time_slot_calls_to_all_done || c == Collective::Broadcast;
  }
  void pull_unavailable() { pull_collectives_ = 0; }  // a rank could not read its peers: all stop pulling
  void record_slot_stores(Collective c, uint64_t output_bytes, SlotStores stores, double us);

  // A window every rank can map was registered (a collective fact): calls
  // on plain buffers no longer skip the exchange on a lease.
  void note_mapped_window() { mapped_window_ = true; }
  bool has_mapped_window() const { return mapped_window_; }

 private:
  bool may_be_wide(const CollectiveCall& c) const;
  uint64_t least_chunk_bytes(const CollectiveCall& c, const Schedule& schedule) const;
  HostPathSettings s_;
  uint32_t pull_collectives_ = 0;
  bool mapped_window_ = false;
  std::unique_ptr<CopyPathChooser> copy_paths_;    // rank 0, where it may pull and times it
  std::unique_ptr<SlotStoreChooser> slot_stores_;  // SlotStoresMode::Auto
  SlotLeases leases_;
};

}  // namespace braid

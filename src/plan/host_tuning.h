// Algorithm choices for the host backend: size crossovers from an
// alpha-beta-gamma model, and when to exchange with all peers at once (see
// host_tuning.cc).  The planner asks; nothing here touches a communicator.
#pragma once

#include <cstdint>
#include <vector>

namespace braid {

// Per-rank AllReduce bytes at or below which recursive doubling beats ring
// on `nranks` ranks of this machine (oversubscribed when they outnumber the
// cores this process may use).
uint64_t host_allreduce_rd_max_bytes(int nranks);

// The same, with the machine's state given (for tests and the CLI).
uint64_t host_allreduce_rd_max_bytes(int nranks, bool oversubscribed);

// CPUs this process may run on (its affinity, or all online if wider).
int host_usable_cores();

// On a host with more ranks than cores, AllGather (up to this many bytes
// per rank) and AlltoAll (all sizes) exchange with every peer at once
// ("direct") instead of in ring or pairwise order.
constexpr uint64_t kDirectAllGatherMaxBytes = 128 * 1024;

// BRAID_DETERMINISTIC: AllReduce and ReduceScatter messages up to this size
// fold in rank order by "direct" (two hops, a pass through scratch), larger
// ones by "chain" (fused ops down the ranks); between the 64 KiB where direct
// won and the 512 KiB where chain did over shared memory.  ReduceScatter
// between hosts takes direct at every size (it moved ring's bytes and beat
// chain by 1.27x on the emulated 4-host cluster, where AllReduce's chain
// beat direct): perf/results/deterministic_20261203.txt.
constexpr uint64_t kRankOrderDirectMaxBytes = 256 * 1024;
// Below it, AllReduce messages up to these sizes fold by "allgather_fold":
// every input to every peer and each rank folding all n, one hop instead of
// direct's two, for (n-1) times the bytes.  Over sockets it took 0.5-0.6x of
// direct's time up to 4 KiB on 3 and 4 processes and 0.9-1.0x at 32 KiB; over
// shared memory (where boards serve calls up to 4 KiB) it won up to 32 KiB on
// 2 processes and lost from 16 KiB on 4 (0.6-0.8x); between 4 emulated hosts
// it beat direct at 4 and 16 KiB and was within the noise at 32 KiB:
// perf/results/deterministic_20261203.txt, sections 9 and 10.
constexpr uint64_t kRankOrderFoldMaxBytes = 4 * 1024;
constexpr uint64_t kRankOrderFoldBetweenHostsMaxBytes = 32 * 1024;
// Where every rank loads and stores every peer's buffers on the host
// backend (one host), mid-sized messages above kOneSidedMinBytes run
// one-sided schedules, in the ranges where they beat the others in
// interleaved runs (perf/results/twoshot_host_default_20261203.txt,
// deterministic_20261203.txt section 8, get_reduce_copy_20261203.txt):
// - AllReduce: the plain two-shot, and twoshot_ordered under
//   BRAID_DETERMINISTIC, up to kTwoshotMaxBytesPerRank per rank; on 2 ranks
//   up to kTwoshotMaxBytesTwoRanks, where ring wins only out of place
//   beyond it.
// - ReduceScatter: the plain one-shot on 2 ranks only (on 3 and 4 it did
//   not beat ring) up to kOneshotReduceScatterMaxBytes; oneshot_ordered
//   under the mode up to kRankOrderOneSidedReduceScatterMaxBytes, on 2 ranks
//   up to kRankOrderOneSidedReduceScatterTwoRanksMaxBytes.
constexpr uint64_t kOneSidedMinBytes = 128 * 1024;  // exclusive
constexpr uint64_t kTwoshotMaxBytesPerRank = 1 << 20;
constexpr uint64_t kTwoshotMaxBytesTwoRanks = 8 << 20;
constexpr uint64_t kOneshotReduceScatterMaxBytes = 4 << 20;
constexpr uint64_t kRankOrderOneSidedReduceScatterMaxBytes = 1 << 20;
constexpr uint64_t kRankOrderOneSidedReduceScatterTwoRanksMaxBytes = 16 << 20;

// How many of its `slots` each of the `connections` a call sends on at once
// should cycle through (SendPipe::use_slots): together about one whole
// ring's worth, at least kMinSlots each.  A rank exchanging with all its
// peers at once otherwise spreads its fragments over connections x slots x
// slot bytes of shared memory, which with 4 ranks (24 MB) pushes them out of
// a 32 MB cache before the receiver copies them out (host_tuning.cc).
int slots_per_connection(int slots, int connections);

// Wide fragments.  A shared-memory slot holds kShmSlotFragments of the
// communicator's fragments (BRAID_SHM_SLOT_BYTES, src/transport/transport.h).
// A call whose every chunk spans at least kWideTileMinTiles slot-wide
// fragments sends them that wide, through 1 / kShmSlotFragments of the slots
// (the same memory); smaller calls keep the finer fragments, which pipeline
// deeper.  Measured with 2 processes, the same ring memory cut into fewer,
// wider slots: large AllReduce and a 4 MB AlltoAll gained, but AllGather,
// Broadcast and AlltoAll of 1 MB lost (chunks of 1 MB: two wide fragments
// each), hence the kWideTileMinTiles floor (perf/results/
// compare_20261126c.txt section 2).
constexpr uint64_t kWideTileMinTiles = 4;

// Fragments of a communicator with ranks on other hosts: at most this wide,
// and never wide (the rule above is for shared memory, where a fragment is
// handed over in microseconds).  Over a NIC a fragment takes its wire time
// (1.3 ms for 128 KiB at 100 MB/s), and each dependency hop of a schedule
// (StragglAR's rounds, a synthesized schedule's relays) waits that long
// before the next link can start on it: narrower fragments keep every link
// of such a schedule busy, which ring, with no gaps to fill, does not need.
// Runs with it on the emulated cluster: perf/results/cluster_*.txt (a
// side-by-side against wider fragments is not recorded there yet).
constexpr uint64_t kRemoteFragmentBytes = 128 * 1024;

// The fragment size of a call whose smallest chunk, on any rank, is
// `min_chunk_bytes`: `wide` (the slot's capacity) or `base`.  Every rank
// computes the same, as every rank must cut chunks into the same tiles.
uint64_t call_tile_bytes(uint64_t base, uint64_t wide, uint64_t min_chunk_bytes);

// What the ranks of a communicator agree on at init, so that all of them
// pick the same schedule for a call.
struct HostTuning {
  uint64_t rd_max_bytes = 32 * 1024;  // AllReduce: recursive doubling up to here, ring above
  bool oversubscribed = false;        // some host runs more of the ranks than it has cores
  bool several_hosts = false;         // the ranks are on more than one host
};

// This process's view, for a communicator of `nranks` on this host alone.
HostTuning local_host_tuning(int nranks);

// What one rank reports at init, and the choice every rank computes alike
// from all reports: the smallest rd/ring crossover, and whether some host
// runs more of the ranks than it has cores.
struct HostTuningReport {
  uint64_t host = 0;          // machine identity (ranks with equal values share its cores)
  uint64_t rd_max_bytes = 0;  // host_allreduce_rd_max_bytes
  int32_t cores = 0;          // host_usable_cores
};
HostTuning agree_host_tuning(const std::vector<HostTuningReport>& reports);

}  // namespace braid

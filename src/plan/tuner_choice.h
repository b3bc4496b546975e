// What braid shows an NCCL tuner plugin for one call, and what its answer
// means (the plugin itself: src/runtime/tuner.h).
//
// NCCL gives a tuner a table of times, its algorithms by its protocols
// (tuner_abi.h), -1 where a pair cannot run, and runs the cheapest entry
// after the plugin changed it.  braid has none of NCCL's algorithms but a
// ring (AllReduce, AllGather, ReduceScatter) and, on the CUDA backend, an LL
// path, so it offers at most two entries:
//   RING/SIMPLE  braid's ring schedule, where the call may run it (no
//                BRAID_ALGO or schedule file pins the collective, NCCL_ALGO
//                admits the ring, and BRAID_DETERMINISTIC does not rule it
//                out for a reduction);
//   RING/LL      the CUDA LL path, only where it is braid's own choice for
//                the call;
// each holding braid's alpha-beta estimate in microseconds (cost_model.h).
// The answer: a plugin that changed neither leaves braid's own choice,
// which may be an algorithm NCCL has no name for (NCCL's rule too: an
// untouched table is its own model's choice).  Otherwise the cheaper
// offered entry is the plugin's pick, LL first on a tie as NCCL scans:
// RING/SIMPLE runs braid's ring, RING/LL braid's own choice (the LL path).
// What the plugin wrote where braid offered nothing is ignored: braid
// cannot run it.
#pragma once

#include <cstdint>

#include "braid/schedule.h"
#include "src/plan/tuner_abi.h"

namespace braid {

// NCCL's table, laid out as NCCL's float[algorithms][protocols].
struct TunerTable {
  float cost[kTunerAlgorithms][kTunerProtocols];
};

struct TunerOffer {
  bool ring = false;  // RING/SIMPLE: braid's ring schedule
  bool ll = false;    // RING/LL: the CUDA LL path, braid's own choice for the call
  double ring_us = 0, ll_us = 0;
};

// The table a plugin is shown: the offered entries, -1 elsewhere.
TunerTable tuner_table(const TunerOffer& offer);

enum class TunerPick { BraidsOwn, Ring, LL };

// What `answered` (the table as the plugin left it) picks.
TunerPick tuner_pick(const TunerOffer& offer, const TunerTable& answered);

// A v2 plugin's answer (an algorithm and a protocol) written into the table
// as NCCL's own v2 adapter writes it: that entry 0 where it was offered.
void apply_v2_answer(int algorithm, int protocol, TunerTable* table);

// NCCL's ncclFunc_t for a collective it tunes, -1 for the others (AlltoAll,
// Gather and Scatter, which NCCL runs as sends and receives).
int tuner_func(Collective c);

// NCCL's nBytes for a call of `count_bytes` (count x type size): the larger
// of what a rank sends and receives.
uint64_t tuner_bytes(Collective c, int nranks, uint64_t count_bytes);

// Whether braid has a ring for `c`, and its bit among a call's algorithms
// (CollectiveCall::algorithms, a bit per algorithm_registry() index; 0: none).
uint32_t ring_algorithm_bit(Collective c);

}  // namespace braid

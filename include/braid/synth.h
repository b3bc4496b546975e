// TACCL-style schedule synthesis: topology + communication sketch ->
// a verified Schedule.
//
// Stages (synth/README.md has the details and costs):
//  1. routing MILP (COIN-OR CBC): which links each chunk takes, minimising a
//     bandwidth-relaxed completion time, with symmetry as variable aliasing
//     and a heuristic solution as the first incumbent and big-M bound;
//  2. heuristic ordering: list scheduling of the chosen link transfers;
//  3. contiguity: which consecutive transfers on each inter-node link go as
//     one message (alpha paid once), given stage 2's order: a greedy pass,
//     then a MILP (CBC) started from it;
// then lowering to braid's IR: one lane per (peer, direction[, phase]) per
// rank with its channel, ops in link order, dependencies across lanes, a
// merged message as one op over a contiguous chunk range; then the verifier.
// AllGather and AlltoAll are solved directly; AllReduce is a ReduceScatter on
// the reversed AllGather trees followed by the AllGather.
#pragma once

#include <functional>
#include <string>

#include "braid/schedule.h"
#include "braid/sketch.h"
#include "braid/topology.h"

namespace braid {

struct SynthOptions {
  Collective collective = Collective::AllGather;  // AllGather, AlltoAll or AllReduce
  double time_limit_s = 60;  // for the routing MILP; the best solution found by then is kept
  double contiguity_time_limit_s = 30;  // for the contiguity MILP (likewise)
  double chunk_mb = 1.0;     // chunk size (MB) at which link costs are weighed
  bool use_milp = true;      // false: heuristic routing only (no CBC)
  bool contiguity = true;    // stage 3 (greedy merges; then the MILP if use_milp and CBC)
  int solver_log = 0;        // 1: CBC's own progress lines (incumbent, bound, time) on stdout
  std::function<void(const std::string&)> progress;  // stage lines, or empty
};

struct SynthReport {
  int chunks = 0;
  int milp_columns = 0, milp_rows = 0;
  bool milp_used = false, milp_optimal = false;
  double heuristic_objective = 0, milp_objective = 0, milp_bound = 0;  // us, relaxed model
  int symmetry_generators = 0;
  double routing_s = 0, ordering_s = 0, contiguity_s = 0, lowering_s = 0, total_s = 0;
  double ordered_makespan_us = 0;  // stage 2's estimate at chunk_mb
  // Stage 3: pairs it could merge, transfers that joined another's message,
  // and the makespan after it (= ordered_makespan_us when nothing merged).
  int contiguity_candidates = 0, merged_transfers = 0;
  double contiguity_makespan_us = 0;
  // The simulator's time (braid sim) at chunk_mb for stage 2's schedule and
  // for the one returned; stage 3's merges are kept only where they do not
  // make it slower (merged_transfers is 0 when they were dropped).
  double ordered_simulated_us = 0, simulated_us = 0;
};

// Never throws.  The topology must have sketch.nnodes nodes.  The result is
// verified before it is returned.
bool synthesize(const Topology& topology, const Sketch& sketch, const SynthOptions& options, Schedule* out,
                SynthReport* report, std::string* error);

// Baselines on the same topology, for comparisons: a ring whose order follows
// the intra-node links (NCCL-like), and a hierarchical AllGather/AllReduce
// (intra-node ring, then rings across nodes between same-local-index GPUs).
bool topology_ring(const Topology& topology, Collective c, Schedule* out, std::string* error);
bool hierarchical(const Topology& topology, Collective c, Schedule* out, std::string* error);

}  // namespace braid

// The synthesizer's internal model, shared by its stages.
#pragma once

#include <string>
#include <vector>

#include "braid/sketch.h"
#include "braid/synth.h"
#include "braid/topology.h"

namespace braid::synth {

// A chunk to route: AllGather chunk j of rank src goes to every other rank;
// AlltoAll chunk j from src to dst goes to dst only.
struct Chunk {
  int src = 0;
  int dst = -1;  // AlltoAll only
  int j = 0;
  std::vector<int> dests;
};

struct Problem {
  const Topology* topo = nullptr;
  const Sketch* sketch = nullptr;
  bool alltoall = false;  // else AllGather-shaped (also AllReduce)
  int chunkup = 1;
  double chunk_mb = 1;
  std::vector<Chunk> chunks;
  std::vector<std::vector<int>> candidates;  // per chunk: links on its shortest paths
  std::vector<std::vector<int>> symmetries;  // rank maps that leave the problem unchanged

  double cost(int link) const;   // alpha + beta * chunk: a transfer's time on its link
  double load(int link) const;   // beta * chunk: what each further chunk of a merged transfer adds
  int chunk_index(int src, int dst, int j) const;
  int map_chunk(const std::vector<int>& g, int c) const;
};

bool build_problem(const Topology& t, const Sketch& s, bool alltoall, double chunk_mb, Problem* p, std::string* error);

// Routes: per chunk, the links it takes (a tree from its source).
using Routes = std::vector<std::vector<int>>;

struct RoutingStats {
  bool milp_used = false, optimal = false;
  int columns = 0, rows = 0;
  double heuristic_objective = 0, objective = 0, bound = 0, seconds = 0;
};
bool route_chunks(const Problem& p, const SynthOptions& o, Routes* routes, RoutingStats* stats, std::string* error);

// One link transfer of one chunk, with the transfers it must wait for.
struct Transfer {
  int chunk = 0;
  int link = 0;
  bool reduce = false;      // AllReduce's ReduceScatter phase (reversed tree)
  std::vector<int> preds;   // transfers that must arrive first
  double start = 0, end = 0, arrive = 0;
  int seq = 0;              // global order decided by the scheduler
  // Stage 3: sent in one message with the transfer just before it in `seq`
  // order (same link), paying alpha once.
  bool joins_previous = false;
};
// Builds the transfers of `routes` (both phases for AllReduce) and orders them
// by list scheduling; returns the makespan.
double order_transfers(const Problem& p, const Routes& routes, bool allreduce, std::vector<Transfer>* out);

// Stage 3: on inter-node links, picks consecutive transfers to send as one
// message (greedy, then the contiguity MILP when CBC is there and use_milp),
// then renumbers `seq` so every transfer still comes after what it waits
// for.  Leaves `xs` unchanged unless that shortens the makespan (or, at the
// same makespan, brings chunks earlier).
struct ContiguityStats {
  bool milp_used = false, optimal = false;
  int candidate_pairs = 0, merged = 0, columns = 0, rows = 0;
  double before_us = 0, after_us = 0, seconds = 0;
};
void merge_contiguous(const Problem& p, const SynthOptions& o, std::vector<Transfer>* xs, ContiguityStats* stats);
// Whether lowering can send transfers a and b (consecutive on one link) as
// one op over a contiguous chunk range at both ends.
bool mergeable(const Problem& p, const std::vector<Transfer>& xs, int a, int b);

bool lower(const Problem& p, Collective c, const std::vector<Transfer>& transfers, Schedule* out, std::string* error);

}  // namespace braid::synth

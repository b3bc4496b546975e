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

  double cost(int link) const;   // alpha + beta * chunk
  double load(int link) const;   // beta * chunk: time on the wire
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
};
// Builds the transfers of `routes` (both phases for AllReduce) and orders them
// by list scheduling; returns the makespan.
double order_transfers(const Problem& p, const Routes& routes, bool allreduce, std::vector<Transfer>* out);

bool lower(const Problem& p, Collective c, const std::vector<Transfer>& transfers, Schedule* out, std::string* error);

}  // namespace braid::synth

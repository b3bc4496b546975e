// The simulator: predicted time of a Schedule on a Topology, and the
// per-link timeline the SVG renderer draws.
//
// Model (alpha-beta with contention): every lane runs its ops in order; an
// op starts when its lane is free, its deps are done and (for a receive) its
// chunks have arrived.  A message of b bytes occupies its link and the link's
// ports (switch port, NIC) for alpha + beta*b and has arrived when it leaves
// them (TACCL's model: a transfer holds the link for its latency too, so k
// chunks sent as one message cost alpha + k*beta*b, as k messages k times
// alpha more).  An op of `count` chunks sends them as one message.  A busy
// link or port delays the next message (first come, first served in time
// order).  Ranks without a direct link are routed over the
// fewest hops, store-and-forward.  Local copies and reductions cost
// local_beta per byte.  Chunks move whole (no sub-chunk pipelining), unless
// SimOptions::fragment_bytes asks for the host executor's fragments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/schedule.h"
#include "braid/topology.h"

namespace braid {

struct SimTransfer {
  int src = 0, dst = 0;  // ranks (one hop)
  int link = 0;          // index into Topology::links
  double start_us = 0, end_us = 0;
  int origin = 0;        // the rank whose op sent it (colour in the picture)
  uint32_t chunk = 0;    // the sending op's first chunk index
  uint32_t chunks = 1;   // chunks in the message
};

struct SimResult {
  double time_us = 0;
  std::vector<SimTransfer> transfers;  // every hop of every message
};

struct SimOptions {
  // Per rank, when it reaches the call (empty: all at 0); a rank's ops start
  // no earlier (a late rank, as StragglAR plans for).
  std::vector<double> rank_start_us;
  // 0: every op moves its chunks whole (TACCL's model, the synthesizer's).
  // > 0: as braid's host executor runs a schedule: the buffers are cut into
  // fragments of this many bytes, every lane runs its ops once per fragment
  // index ("tile") with dependencies per tile, and each fragment is its own
  // message; so a chunk forwarded over several hops is pipelined.
  uint64_t fragment_bytes = 0;
};

// `size_bytes` follows nccl-tests' size column: the per-rank buffer for
// AllReduce/Broadcast/Reduce, the gathered total (count * nranks) for
// AllGather, ReduceScatter, AlltoAll, Gather and Scatter.
bool simulate(const Schedule& schedule, const Topology& topology, uint64_t size_bytes, SimResult* out,
              std::string* error, const SimOptions& options = {});

// nccl-tests' bus bandwidth (GB/s) for a call of `size_bytes` taking `time_us`.
double bus_bandwidth_gbps(Collective c, int nranks, uint64_t size_bytes, double time_us);

// An SVG picture: one row per link used, one bar per message, coloured by the
// sending rank.
std::string render_svg(const Schedule& schedule, const Topology& topology, const SimResult& result);

}  // namespace braid

// The synthesis driver: problem -> routing -> ordering -> contiguity ->
// lowering -> verification, with timings and progress lines (see include/braid/synth.h).
#include <fmt/format.h>

#include <chrono>

#include "braid/sim.h"
#include "braid/verify.h"
#include "synth/problem.h"

namespace braid {

namespace {

// Simulated time at the size where the schedule's chunks are chunk_mb (the
// size synthesis weighed link costs at), in nccl-tests' size convention: a
// rank's input for AllReduce and AlltoAll (whose input_chunks already count
// one slice per peer), the gathered output for AllGather.
bool simulate_at_chunk_size(const Schedule& s, const Topology& t, double chunk_mb, double* us, std::string* error) {
  uint64_t chunks = uint64_t(s.ranks[0].input_chunks);
  if (s.collective == Collective::AllGather) chunks *= uint64_t(s.nranks);
  SimResult result;
  if (!simulate(s, t, uint64_t(double(chunks) * chunk_mb * 1e6), &result, error)) return false;
  *us = result.time_us;
  return true;
}

bool synthesize_or_throw(const Topology& t, const Sketch& sketch, const SynthOptions& o, Schedule* out,
                         SynthReport* report, std::string* error) {
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };
  auto t0 = clock::now();
  SynthReport local;
  SynthReport& r = report ? *report : local;
  r = {};
  const Collective c = o.collective;
  if (c != Collective::AllGather && c != Collective::AlltoAll && c != Collective::AllReduce)
    return *error = fmt::format("synthesis supports allgather, alltoall and allreduce, not {}", to_string(c)), false;
  if (o.chunk_mb <= 0 || o.time_limit_s <= 0 || o.contiguity_time_limit_s <= 0)
    return *error = "chunk size and time limits must be positive", false;
  synth::Problem p;
  if (!synth::build_problem(t, sketch, c == Collective::AlltoAll, o.chunk_mb, &p, error)) return false;
  r.chunks = int(p.chunks.size());
  r.symmetry_generators = int(p.symmetries.size());
  if (o.progress)
    o.progress(fmt::format("{} on {} ({} ranks): {} chunks, {} of {} symmetry offsets usable", to_string(c), t.name,
                           t.nranks(), p.chunks.size(), p.symmetries.size(), sketch.symmetry_offsets.size()));
  if (c == Collective::AllReduce)
    for (const Link& l : t.links)
      if (t.link_index(l.dst, l.src) < 0)
        return *error = fmt::format("AllReduce needs links both ways; {} -> {} has no reverse", l.src, l.dst), false;

  auto stage = clock::now();
  synth::Routes routes;
  synth::RoutingStats rs;
  if (!synth::route_chunks(p, o, &routes, &rs, error)) return false;
  r.routing_s = seconds_since(stage);
  r.milp_used = rs.milp_used;
  r.milp_optimal = rs.optimal;
  r.milp_columns = rs.columns;
  r.milp_rows = rs.rows;
  r.heuristic_objective = rs.heuristic_objective;
  r.milp_objective = rs.objective;
  r.milp_bound = rs.bound;

  stage = clock::now();
  std::vector<synth::Transfer> transfers;
  r.ordered_makespan_us = synth::order_transfers(p, routes, c == Collective::AllReduce, &transfers);
  r.ordering_s = seconds_since(stage);
  if (o.progress)
    o.progress(fmt::format("ordering: {} transfers, estimated {:.2f} us at {} MB chunks ({:.2f} s)", transfers.size(),
                           r.ordered_makespan_us, o.chunk_mb, r.ordering_s));

  stage = clock::now();
  Schedule s;
  if (!synth::lower(p, c, transfers, &s, error)) return false;
  r.lowering_s = seconds_since(stage);
  if (!simulate_at_chunk_size(s, t, o.chunk_mb, &r.ordered_simulated_us, error)) return false;
  r.simulated_us = r.ordered_simulated_us;

  r.contiguity_makespan_us = r.ordered_makespan_us;
  if (o.contiguity) {
    stage = clock::now();
    synth::ContiguityStats cs;
    std::vector<synth::Transfer> merged = transfers;
    synth::merge_contiguous(p, o, &merged, &cs);
    r.contiguity_candidates = cs.candidate_pairs;
    Schedule m;
    double merged_us = 0;
    if (cs.merged > 0 && synth::lower(p, c, merged, &m, error) &&
        simulate_at_chunk_size(m, t, o.chunk_mb, &merged_us, error)) {
      // Stage 3's model of a message is coarser than the simulator's, and an
      // incumbent kept at the time limit can be worse than none: keep the
      // merges only where the simulated time agrees they help.
      if (merged_us <= r.ordered_simulated_us) {
        s = std::move(m);
        r.merged_transfers = cs.merged;
        r.contiguity_makespan_us = cs.after_us;
        r.simulated_us = merged_us;
      } else if (o.progress) {
        o.progress(fmt::format("contiguity: the merges simulate at {:.2f} us, slower than {:.2f} us without; not kept",
                               merged_us, r.ordered_simulated_us));
      }
    } else if (cs.merged > 0) {
      return false;
    }
    r.contiguity_s = seconds_since(stage);
  }
  s.name = fmt::format("taccl_{}_{}_c{}", to_string(c), t.name, p.chunkup);
  VerifyResult v = verify(s);
  if (!v.ok) return *error = "internal: synthesized schedule does not verify: " + (v.errors.empty() ? "" : v.errors[0]), false;
  r.total_s = seconds_since(t0);
  if (o.progress) o.progress(fmt::format("lowered and verified: {} ({:.2f} s total)", s.name, r.total_s));
  *out = std::move(s);
  return true;
}

}  // namespace

bool synthesize(const Topology& t, const Sketch& sketch, const SynthOptions& o, Schedule* out, SynthReport* report,
                std::string* error) {
  try {
    return synthesize_or_throw(t, sketch, o, out, report, error);
  } catch (const std::exception& e) {  // allocation failure, or an internal inconsistency
    *error = fmt::format("synthesis failed: {}", e.what());
    return false;
  }
}

}  // namespace braid

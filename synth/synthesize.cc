// The synthesis driver: problem -> routing -> ordering -> contiguity ->
// lowering -> verification, with timings and progress lines (see include/braid/synth.h).
#include <fmt/format.h>

#include <chrono>

#include "braid/verify.h"
#include "synth/problem.h"

namespace braid {

namespace {

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

  r.contiguity_makespan_us = r.ordered_makespan_us;
  if (o.contiguity) {
    stage = clock::now();
    synth::ContiguityStats cs;
    synth::merge_contiguous(p, o, &transfers, &cs);
    r.contiguity_s = seconds_since(stage);
    r.contiguity_candidates = cs.candidate_pairs;
    r.merged_transfers = cs.merged;
    r.contiguity_makespan_us = cs.after_us;
  }

  stage = clock::now();
  Schedule s;
  if (!synth::lower(p, c, transfers, &s, error)) return false;
  s.name = fmt::format("taccl_{}_{}_c{}", to_string(c), t.name, p.chunkup);
  r.lowering_s = seconds_since(stage);
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

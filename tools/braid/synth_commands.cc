#include "tools/braid/synth_commands.h"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "braid/msccl_xml.h"
#include "braid/schedule_library.h"
#include "braid/sim.h"
#include "braid/sketch.h"
#include "braid/synth.h"
#include "braid/verify.h"

namespace braid::cli {
namespace {

std::string fmt_size(uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

}  // namespace

bool parse_sizes(const std::string& list, std::vector<uint64_t>* out, std::string* error) {
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    uint64_t v = 0;
    if (!parse_size(list.substr(pos, end - pos), &v)) return *error = fmt::format("bad size '{}'", list.substr(pos, end - pos)), false;
    out->push_back(v);
    pos = end + 1;
  }
  return true;
}

bool parse_size(const std::string& text, uint64_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;  // stoull takes "-1", " 1"
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  std::string unit = text.substr(used);
  uint64_t mul = unit.empty() || unit == "B" ? 1 : unit == "K" ? 1ull << 10 : unit == "M" ? 1ull << 20 : unit == "G" ? 1ull << 30 : 0;
  if (!mul || v > UINT64_MAX / mul) return false;
  *out = v * mul;
  return true;
}

// load_topology, with what the file's reader notes (an NCCL XML without
// NVLinks...) on stderr.
bool load_topology_noted(const std::string& spec, int nodes, Topology* out, std::string* error) {
  std::vector<std::string> notes;
  if (!load_topology(spec, nodes, out, error, &notes)) return false;
  for (const std::string& note : notes) fmt::print(stderr, "braid: note: {}\n", note);
  return true;
}

bool topology_for(const Schedule& s, const std::string& spec, Topology* out, std::string* error) {
  if (spec.empty()) {
    NodeProfile flat;
    flat.name = "flat";
    flat.gpus_per_node = s.nranks;
    flat.switched = true;
    flat.alpha_us = 1;
    flat.betas.assign(s.nranks, std::vector<double>(s.nranks, 10));
    for (int r = 0; r < s.nranks; ++r) flat.betas[r][r] = 0;
    *out = replicate(flat, 1);
    return true;
  }
  Topology t;
  if (!load_topology_noted(spec, 0, &t, error)) return false;
  // A built-in of the wrong size: replicate it to the schedule's rank count.
  if (t.nranks() != s.nranks && s.nranks % t.gpus_per_node == 0 && t.nodes == 1) {
    if (!load_topology(spec, s.nranks / t.gpus_per_node, &t, error)) return false;
  }
  if (t.nranks() != s.nranks)
    return *error = fmt::format("topology {} has {} ranks, the schedule {}", t.name, t.nranks(), s.nranks), false;
  *out = std::move(t);
  return true;
}

int write_svg(const Schedule& s, const std::string& topology, uint64_t size, const std::string& path) {
  Topology t;
  std::string error;
  SimResult r;
  if (!topology_for(s, topology, &t, &error) || !simulate(s, t, size, &r, &error)) {
    fmt::print(stderr, "braid: {}\n", error);
    return 2;
  }
  std::ofstream f(path);
  if (!f || !(f << render_svg(s, t, r))) {
    fmt::print(stderr, "braid: cannot write {}\n", path);
    return 2;
  }
  fmt::print("{}: {} messages on {} ({:.2f} us at {} B) -> {}\n", s.name, r.transfers.size(), t.name, r.time_us, size, path);
  return 0;
}

Command add_synth_command(CLI::App& app) {
  struct Args {
    std::string topology, sketch, collective = "allgather", output;
    double time_limit = 60, contiguity_time_limit = 30, chunk_mb = 1;
    bool heuristic = false, no_contiguity = false, quiet = false, solver_log = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("synth", "synthesize a schedule from a topology and a TACCL sketch");
  cmd->add_option("--topology,-t", args->topology, "built-in name (braid topo), topology JSON (braid or TACCL) or NCCL topology XML")->required();
  cmd->add_option("--sketch,-s", args->sketch, "TACCL communication sketch JSON")->required();
  cmd->add_option("--collective,-c", args->collective, "allgather, alltoall or allreduce");
  cmd->add_option("-o,--output", args->output, "output file: .json (braid) or .xml (MSCCL)")->required();
  cmd->add_option("--time-limit", args->time_limit, "seconds for the routing MILP (best solution kept)");
  cmd->add_option("--contiguity-time-limit", args->contiguity_time_limit, "seconds for the contiguity MILP (best solution kept)");
  cmd->add_option("--chunk-mb", args->chunk_mb, "chunk size in MB at which link costs are weighed");
  cmd->add_flag("--heuristic", args->heuristic, "no MILP: greedy shortest-path routes, greedy merges (stage 3)");
  cmd->add_flag("--no-contiguity", args->no_contiguity, "skip stage 3: every chunk its own message on inter-node links");
  cmd->add_flag("--quiet,-q", args->quiet, "no progress lines");
  cmd->add_flag("--solver-log", args->solver_log, "show CBC's progress (incumbent, bound, time)");
  return {cmd, [args]() {
            std::string error;
            auto coll = collective_from_string(args->collective);
            if (!coll) return fmt::print(stderr, "braid: unknown collective '{}'\n", args->collective), 2;
            Sketch sketch;
            if (!load_sketch(args->sketch, 0, &sketch, &error)) return fmt::print(stderr, "braid: {}\n", error), 2;
            Topology t;
            if (!load_topology_noted(args->topology, sketch.nnodes, &t, &error))
              return fmt::print(stderr, "braid: {}\n", error), 2;
            if (sketch.nnodes != t.nodes) {
              // A built-in named without "xN": replicate it to the sketch's node count.
              if (!load_topology(args->topology + fmt::format("x{}", sketch.nnodes), 0, &t, &error) &&
                  !load_topology(args->topology, sketch.nnodes, &t, &error))
                return fmt::print(stderr, "braid: {}\n", error), 2;
            }
            // Again, now that local GPU ids can be checked against the topology.
            if (!load_sketch(args->sketch, t.gpus_per_node, &sketch, &error)) return fmt::print(stderr, "braid: {}\n", error), 2;
            auto t0 = std::chrono::steady_clock::now();
            SynthOptions o;
            o.collective = *coll;
            o.time_limit_s = args->time_limit;
            o.chunk_mb = args->chunk_mb;
            o.use_milp = !args->heuristic;
            o.contiguity = !args->no_contiguity;
            o.contiguity_time_limit_s = args->contiguity_time_limit;
            o.solver_log = args->solver_log ? 1 : 0;
            if (!args->quiet)
              o.progress = [t0](const std::string& line) {
                double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                fmt::print(stderr, "[{:7.2f} s] {}\n", s, line);
              };
            Schedule s;
            SynthReport report;
            if (!synthesize(t, sketch, o, &s, &report, &error)) return fmt::print(stderr, "braid: {}\n", error), 1;
            if (!save_schedule_file(args->output, s, &error)) return fmt::print(stderr, "braid: {}\n", error), 2;
            fmt::print("{}: {} ranks, verified, written to {} (synthesis {:.2f} s; routing {:.2f} s{}{}; ordering {:.2f} s, "
                       "{:.2f} us; contiguity {:.2f} s, {:.2f} us, {} of {} candidate pairs merged; simulated {:.2f} us at {} MB chunks)\n",
                       s.name, s.nranks, args->output, report.total_s, report.routing_s,
                       report.milp_used ? (report.milp_optimal ? ", MILP optimal" : ", MILP at time limit") : ", heuristic routes",
                       report.milp_used ? fmt::format(", T {:.2f} us vs heuristic {:.2f}", report.milp_objective, report.heuristic_objective) : "",
                       report.ordering_s, report.ordered_makespan_us, report.contiguity_s, report.contiguity_makespan_us,
                       report.merged_transfers, report.contiguity_candidates, report.simulated_us, o.chunk_mb);
            return 0;
          }};
}

Command add_sim_command(CLI::App& app) {
  struct Args {
    std::string file, topology, sizes = "1K,1M,64M", late;
    uint64_t fragment = 0;
    bool unverified = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("sim", "predicted time and busbw per size, against ring on the same topology");
  cmd->add_option("file", args->file, "schedule file (.json or MSCCL .xml)")->required();
  cmd->add_option("--topology,-t", args->topology, "built-in, JSON or NCCL XML topology (default: all ranks on one switch)");
  cmd->add_option("--sizes", args->sizes, "comma list of sizes (nccl-tests' size column), e.g. 1K,1M,64M");
  cmd->add_option("--late", args->late,
                  "RANK:US: that rank reaches the call US microseconds late; times are then from its arrival");
  cmd->add_option("--fragment", args->fragment,
                  "bytes: ops move in fragments of this size, tile by tile, as the host executor runs them "
                  "(default 0: whole chunks, the synthesizer's model)");
  cmd->add_flag("--unverified", args->unverified, "simulate a schedule that does not verify (wrong results or deadlock)");
  return {cmd, [args]() {
            std::string error;
            Schedule s;
            Topology t;
            std::vector<uint64_t> sizes;
            if (!load_schedule_file(args->file, &s, &error) || !topology_for(s, args->topology, &t, &error) ||
                !parse_sizes(args->sizes, &sizes, &error))
              return fmt::print(stderr, "braid: {}\n", error), 2;
            // A schedule that computes the wrong thing has no speed worth printing.
            if (VerifyResult v = verify(s); !v.ok) {
              fmt::print(stderr, "braid: {} does not verify ({} slots per connection):\n", args->file, s.slots);
              for (const std::string& e : v.errors) fmt::print(stderr, "  {}\n", e);
              if (!args->unverified) return fmt::print(stderr, "braid: not simulated (--unverified simulates it anyway)\n"), 1;
              fmt::print("# WARNING: {} does not verify; times below are for a wrong schedule\n", s.name);
            }
            // Every schedule, ring and the hierarchical one included, is timed with the same late rank.
            SimOptions options;
            // Each fragment is an event: a tiny one makes millions of them (and "-1" reads as 2^64 - 1).
            if (args->fragment != 0 && (args->fragment < 256 || args->fragment > (uint64_t(1) << 40)))
              return fmt::print(stderr, "braid: --fragment {}: want 0 or 256 bytes to 1 TiB\n", args->fragment), 2;
            options.fragment_bytes = args->fragment;
            double late_us = 0;
            if (!args->late.empty()) {
              int rank = -1, used = 0;
              std::string why;  // name the part that is wrong
              if (std::sscanf(args->late.c_str(), "%d:%lf%n", &rank, &late_us, &used) != 2 ||
                  size_t(used) != args->late.size() || !std::isfinite(late_us))
                why = "want RANK:US, US a number of microseconds";
              else if (rank < 0 || rank >= s.nranks)
                why = fmt::format("rank {} is out of range: want 0 <= RANK < {}", rank, s.nranks);
              else if (late_us < 0 || late_us > 1e12)
                why = fmt::format("the delay {} us is {}: want 0 to 1e12 us", late_us,
                                  late_us < 0 ? "negative" : "too large");
              if (!why.empty()) return fmt::print(stderr, "braid: --late {}: {}\n", args->late, why), 2;
              options.rank_start_us.assign(size_t(s.nranks), 0.0);
              options.rank_start_us[size_t(rank)] = late_us;
            }
            auto sim = [&](const Schedule& x, uint64_t size, SimResult* r) {
              if (!simulate(x, t, size, r, &error, options)) return false;
              r->time_us -= late_us;
              return true;
            };
            Schedule ring, hier;
            bool have_ring = topology_ring(t, s.collective, &ring, &error);
            bool have_hier = t.nodes > 1 && hierarchical(t, s.collective, &hier, &error);
            fmt::print("# {} ({}, {} ranks) on {}{}{}\n", s.name, to_string(s.collective), s.nranks, t.name,
                       late_us > 0 ? fmt::format("; times from rank {}'s arrival, {} us late",
                                                 args->late.substr(0, args->late.find(':')), late_us) : "",
                       args->fragment ? fmt::format("; {}-byte fragments", args->fragment) : "");
            fmt::print("# {:>8} {:>12} {:>10} {:>12} {:>10} {:>8}{}\n", "size", "time(us)", "busbw", "ring(us)", "ring bw",
                       "speedup", have_hier ? fmt::format(" {:>12} {:>10}", "hier(us)", "hier bw") : "");
            for (uint64_t size : sizes) {
              SimResult r, rr, hr;
              if (!sim(s, size, &r)) return fmt::print(stderr, "braid: {}\n", error), 1;
              std::string ring_cols = "           -          -        -", hier_cols;
              if (have_ring && sim(ring, size, &rr))
                ring_cols = fmt::format("{:>12.2f} {:>10.2f} {:>7.2f}x", rr.time_us,
                                        bus_bandwidth_gbps(s.collective, s.nranks, size, rr.time_us), rr.time_us / r.time_us);
              if (have_hier && sim(hier, size, &hr))
                hier_cols = fmt::format(" {:>12.2f} {:>10.2f}", hr.time_us, bus_bandwidth_gbps(s.collective, s.nranks, size, hr.time_us));
              fmt::print("  {:>8} {:>12.2f} {:>10.2f} {}{}\n", fmt_size(size), r.time_us,
                         bus_bandwidth_gbps(s.collective, s.nranks, size, r.time_us), ring_cols, hier_cols);
            }
            return 0;
          }};
}

Command add_convert_command(CLI::App& app) {
  struct Args {
    std::string in, out;
    bool legacy = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a schedule between braid JSON and MSCCL XML (by extension)");
  cmd->add_option("input", args->in, "input schedule (.json or .xml)")->required();
  cmd->add_option("output", args->out, "output schedule (.json or .xml)")->required();
  cmd->add_flag("--legacy", args->legacy, "MSCCL XML without minBytes/maxBytes/outofplace (older runtimes)");
  return {cmd, [args]() {
            std::string error, text;
            Schedule s;
            if (!load_schedule_file(args->in, &s, &error)) return fmt::print(stderr, "braid: {}\n", error), 2;
            VerifyResult v = verify(s);
            if (!v.ok) fmt::print(stderr, "braid: warning: {} does not verify: {}\n", args->in, v.errors[0]);
            if (args->legacy && args->out.size() > 4 && args->out.substr(args->out.size() - 4) == ".xml") {
              if (!schedule_to_msccl_xml(s, &text, &error, MscclDialect::Legacy)) return fmt::print(stderr, "braid: {}\n", error), 2;
              std::ofstream f(args->out);
              if (!(f << text)) return fmt::print(stderr, "braid: cannot write {}\n", args->out), 2;
            } else if (!save_schedule_file(args->out, s, &error)) {
              return fmt::print(stderr, "braid: {}\n", error), 2;
            }
            fmt::print("{} -> {}\n", args->in, args->out);
            return v.ok ? 0 : 1;
          }};
}

Command add_topo_command(CLI::App& app) {
  struct Args {
    std::string name;
    int nodes = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("topo", "list built-in topologies, or print one");
  cmd->add_option("name", args->name, "built-in name (e.g. ndv2, dgx2x2), topology JSON or NCCL topology XML file");
  cmd->add_option("--nodes,-n", args->nodes, "replicate to this many nodes")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", args->json, "print braid's topology JSON");
  return {cmd, [args]() {
            if (args->name.empty()) {
              for (auto& [name, what] : builtin_topology_names()) fmt::print("{:<10} {}\n", name, what);
              return 0;
            }
            Topology t;
            std::string error;
            if (!load_topology_noted(args->name, args->nodes, &t, &error)) return fmt::print(stderr, "braid: {}\n", error), 2;
            if (args->json) return fmt::print("{}\n", topology_to_json(t)), 0;
            fmt::print("{}: {} nodes x {} GPUs, {} NICs per node, {} links, {} shared ports\n", t.name, t.nodes,
                       t.gpus_per_node, t.nics_per_node, t.links.size(), t.ports.size());
            for (const Link& l : t.links) {
              if (l.kind == LinkKind::Network && t.nranks() > 16) continue;
              std::string ports;
              for (int p : l.ports) ports += " " + t.ports[p].name;
              fmt::print("  {:>3} -> {:<3} {:<8} alpha {:.2f} us, beta {:.2f} us/MB{}\n", l.src, l.dst,
                         link_kind_name(l.kind),
                         l.alpha_us, l.beta_us_per_mb, ports.empty() ? "" : "  via" + ports);
            }
            return 0;
          }};
}

}  // namespace braid::cli

// `braid`: the command-line face of the library.
//   braid env                      the BRAID_* variables, defaults and current values
//   braid algorithms               the built-in schedule generators
//   braid show  (FILE | -a ALGO -c COLL -n N [-r ROOT]) [--json]
//   braid verify (FILE | -a ALGO -c COLL -n N [-r ROOT]) [--slots K] [--rank-order]
//   braid show ... -o X.svg [--topology T] [--size S]   per-link timeline picture
//   braid synth, sim, convert, topo                      see synth_commands.h
//   braid tuning                   the CUDA tuning table's settings, see cmd_tuning.h
//   braid nics                     NICs, GPUs and NUMA nodes, and the nearest devices, see cmd_nics.h
// FILE is braid JSON, or MSCCL XML when it ends in .xml.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>

#include "braid/algorithms.h"
#include "braid/schedule_json.h"
#include "braid/verify.h"
#include "src/base/env.h"
#include "tools/braid/cmd_stragglar.h"
#include "tools/braid/cmd_nics.h"
#include "tools/braid/cmd_tuning.h"
#include "tools/braid/schedule_source.h"
#include "tools/braid/schedule_text.h"
#include "tools/braid/synth_commands.h"

namespace {

void add_source_options(CLI::App* cmd, braid::cli::ScheduleSource* source) {
  cmd->add_option("file", source->file, "schedule JSON file");
  cmd->add_option("-a,--algo", source->algorithm, "built-in algorithm name");
  cmd->add_option("-c,--coll", source->collective, "collective (allreduce, allgather, ...)");
  // Built-in schedules take up to n^2 steps: the CLI builds them up to 1024 ranks.
  cmd->add_option("-n,--nranks", source->nranks, "number of ranks")->check(CLI::Range(1, 1024));
  cmd->add_option("-r,--root", source->root, "root rank (rooted collectives)")->check(CLI::Range(0, 1 << 30));
}

// braid's variables, then the NCCL_* ones it honours, each with its value as
// braid reads it (NCCL's configuration files and env plugin included).
int print_env() {
  for (const auto& table : {braid::env_registry(), braid::nccl_env_vars()})
    for (const braid::EnvVar& v : table) {
      const std::string now = braid::env_raw(v.name);
      fmt::print("{:<28} default {:<8} {}{}\n", v.name, v.default_value[0] ? v.default_value : "-", v.description,
                 now.empty() ? "" : fmt::format("  [set: {}]", now));
    }
  return 0;
}

int print_algorithms() {
  for (const braid::AlgorithmInfo& a : braid::algorithm_registry())
    fmt::print("{:<10} {:<14}{}\n", a.name, braid::to_string(a.collective), a.rooted ? " rooted" : "");
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"braid: collective schedules and the tools around them"};
  app.require_subcommand(1);
  auto* env = app.add_subcommand("env", "print the variables braid reads (BRAID_* and NCCL_*), with their values");
  auto* algorithms = app.add_subcommand("algorithms", "list built-in schedule generators");

  braid::cli::ScheduleSource source;
  bool as_json = false;
  std::string svg_path, svg_topology, svg_size = "1M";
  auto* show = app.add_subcommand("show", "print a schedule");
  add_source_options(show, &source);
  show->add_flag("--json", as_json, "print braid's JSON form");
  show->add_option("-o,--output", svg_path, "write an SVG per-link timeline (simulated) to this file");
  show->add_option("--topology,-t", svg_topology, "topology for the SVG (default: all ranks on one switch)");
  show->add_option("--size", svg_size, "message size for the SVG (nccl-tests' size column), e.g. 1M");

  int slots = 0;
  auto* verify = app.add_subcommand("verify", "symbolically verify a schedule");
  add_source_options(verify, &source);
  verify->add_option("--slots", slots, "chunks each connection buffers (deadlock check; default: the schedule's own)");
  bool rank_order = false;
  verify->add_flag("--rank-order", rank_order,
                   "also require every reduction to fold in rank order (what BRAID_DETERMINISTIC runs)");

  auto* stragglar = braid::cli::add_stragglar_command(app);
  const braid::cli::Command synth_commands[] = {
      braid::cli::add_synth_command(app),   braid::cli::add_sim_command(app),
      braid::cli::add_convert_command(app), braid::cli::add_topo_command(app),
      braid::cli::add_tuning_command(app),  braid::cli::add_nics_command(app)};

  CLI11_PARSE(app, argc, argv);
  if (stragglar->parsed()) return braid::cli::run_stragglar();
  if (env->parsed()) return print_env();
  if (algorithms->parsed()) return print_algorithms();
  for (const braid::cli::Command& c : synth_commands)
    if (c.app->parsed()) return c.run();

  braid::Schedule schedule;
  std::string error;
  if (!braid::cli::load_schedule(source, &schedule, &error)) {
    fmt::print(stderr, "braid: {}\n", error);
    return 2;
  }
  if (show->parsed() && !svg_path.empty()) {
    uint64_t size = 0;
    if (!braid::cli::parse_size(svg_size, &size)) {
      fmt::print(stderr, "braid: bad --size '{}'\n", svg_size);
      return 2;
    }
    return braid::cli::write_svg(schedule, svg_topology, size, svg_path);
  }
  if (show->parsed()) {
    fmt::print("{}", as_json ? braid::schedule_to_json(schedule) + "\n" : braid::cli::schedule_to_text(schedule));
    return 0;
  }
  braid::VerifyResult result = braid::verify(schedule, {.slots = slots, .rank_order = rank_order});
  if (result.ok) {
    fmt::print("{}: OK ({} ranks, {}{})\n", schedule.name, schedule.nranks, braid::to_string(schedule.collective),
               rank_order ? ", folded in rank order" : "");
    return 0;
  }
  fmt::print("{}: FAILED\n", schedule.name);
  for (const std::string& e : result.errors) fmt::print("  {}\n", e);
  return 1;
}

int main(int argc, char** argv) {
  // What a request too large for the machine, or a library's exception,
  // ends in: a message and exit status 2, not std::terminate's abort.
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "braid: out of memory: the request is too large for this machine\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "braid: internal error: {}\n", e.what());
  }
  return 2;
}

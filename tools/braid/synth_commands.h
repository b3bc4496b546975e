// The CLI's synthesis-side subcommands: synth, sim, convert, topo, and the
// SVG output of show.  Each add_* registers a subcommand and returns the
// function main() runs when that subcommand was given.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "braid/schedule.h"
#include "braid/topology.h"

namespace braid::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_synth_command(CLI::App& app);
Command add_sim_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_topo_command(CLI::App& app);

// The topology a schedule is simulated on: `spec` (built-in name, optionally
// "xN", or a JSON file) or, when empty, all ranks on one switch ("flat").
bool topology_for(const Schedule& s, const std::string& spec, Topology* out, std::string* error);
// `braid show FILE -o X.svg`: simulate at `size` bytes and draw the timeline.
int write_svg(const Schedule& s, const std::string& topology, uint64_t size, const std::string& path);
// "1K", "64M", "1G", "4096" -> bytes; false on bad input.
bool parse_size(const std::string& text, uint64_t* out);
// "8,64K,1M" -> sizes; false with *error on bad input.
bool parse_sizes(const std::string& list, std::vector<uint64_t>* out, std::string* error);

}  // namespace braid::cli

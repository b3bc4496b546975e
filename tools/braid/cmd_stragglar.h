// `braid stragglar`: StragglAR's round plans, proofs and cost model.
#pragma once

#include <CLI/CLI.hpp>

namespace braid::cli {

// Adds the subcommand to `app`; run_stragglar() runs it once parsed.
CLI::App* add_stragglar_command(CLI::App& app);
int run_stragglar();

}  // namespace braid::cli

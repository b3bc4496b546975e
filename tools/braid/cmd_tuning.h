// `braid tuning`: what the CUDA backend's tuning table (src/plan/device_tuning.h)
// resolves to for a device, rank count and ranks per device, and which row
// (or variable, or default) decided each setting.
#pragma once

#include "tools/braid/synth_commands.h"

namespace braid::cli {

Command add_tuning_command(CLI::App& app);

}  // namespace braid::cli

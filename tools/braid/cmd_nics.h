// `braid nics`: this machine's InfiniBand devices, NVIDIA GPUs and NUMA nodes
// as sysfs places them, and which devices a rank on each GPU, or bound to
// each node, takes as nearest (src/transport/net/nic_affinity.h): what to
// look at before a job on a machine with a NIC per GPU (rails).
#pragma once

#include "tools/braid/synth_commands.h"

namespace braid::cli {

Command add_nics_command(CLI::App& app);

}  // namespace braid::cli

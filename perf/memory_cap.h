// -e against the memory the buffers would take, as nccl-tests trims maxBytes
// ("# Reducing maxBytes to N due to memory limitation").
#pragma once

#include <cstddef>

#include "perf/options.h"
#include "perf/world.h"

namespace perf {

// The largest -e this run's buffers fit in, the same on every process (a
// collective call): each rank has a send and a receive buffer of -e bytes
// (plus -u's padding) in host memory, and with device buffers the same on
// the GPU.  As nccl-tests, per memory: 1 GiB per 16 GiB installed (at most
// 4 GiB) and 1 GiB for everything else stay free.  Host memory is
// MemAvailable (or BRAID_PERF_HOST_MEMORY, a size), shared by the ranks of
// every process on the host; GPU memory is the device's, shared by the
// process's ranks.
size_t memory_max_bytes(const Options& o, World& world);

}  // namespace perf

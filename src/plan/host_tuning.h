// Size crossovers for the host backend, from an alpha-beta-gamma model (see
// host_tuning.cc).  The planner asks; nothing here touches a communicator.
#pragma once

#include <cstdint>

namespace braid {

// Per-rank AllReduce bytes at or below which recursive doubling beats ring
// on `nranks` ranks of this machine (oversubscribed when they outnumber the
// cores this process may use).
uint64_t host_allreduce_rd_max_bytes(int nranks);

// The same, with the machine's state given (for tests and the CLI).
uint64_t host_allreduce_rd_max_bytes(int nranks, bool oversubscribed);

}  // namespace braid

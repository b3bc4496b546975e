// Closed-form alpha-beta times of braid's algorithms, for estimates that
// name a number in microseconds as NCCL's do: ncclGroupSimulateEnd's
// (src/runtime/group_sim.cc) and the cost table a tuner plugin is shown
// (src/plan/tuner_choice.h).  The forms are the ones the algorithm files
// document; alpha and beta are rough host-backend figures (shared memory on
// one host, TCP between hosts), not measurements of the running machine.
#pragma once

#include <cstdint>
#include <string>

#include "braid/schedule.h"

namespace braid {

struct LinkCost {
  double alpha_us;     // one dependent step
  double us_per_byte;  // moving a byte
};

// The figures for a communicator whose ranks share one host, or not.
LinkCost link_cost(bool between_hosts);

// `algorithm`'s time (its family: "ring", "rd", "chain", "direct", "twoshot",
// "oneshot", "stragglar" (with no late rank), "allgather" for
// allgather_fold, "ll" for the CUDA LL path's one hop; any other is costed
// as the log-step default) for collective `c` on `nranks` ranks,
// `block_bytes` being the call's count times its type's size.  The planner
// ranks what a call's selection admits by it where the size rule's choice
// is not among them.
double collective_us(Collective c, int nranks, uint64_t block_bytes, const std::string& algorithm,
                     const LinkCost& link);

}  // namespace braid

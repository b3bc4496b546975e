// The planner: which Schedule runs a given call.
//
// BRAID_ALGO forces a choice ("ring", or per collective
// "allreduce=rd,allgather=ring"); otherwise the choice is by size: the
// latency-optimal schedule for small messages, bandwidth-optimal for large.
// Generated schedules are cached per communicator.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "braid/schedule.h"
#include "src/core/status.h"
#include "src/plan/straggler.h"

namespace braid {

// Bytes at or below which AllReduce uses recursive doubling instead of ring.
constexpr uint64_t kSmallAllReduceBytes = 32 * 1024;

// The algorithm name the planner picks (before BRAID_ALGO).
std::string default_algorithm(Collective c, int nranks, uint64_t bytes);

// The algorithm BRAID_ALGO asks for this collective, or "" if none.
std::string forced_algorithm(Collective c);

class PlanCache {
 public:
  // `bytes` is the per-rank input size.  `straggler` >= 0 (AllReduce): that
  // rank is late, so StragglAR replaces ring (BRAID_ALGO still wins).
  Status schedule_for(Collective c, int nranks, int root, uint64_t bytes, std::shared_ptr<const Schedule>* out,
                      int straggler = -1);

  // The communicator's BRAID_STRAGGLER state, created on first use.
  StragglerTracker& straggler(int nranks, int rank) {
    if (!straggler_) straggler_ = std::make_unique<StragglerTracker>(nranks, rank);
    return *straggler_;
  }

 private:
  std::map<std::tuple<int, int, int, std::string>, std::shared_ptr<const Schedule>> cache_;
  std::unique_ptr<StragglerTracker> straggler_;
};

}  // namespace braid

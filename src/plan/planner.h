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

namespace braid {

// AllReduce: recursive doubling up to host_allreduce_rd_max_bytes (a cost
// model, src/plan/host_tuning.cc), ring above.

// The algorithm name the planner picks (before BRAID_ALGO).
std::string default_algorithm(Collective c, int nranks, uint64_t bytes);

// The algorithm BRAID_ALGO asks for this collective, or "" if none.
std::string forced_algorithm(Collective c);

// BRAID_ALGO is read once, when the communicator is created (so a call
// does not pay for getenv, ~1k instructions with mpirun's environment).
class PlanCache {
 public:
  PlanCache();
  // `bytes` is the per-rank input size.
  Status schedule_for(Collective c, int nranks, int root, uint64_t bytes, std::shared_ptr<const Schedule>* out);

 private:
  Status lookup(Collective c, int nranks, int root, uint64_t bytes, std::shared_ptr<const Schedule>* out);

  std::string algo_spec_;
  std::map<std::tuple<int, int, int, std::string>, std::shared_ptr<const Schedule>> cache_;
  // The last answer: loops repeat the same call, and this skips the map.
  struct Last {
    Collective c = Collective::Custom;
    int nranks = -1, root = -1;
    uint64_t bytes = 0;
    std::shared_ptr<const Schedule> schedule;
  } last_;
};

}  // namespace braid

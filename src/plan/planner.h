// The planner: which Schedule runs a given call.
//
// BRAID_ALGO forces a choice ("ring", or per collective
// "allreduce=rd,allgather=ring"); otherwise the choice is by size: the
// latency-optimal schedule for small messages, bandwidth-optimal for large.
// Generated schedules are cached per communicator.
//
// BRAID_SCHEDULES=<dir>: schedule files (braid JSON, MSCCL XML) loaded once
// per process and verified; a call uses the first one (file name order) that
// matches its collective, rank count, placement and size, unless BRAID_ALGO
// forces an algorithm for that collective.  Otherwise the built-ins run.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "braid/schedule.h"
#include "braid/schedule_library.h"
#include "src/core/status.h"

namespace braid {

// Bytes at or below which AllReduce uses recursive doubling instead of ring.
constexpr uint64_t kSmallAllReduceBytes = 32 * 1024;

// The algorithm name the planner picks (before BRAID_ALGO).
std::string default_algorithm(Collective c, int nranks, uint64_t bytes);

// The algorithm BRAID_ALGO asks for this collective, or "" if none.
std::string forced_algorithm(Collective c);

// The schedules loaded from BRAID_SCHEDULES (empty when unset); loaded on
// first use, once per process, rejected files reported as warnings.
const ScheduleLibrary& file_schedules();

class PlanCache {
 public:
  // `bytes` is the per-rank input size.  With Placement::Unknown only file
  // schedules correct in both placements are eligible.
  Status schedule_for(Collective c, int nranks, int root, uint64_t bytes, std::shared_ptr<const Schedule>* out,
                      Placement placement = Placement::Unknown);

 private:
  std::map<std::tuple<int, int, int, std::string>, std::shared_ptr<const Schedule>> cache_;
};

}  // namespace braid

// The planner: which Schedule runs a given call.
//
// BRAID_ALGO forces a choice ("ring", or per collective
// "allreduce=rd,allgather=ring": src/plan/braid_algo.h); otherwise the choice
// is by size: the latency-optimal schedule for small messages,
// bandwidth-optimal for large.
// Generated schedules are cached per communicator.
//
// Schedule files (braid JSON, MSCCL XML) named by BRAID_SCHEDULES and the
// MSCCL variables (include/braid/schedule_library.h) are loaded once per
// process and verified; a call uses the first one that matches its
// collective, rank count, placement and message size, unless BRAID_ALGO
// forces an algorithm for that collective, or the file needs more slots per
// connection than the transport has.  Otherwise the built-ins run.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "braid/algorithms.h"
#include "braid/schedule.h"
#include "braid/schedule_library.h"
#include "src/base/status.h"
#include "src/ops/plan_records.h"
#include "src/plan/braid_algo.h"
#include "src/plan/device_tuning.h"
#include "src/plan/host_tuning.h"
#include "src/plan/nccl_algo.h"
#include "src/plan/straggler.h"

namespace braid {

// AllReduce: recursive doubling up to host_allreduce_rd_max_bytes (a cost
// model, src/plan/host_tuning.cc), ring above.  AllGather and AlltoAll:
// ring and pairwise, or direct where a host has more ranks than cores.

// The algorithm name the planner picks (before BRAID_ALGO); `bytes` per rank.
std::string default_algorithm(Collective c, int nranks, uint64_t bytes, const HostTuning& tuning);
// The same with this process's own view (tests, tools).
std::string default_algorithm(Collective c, int nranks, uint64_t bytes);
// The size rule where the host backend's ranks load and store each other's
// buffers (one host): the one-sided two-shot for mid-sized AllReduce, and
// the one-shot for mid-sized ReduceScatter on 2 ranks (host_tuning.h), else
// default_algorithm's.  Not with a known straggler:
// ring then becomes StragglAR.
std::string one_host_algorithm(Collective c, int nranks, uint64_t bytes, const HostTuning& tuning);
// The same under BRAID_DETERMINISTIC, for the collectives that reduce;
// `one_sided`: the host backend's ranks load and store each other's buffers.
std::string rank_order_algorithm(Collective c, int nranks, uint64_t bytes, const HostTuning& tuning,
                                 bool one_sided);
// What BRAID_DETERMINISTIC runs where `algorithm` was chosen: `algorithm`
// itself if `c` does not reduce or its schedule folds in rank order, else
// rank_order_algorithm's (as PlanCache does; for tools that show choices).
std::string rank_order_choice(Collective c, int nranks, uint64_t bytes, const HostTuning& tuning, bool one_sided,
                              const std::string& algorithm);

// What runs of a call's algorithm selection (CollectiveCall::algorithms, a
// bit per algorithm_registry() index; NCCL_ALGO's too): `usual` (what braid
// would run with no selection: a tuning row, the one-sided or rank-order
// size rules) if it admits it, else default_algorithm's, else the admitted
// algorithm for `c` the cost model (cost_model.h) ranks cheapest for the
// call, as NCCL picks the cheapest of what NCCL_ALGO leaves: the other
// two-sided algorithms default_algorithm picks from first (rd for
// AllReduce), then the one-sided ones and the rank-order folds, StragglAR
// last; the first in registry order on a tie ("" if none).
std::string selected_algorithm(Collective c, int nranks, uint64_t bytes, const std::string& usual,
                               const HostTuning& tuning, uint32_t algorithms);

// The schedules loaded from BRAID_SCHEDULES, MSCCL_XML_FILES, MSCCL_CONFIG
// and MSCCL_ALGO_DIR (empty when none is set); loaded on first use, once per
// process, rejected files reported as warnings.
const ScheduleLibrary& file_schedules();
// What the schedules of file_schedules() for `nranks` ranks are, by their
// content and order (not the paths they came from): 0 where none is; the
// ranks of a communicator must agree on it (they would run different
// schedules for one call).
uint64_t file_schedules_hash(int nranks);
// Whether `s` came from file_schedules().
bool is_file_schedule(const Schedule* s);

// BRAID_ALGO is read once, when the communicator is created (so a call
// does not pay for getenv, ~1k instructions with mpirun's environment).
class PlanCache {
 public:
  PlanCache();
  // What every rank agreed on at init (ranks on different machines could
  // see different ones and then run different schedules).
  void set_tuning(const HostTuning& tuning) { tuning_ = tuning; }
  // Fragments the communicator's transport buffers per connection: schedule
  // files needing more (Schedule::slots) are not used.
  void set_slots(int slots) { slots_ = slots; }
  // How StragglAR lays out phase 1 (BRAID_STRAGGLAR_LANES, resolved for the
  // communicator's backend at init, before any call is planned).
  void set_stragglar_lanes(StragglarLanes lanes) { stragglar_lanes_ = lanes; }
  // The CUDA backend's tuning table (src/plan/device_tuning.h): where it
  // names an algorithm for a collective and size, that replaces the size
  // rule (BRAID_ALGO, schedule files and a call's selection still come
  // first; a known straggler turns ring into StragglAR, whoever chose ring).
  void set_device_tuning(std::shared_ptr<const DeviceTuning> tuning) { device_tuning_ = std::move(tuning); }
  // Whether the backend can run one-sided schedules (every rank loads and
  // stores every peer's buffers; agreed at init).  Without it BRAID_ALGO
  // naming one falls back to the default, a schedule file with one-sided
  // ops is not used, and a call's selection of only those fails.
  void set_peer_access(bool peer_access) { peer_access_ = peer_access; }
  // BRAID_DETERMINISTIC (agreed at init): AllReduce, ReduceScatter and
  // Reduce run only schedules that fold every element in rank order
  // (verify.h, rank_order): rank_order_algorithm's unless BRAID_ALGO, a
  // schedule file, a tuning row or the call's selection names one that
  // does; StragglAR never.
  void set_rank_order(bool rank_order) { rank_order_ = rank_order; }
  // NCCL_ALGO (nccl_algo.h): what a call with no selection of its own may
  // run (0: anything), kept only for collectives BRAID_ALGO pins nothing for.
  void set_nccl_algo(const NcclAlgo& algo);
  uint32_t default_algorithms(Collective c) const {
    return c < Collective::Custom ? nccl_algo_.admitted[int(c)] : 0;
  }
  bool rank_order() const { return rank_order_; }
  // `bytes` is count x type size.  `straggler` >= 0 (AllReduce): that
  // rank is late, so StragglAR replaces ring (BRAID_ALGO still wins).
  // `placement` is this rank's (as MSCCL decides it: the send buffer where
  // the collective's in-place form puts it); with Placement::Unknown only
  // file schedules correct in both placements are eligible.  Every rank must
  // use the same placement when files declare only one, as with MSCCL.
  // `algorithms` (a call's selection, CollectiveCall::algorithms) pins the
  // choice to those algorithms (selected_algorithm); neither BRAID_ALGO nor
  // a schedule file nor a straggler then changes it.
  Status schedule_for(Collective c, int nranks, int root, uint64_t bytes, std::shared_ptr<const Schedule>* out,
                      int straggler = -1, Placement placement = Placement::Unknown, uint32_t algorithms = 0);
  // The schedule the last schedule_for answered with (tests, BRAID_DEBUG).
  const Schedule* last_planned() const { return last_.schedule.get(); }

  // Whether BRAID_ALGO (as read at init) names an algorithm for `c`.
  bool forces(Collective c) const;

  // `rank`'s records of a schedule this cache handed out (built on first
  // use).  Fails for a schedule whose chunks do not split into its buffers'
  // blocks (the verifier refuses those; built-ins are not verified here).
  Status records(const Schedule& schedule, int rank, std::shared_ptr<const RankRecords>* out);

  // Bytes of this rank's records of the schedules planned so far
  // (ncclCommMemStats: they stay while the communicator is suspended).
  uint64_t bytes_held() const;

  // BRAID_STRAGGLER as the ranks agreed on it at init (before the first
  // straggler() call; without it, as this process reads it).
  void set_straggler_setting(const StragglerSetting& setting) { straggler_setting_ = setting; }
  // The communicator's BRAID_STRAGGLER state, created on first use (off
  // under BRAID_DETERMINISTIC: StragglAR does not fold in rank order).
  StragglerTracker& straggler(int nranks, int rank);

 private:
  Status lookup(Collective c, int nranks, int root, uint64_t bytes, int straggler, Placement placement,
                uint32_t algorithms, std::shared_ptr<const Schedule>* out);
  // *file_path: the file the schedule came from, or left empty for a built-in.
  Status choose(Collective c, int nranks, int root, uint64_t bytes, int straggler, Placement placement,
                uint32_t algorithms, std::shared_ptr<const Schedule>* out, std::string* file_path);
  // What runs with nothing pinned or selected: the device tuning table's
  // row where it names one that can run, else the size rules.
  std::string usual_algorithm(Collective c, int nranks, int root, uint64_t bytes, int straggler);
  // The built-in `name` for `c`, generated once.
  Status generated(Collective c, int nranks, int root, const std::string& name, int straggler,
                   std::shared_ptr<const Schedule>* out);
  // Whether the schedule folds in rank order (verified once per schedule).
  bool in_rank_order(const Schedule& schedule);
  // Whether the size rules may pick one-sided schedules (one_host_algorithm,
  // rank_order_algorithm): on the host backend where ranks reach each
  // other's buffers.  Not on the CUDA backend (it has a device tuning
  // table, whose rows choose there).
  bool one_sided_host() const { return peer_access_ && !device_tuning_; }

  BraidAlgo braid_algo_;
  HostTuning tuning_;
  int slots_ = kMinSlots;
  StragglarLanes stragglar_lanes_ = StragglarLanes::PerConnection;
  std::shared_ptr<const DeviceTuning> device_tuning_;
  bool peer_access_ = false;
  bool rank_order_ = false;
  NcclAlgo nccl_algo_;
  std::map<const Schedule*, bool> rank_ordered_;  // in_rank_order's answers
  std::map<std::tuple<int, int, int, std::string>, std::shared_ptr<const Schedule>> cache_;
  // The last answer: loops repeat the same call, and this skips the map.
  struct Last {
    Collective c = Collective::Custom;
    int nranks = -1, root = -1;
    uint64_t bytes = 0;
    int straggler = -1;
    Placement placement = Placement::Unknown;
    uint32_t algorithms = 0;
    std::shared_ptr<const Schedule> schedule;
  } last_;
  std::optional<StragglerSetting> straggler_setting_;
  std::unique_ptr<StragglerTracker> straggler_;
  std::map<const Schedule*, std::shared_ptr<const RankRecords>> records_;  // this rank's (one rank per cache)
};

}  // namespace braid

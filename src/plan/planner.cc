#include "src/plan/planner.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "braid/algorithms.h"
#include "braid/chunking.h"
#include "braid/schedule_json.h"
#include "braid/verify.h"
#include "src/base/env.h"
#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/plan/alg_selection.h"
#include "src/plan/cost_model.h"
#include "src/plan/host_tuning.h"
#include "src/ops/reduction.h"

namespace braid {
namespace {

const AlgorithmInfo* find_algorithm(Collective c, const std::string& name) {
  for (const AlgorithmInfo& a : algorithm_registry())
    if (a.collective == c && a.name == name) return &a;
  return nullptr;
}

const char* placement_name(Placement p) {
  return p == Placement::InPlace ? "in place" : p == Placement::OutOfPlace ? "out of place" : "placement unknown";
}

void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(message).second) BRAID_WARN("{}", message);
}

}  // namespace

const ScheduleLibrary& file_schedules() {
  static const ScheduleLibrary library = [] {
    ScheduleLibrary lib = load_schedule_sources({env_string("BRAID_SCHEDULES"), env_string("MSCCL_XML_FILES"),
                                                 env_string("MSCCL_CONFIG"), env_string("MSCCL_ALGO_DIR")});
    for (const std::string& why : lib.rejected) BRAID_WARN("schedule files: skipping {}", why);
    for (size_t i = 0; i < lib.schedules.size(); ++i) {
      const Schedule& s = *lib.schedules[i];
      BRAID_INFO(kInit | kTuning, "schedule files: loaded '{}' ({} on {} ranks, {}{}, messages of {} B..{}, {} slots) from {}",
                 s.name, to_string(s.collective), s.nranks, s.in_place ? "in place" : "",
                 s.in_place && s.out_of_place ? " and out of place" : s.out_of_place ? "out of place" : "", s.min_bytes,
                 s.max_bytes == UINT64_MAX ? "unbounded" : fmt::format("{} B", s.max_bytes), s.slots, lib.files[i]);
    }
    return lib;
  }();
  return library;
}

uint64_t file_schedules_hash(int nranks) {
  std::string text;
  for (const auto& s : file_schedules().schedules)
    if (s->nranks == nranks) text += schedule_to_json(*s) + "\n";
  return text.empty() ? 0 : fnv1a(text);
}

bool is_file_schedule(const Schedule* s) {
  const auto& files = file_schedules().schedules;
  return std::any_of(files.begin(), files.end(), [&](const auto& f) { return f.get() == s; });
}

std::string default_algorithm(Collective c, int nranks, uint64_t bytes) {
  return default_algorithm(c, nranks, bytes, local_host_tuning(nranks));
}

std::string default_algorithm(Collective c, int nranks, uint64_t bytes, const HostTuning& tuning) {
  switch (c) {
    case Collective::AllReduce: return bytes <= tuning.rd_max_bytes ? "rd" : "ring";
    case Collective::AllGather:
      return tuning.oversubscribed && nranks > 2 && bytes <= kDirectAllGatherMaxBytes ? "direct" : "ring";
    case Collective::ReduceScatter: return "ring";
    case Collective::Broadcast:
    case Collective::Reduce: return "binomial";
    case Collective::Gather:
    case Collective::Scatter: return "direct";
    case Collective::AlltoAll: return tuning.oversubscribed && nranks > 2 ? "direct" : "pairwise";
    case Collective::Custom: break;
  }
  return "";
}

namespace {

// The two-sided algorithms default_algorithm picks from (keep them in step).
bool size_rule_picks(Collective c, const std::string& name) {
  switch (c) {
    case Collective::AllReduce: return name == "ring" || name == "rd";
    case Collective::AllGather: return name == "ring" || name == "direct";
    case Collective::ReduceScatter: return name == "ring";
    case Collective::Broadcast:
    case Collective::Reduce: return name == "binomial";
    case Collective::Gather:
    case Collective::Scatter: return name == "direct";
    case Collective::AlltoAll: return name == "pairwise" || name == "direct";
    case Collective::Custom: break;
  }
  return false;
}

// A message in a one-sided schedule's range (host_tuning.h): above
// kOneSidedMinBytes, up to `most`.
bool one_sided_sized(uint64_t message, uint64_t most) { return message > kOneSidedMinBytes && message <= most; }

// The largest AllReduce message the two-shot serves, plain or ordered.
uint64_t twoshot_max_bytes(int nranks) {
  return nranks == 2 ? kTwoshotMaxBytesTwoRanks : kTwoshotMaxBytesPerRank * uint64_t(nranks);
}

}  // namespace

std::string one_host_algorithm(Collective c, int nranks, uint64_t bytes, const HostTuning& tuning) {
  const uint64_t message = message_bytes(c, nranks, bytes, 1);
  if (c == Collective::AllReduce && one_sided_sized(message, twoshot_max_bytes(nranks))) return "twoshot";
  if (c == Collective::ReduceScatter && nranks == 2 && one_sided_sized(message, kOneshotReduceScatterMaxBytes))
    return "oneshot";
  return default_algorithm(c, nranks, bytes, tuning);
}

std::string rank_order_algorithm(Collective c, int nranks, uint64_t bytes, const HostTuning& tuning,
                                 bool one_sided) {
  if (c == Collective::Reduce) return "chain";
  const uint64_t message = message_bytes(c, nranks, bytes, 1);
  const uint64_t ordered_scatter_max =
      nranks == 2 ? kRankOrderOneSidedReduceScatterTwoRanksMaxBytes : kRankOrderOneSidedReduceScatterMaxBytes;
  if (one_sided && c == Collective::AllReduce && one_sided_sized(message, twoshot_max_bytes(nranks)))
    return "twoshot_ordered";
  if (one_sided && c == Collective::ReduceScatter && one_sided_sized(message, ordered_scatter_max))
    return "oneshot_ordered";
  const uint64_t fold_max = tuning.several_hosts ? kRankOrderFoldBetweenHostsMaxBytes : kRankOrderFoldMaxBytes;
  if (c == Collective::AllReduce && message <= fold_max) return "allgather_fold";
  if (c == Collective::ReduceScatter && tuning.several_hosts) return "direct";
  return message <= kRankOrderDirectMaxBytes ? "direct" : "chain";
}

std::string rank_order_choice(Collective c, int nranks, uint64_t bytes, const HostTuning& tuning, bool one_sided,
                              const std::string& algorithm) {
  if (!collective_reduces(c)) return algorithm;
  const AlgorithmInfo* a = find_algorithm(c, algorithm);
  if (a && folds_in_rank_order(a->make(nranks, 0))) return algorithm;
  return rank_order_algorithm(c, nranks, bytes, tuning, one_sided);
}

bool PlanCache::forces(Collective c) const { return braid_algo_.pins(c); }

void PlanCache::set_nccl_algo(const NcclAlgo& algo) {
  nccl_algo_ = algo;
  for (int c = 0; c < int(Collective::Custom); ++c)
    if (forces(Collective(c))) nccl_algo_.admitted[c] = 0;  // BRAID_ALGO comes first
}

PlanCache::PlanCache() : braid_algo_(parse_braid_algo(env_string("BRAID_ALGO"))) {}

Status PlanCache::schedule_for(Collective c, int nranks, int root, uint64_t bytes,
                               std::shared_ptr<const Schedule>* out, int straggler, Placement placement,
                               uint32_t algorithms) {
  // The last answer again (loops repeat one call), except with a schedule
  // directory, whose choice is logged per call.
  if (last_.schedule && last_.c == c && last_.nranks == nranks && last_.root == root && last_.bytes == bytes &&
      last_.straggler == straggler && last_.placement == placement && last_.algorithms == algorithms &&
      file_schedules().schedules.empty()) {
    *out = last_.schedule;
    return Status::ok();
  }
  BRAID_TRY(lookup(c, nranks, root, bytes, straggler, placement, algorithms, out));
  last_ = Last{c, nranks, root, bytes, straggler, placement, algorithms, *out};
  return Status::ok();
}

std::string selected_algorithm(Collective c, int nranks, uint64_t bytes, const std::string& usual,
                               const HostTuning& tuning, uint32_t algorithms) {
  const auto& registry = algorithm_registry();
  auto admitted = [&](const std::string& name) {
    for (size_t i = 0; i < registry.size(); ++i)
      if ((algorithms >> i & 1) && registry[i].collective == c && registry[i].name == name) return true;
    return false;
  };
  if (admitted(usual)) return usual;
  const std::string size_rule = default_algorithm(c, nranks, bytes, tuning);
  if (admitted(size_rule)) return size_rule;
  // As NCCL does with what NCCL_ALGO leaves: the cheapest by the cost model
  // (its family is the name up to '_': "twoshot" for twoshot_ordered), first
  // among the two-sided algorithms the size rule picks from.  The closed
  // forms do not see what the others cost beyond them: the one-sided ones
  // load peers' buffers (through CMA between processes), which the size
  // rules take only in the ranges where they won; the rank-order folds
  // (direct AllReduce among them) trade bytes for their order; StragglAR
  // without a late rank exposes its phase 0.  Timed alone on 2 to 4
  // processes, each lost to recursive doubling outside the ranges the size
  // rules give it, whatever its closed form says.
  auto tier = [&](const AlgorithmInfo& a) { return a.name == "stragglar" ? 2 : size_rule_picks(c, a.name) ? 0 : 1; };
  const LinkCost link = link_cost(tuning.several_hosts);
  std::string best;
  int best_tier = 0;
  double best_us = 0;
  for (size_t i = 0; i < registry.size(); ++i) {
    if (!(algorithms >> i & 1) || registry[i].collective != c) continue;
    const std::string& name = registry[i].name;
    const int t = tier(registry[i]);
    const double us = collective_us(c, nranks, bytes, name.substr(0, name.find('_')), link);
    if (best.empty() || t < best_tier || (t == best_tier && us < best_us)) {
      best = name;
      best_tier = t;
      best_us = us;
    }
  }
  return best;
}

StragglerTracker& PlanCache::straggler(int nranks, int rank) {
  if (straggler_) return *straggler_;
  const StragglerSetting setting = straggler_setting_ ? *straggler_setting_ : straggler_setting(nranks);
  if (rank_order_ && setting.mode != StragglerMode::Off)
    warn_once(fmt::format("BRAID_DETERMINISTIC: StragglAR does not fold in rank order; BRAID_STRAGGLER={} is "
                          "ignored", env_string("BRAID_STRAGGLER")));
  straggler_ = std::make_unique<StragglerTracker>(nranks, rank, rank_order_ ? StragglerSetting{} : setting);
  return *straggler_;
}

bool PlanCache::in_rank_order(const Schedule& schedule) {
  auto [it, added] = rank_ordered_.emplace(&schedule, false);
  if (added) it->second = folds_in_rank_order(schedule);
  return it->second;
}

// BRAID_DETERMINISTIC: whatever named a schedule that does not fold in
// rank order (BRAID_ALGO, a file, the call's selection) gives way to the
// rank-order default.
Status PlanCache::lookup(Collective c, int nranks, int root, uint64_t bytes, int straggler, Placement placement,
                         uint32_t algorithms, std::shared_ptr<const Schedule>* out) {
  const bool ordered = rank_order_ && collective_reduces(c);
  std::string file;  // where the chosen schedule came from, if a file
  BRAID_TRY(choose(c, nranks, root, bytes, ordered ? -1 : straggler, placement, algorithms, out, &file));
  // Per call, and visible with the default subsystems: users check what ran
  // (a file's schedule, or what replaced it).
  auto say_what_runs = [&](const std::string& what) {
    BRAID_INFO(kInit | kColl | kTuning, "{} of {} B ({}, {} B message) on {} ranks: {}", to_string(c), bytes,
               placement_name(placement), message_bytes(c, nranks, bytes, 1), nranks, what);
  };
  if (!ordered || in_rank_order(**out)) {
    if (!file.empty()) say_what_runs(fmt::format("schedule '{}' from {}", (*out)->name, file));
    return Status::ok();
  }
  const std::string instead = rank_order_algorithm(c, nranks, bytes, tuning_, one_sided_host());
  warn_once(fmt::format("BRAID_DETERMINISTIC: schedule '{}' does not fold {} in rank order; running '{}' instead",
                        (*out)->name, to_string(c), instead));
  if (!file.empty())
    say_what_runs(fmt::format("built-in '{}' (BRAID_DETERMINISTIC; schedule '{}' from {} does not fold in rank "
                              "order)", instead, (*out)->name, file));
  return generated(c, nranks, root, instead, -1, out);
}

Status PlanCache::choose(Collective c, int nranks, int root, uint64_t bytes, int straggler, Placement placement,
                         uint32_t algorithms, std::shared_ptr<const Schedule>* out, std::string* file_path) {
  if (algorithms && !peer_access_) {  // one-sided algorithms cannot run here
    const auto& registry = algorithm_registry();
    uint32_t runnable = algorithms, for_c = 0;
    for (size_t i = 0; i < registry.size(); ++i) {
      if (registry[i].one_sided) runnable &= ~(1u << i);
      if (registry[i].collective == c) for_c |= 1u << i;
    }
    if ((algorithms & for_c) && !(runnable & for_c))
      return BRAID_ERROR(ncclInvalidUsage, "the call's algorithm selection admits only {} for {}, which need every "
                         "rank to reach every peer's buffers; this communicator's ranks cannot (or its backend does "
                         "not run one-sided schedules)", admitted_names(algorithms & for_c), to_string(c));
    algorithms = runnable;
  }
  const std::string forced =
      algorithms ? selected_algorithm(c, nranks, bytes, usual_algorithm(c, nranks, root, bytes, straggler), tuning_,
                                      algorithms)
                 : braid_algo_.of(c);
  std::string name = forced;
  if (name.empty()) {
    const uint64_t message = message_bytes(c, nranks, bytes, 1);
    std::string path;
    auto file = file_schedules().find(c, nranks, placement, message, &path);
    if (file && file->slots > slots_) {
      warn_once(fmt::format("schedule '{}' from {} needs {} slots per connection to be free of deadlock; this "
                            "communicator's connections buffer {} (BRAID_SHM_SLOTS, BRAID_CUDA_SLOTS; sockets 4): "
                            "not used", file->name, path, file->slots, slots_));
    } else if (file && has_one_sided_ops(*file) && !peer_access_) {
      warn_once(fmt::format("schedule '{}' from {} has one-sided ops (put, get), and not every rank of this "
                            "communicator can reach every peer's buffers: not used", file->name, path));
    } else if (file && (file->root < 0 || file->root == root)) {
      *file_path = path;  // lookup() logs it once it knows the file's schedule is what runs
      *out = file;
      return Status::ok();
    }
  }
  // A one-sided algorithm where not every rank reaches every peer's buffers.
  auto out_of_reach = [&](const std::string& algorithm) {
    const AlgorithmInfo* a = algorithm.empty() ? nullptr : find_algorithm(c, algorithm);
    return a && a->one_sided && !peer_access_;
  };
  if (out_of_reach(name)) {  // BRAID_ALGO named it
    warn_once(fmt::format("'{}' for {} needs every rank to reach every peer's buffers, and this communicator's "
                          "ranks cannot (or its backend does not run one-sided schedules); using the default",
                          name, to_string(c)));
    name.clear();
  }
  if (name.empty()) name = usual_algorithm(c, nranks, root, bytes, straggler);
  if (!file_schedules().schedules.empty())  // say so when a schedule directory did not match
    BRAID_INFO(kInit | kColl | kTuning, "{} of {} B ({}) on {} ranks: built-in '{}' (no schedule file matches)",
               to_string(c), bytes, placement_name(placement), nranks, name);
  // A known straggler turns the bandwidth schedule into StragglAR.
  if (c == Collective::AllReduce && straggler >= 0 && straggler < nranks && name == "ring" && forced.empty())
    name = "stragglar";
  return generated(c, nranks, root, name, straggler, out);
}

std::string PlanCache::usual_algorithm(Collective c, int nranks, int root, uint64_t bytes, int straggler) {
  const bool ordered = rank_order_ && collective_reduces(c);
  if (device_tuning_) {
    std::string name(device_tuning_->call(c, bytes).algorithm);
    // BRAID_DETERMINISTIC keeps a tuned choice only where it folds in rank order.
    std::shared_ptr<const Schedule> tuned;
    if (ordered && !name.empty() && (!generated(c, nranks, root, name, -1, &tuned).is_ok() || !in_rank_order(*tuned)))
      name.clear();
    // A row measured on thread ranks of one device may name a one-sided
    // schedule: processes keep the default, quietly (they did not ask).
    const AlgorithmInfo* a = name.empty() ? nullptr : find_algorithm(c, name);
    if (a && a->one_sided && !peer_access_) name.clear();
    if (!name.empty()) return name;
  }
  return ordered                             ? rank_order_algorithm(c, nranks, bytes, tuning_, one_sided_host())
         : one_sided_host() && straggler < 0 ? one_host_algorithm(c, nranks, bytes, tuning_)
                                             : default_algorithm(c, nranks, bytes, tuning_);
}

Status PlanCache::generated(Collective c, int nranks, int root, const std::string& name, int straggler,
                            std::shared_ptr<const Schedule>* out) {
  const AlgorithmInfo* algo = find_algorithm(c, name);
  if (!algo) return BRAID_ERROR(ncclInternalError, "no algorithm '{}' for {}", name, to_string(c));
  // StragglAR is built for one straggler: it keys the cache like a root.
  const bool stragglar = name == "stragglar";
  if (stragglar && (straggler < 0 || straggler >= nranks)) straggler = nranks - 1;
  auto key = std::make_tuple(int(c), nranks, algo->rooted ? root : stragglar ? straggler : -1, name);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    auto schedule = std::make_shared<const Schedule>(
        stragglar ? stragglar_allreduce(nranks, straggler, stragglar_lanes_) : algo->make(nranks, root));
    BRAID_INFO(kTuning, "{} on {} ranks: generated schedule '{}'", to_string(c), nranks, schedule->name);
    it = cache_.emplace(key, std::move(schedule)).first;
  }
  *out = it->second;
  return Status::ok();
}

uint64_t PlanCache::bytes_held() const {
  uint64_t bytes = 0;
  for (const auto& [schedule, r] : records_)
    if (r)
      bytes += r->lanes.capacity() * sizeof(LaneRecord) + r->ops.capacity() * sizeof(OpRecord) +
               r->deps.capacity() * sizeof(DepRecord) + r->connections.capacity() * sizeof(ConnectionRecord);
  return bytes;
}

Status PlanCache::records(const Schedule& schedule, int rank, std::shared_ptr<const RankRecords>* out) {
  std::shared_ptr<const RankRecords>& r = records_[&schedule];
  if (!r) {
    const RankProgram& p = schedule.ranks.at(rank);
    const std::pair<uint32_t, uint64_t> buffers[] = {
        {p.input_chunks, input_blocks(schedule.collective, schedule.nranks)},
        {p.output_chunks, output_blocks(schedule.collective, schedule.nranks)}};
    for (auto [chunks, blocks] : buffers)
      if (chunks % blocks != 0)
        return BRAID_ERROR(ncclInternalError, "schedule {}: {} chunks do not split into {} blocks", schedule.name,
                           chunks, blocks);
    r = std::make_shared<const RankRecords>(build_rank_records(schedule, rank));
  }
  *out = r;
  return Status::ok();
}

}  // namespace braid

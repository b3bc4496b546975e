// NCCL's tuner plugins on braid (tuner.h): loading, contexts, each call's
// question.
#include "src/runtime/tuner.h"

#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <cstdarg>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "braid/chunking.h"
#include "src/base/env.h"
#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/base/plugin_library.h"
#include "src/ops/datatype.h"
#include "src/plan/cost_model.h"
#include "src/plan/planner.h"
#include "src/plan/tuner_choice.h"
#include "src/runtime/comm.h"
#include "src/runtime/init.h"

namespace braid {

// One library and the newest table it exports; every version's calls go
// through the members below, which speak v7 and adapt to the table's.
class TunerPlugin {
 public:
  TunerPlugin(void* lib, int version, const void* table, std::string library)
      : lib_(lib), version_(version), table_(table), library_(std::move(library)) {}
  ~TunerPlugin() { dlclose(lib_); }
  TunerPlugin(const TunerPlugin&) = delete;
  TunerPlugin& operator=(const TunerPlugin&) = delete;

  int version() const { return version_; }
  const std::string& library() const { return library_; }
  std::string name() const {
    const char* n = static_cast<const braidTuner_v2_t*>(table_)->name;  // first in every version
    return n ? n : "";
  }

  // braid has no model constants of NCCL's: a v5+ plugin is shown zeros,
  // of its version's size, and what it writes there is not read.
  ncclResult_t init(void** context, uint64_t comm_id, size_t nranks, size_t nnodes, braidTunerLogger_t log,
                    braidTunerNvlDomainInfo_t* nvl) const {
    switch (version_) {
      case 7: {
        braidTunerConstants_v7_t constants{};
        return as<braidTuner_v7_t>()->init(context, comm_id, nranks, nnodes, log, nvl, &constants);
      }
      case 6:  // v5's members first (tuner_abi.h)
      case 5: {
        braidTunerConstants_t constants{};
        return as<braidTuner_v5_t>()->init(context, comm_id, nranks, nnodes, log, nvl, &constants);
      }
      case 4: return as<braidTuner_v4_t>()->init(nranks, nnodes, log, context);
      case 3: return as<braidTuner_v3_t>()->init(nranks, nnodes, log, context);
      default: return as<braidTuner_v2_t>()->init(nranks, nnodes, log, context);
    }
  }

  ncclResult_t get_coll_info(void* context, int func, size_t bytes, int pipe_ops, TunerTable* table, int reg_buff,
                             int* channels) const {
    float** cost = reinterpret_cast<float**>(table->cost);  // NCCL passes its float[7][3] so
    switch (version_) {
      case 7:  // v5's getCollInfo and finalize, at v5's offsets
      case 6:
      case 5:
        return as<braidTuner_v5_t>()->getCollInfo(context, func, bytes, pipe_ops, cost, kTunerAlgorithms,
                                                  kTunerProtocols, reg_buff, channels);
      case 4:
        return as<braidTuner_v4_t>()->getCollInfo(context, func, bytes, pipe_ops, cost, kTunerAlgorithms,
                                                  kTunerProtocols, reg_buff, channels);
      case 3:
        return as<braidTuner_v3_t>()->getCollInfo(context, func, bytes, pipe_ops, cost, kTunerAlgorithms,
                                                  kTunerProtocols, channels);
      default: {
        // v2 names its pick; NCCL's adapter tells it whether NVLS and
        // CollNet could run (their entries offered): never on braid.
        int algorithm = -1, protocol = -1;
        const ncclResult_t r =
            as<braidTuner_v2_t>()->getCollInfo(context, func, bytes, 0, 0, pipe_ops, &algorithm, &protocol, channels);
        if (r == ncclSuccess) apply_v2_answer(algorithm, protocol, table);
        return r;
      }
    }
  }

  ncclResult_t finalize(void* context) const {
    switch (version_) {
      case 7:
      case 6:
      case 5: return as<braidTuner_v5_t>()->finalize(context);
      case 4: return as<braidTuner_v4_t>()->destroy(context);
      case 3: return as<braidTuner_v3_t>()->destroy(context);
      default: return as<braidTuner_v2_t>()->destroy(context);
    }
  }

 private:
  template <typename Table>
  const Table* as() const {
    return static_cast<const Table*>(table_);
  }
  void* lib_;
  int version_;
  const void* table_;
  std::string library_;
};

namespace {

void plugin_logger(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  plugin_vlog(level, flags, kTuning, "tuner plugin", file, line, fmt, args);
  va_end(args);
}

// The newest tuner table `lib` exports, or null (lib then closed).
std::shared_ptr<TunerPlugin> table_of(void* lib, const std::string& library) {
  for (int version = 7; version >= 2; --version) {
    const std::string symbol = "ncclTunerPlugin_v" + std::to_string(version);
    if (const void* table = dlsym(lib, symbol.c_str())) {
      auto plugin = std::make_shared<TunerPlugin>(lib, version, table, library);
      BRAID_INFO(kInit | kTuning, "tuner plugin {} ({}) loaded from {}", plugin->name(), symbol, library);
      return plugin;
    }
  }
  dlclose(lib);
  return nullptr;
}

// The first library among `prefix`'s names for `value` that opens and has a table.
std::shared_ptr<TunerPlugin> open_tuner(const std::string& prefix, const std::string& value) {
  for (const std::string& candidate : plugin_library_names(prefix, value)) {
    void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      BRAID_INFO(kInit | kTuning, "tuner plugin {}: {}", candidate, dlerror());
      continue;
    }
    if (auto plugin = table_of(lib, candidate)) return plugin;
    BRAID_INFO(kInit | kTuning, "{} exports no ncclTunerPlugin_v7 to _v2 table", candidate);
  }
  return nullptr;
}

std::shared_ptr<TunerPlugin> load(const std::string& value) {
  if (strcasecmp(value.c_str(), "none") == 0) return nullptr;
  if (auto plugin = open_tuner("libnccl-tuner", value)) return plugin;
  // A net plugin's library may bring the tuner (NCCL looks there next).
  const std::string net = env_string_or_nccl("BRAID_NET_PLUGIN", "NCCL_NET_PLUGIN");
  if (strcasecmp(net.c_str(), "none") != 0)
    if (auto plugin = open_tuner("libnccl-net", net)) return plugin;
  if (!value.empty()) {
    static std::mutex mutex;
    static std::set<std::string> said;  // once per value and process: every communicator's init loads
    std::lock_guard lock(mutex);
    if (said.insert(value).second)
      BRAID_WARN("NCCL_TUNER_PLUGIN={}: no tuner plugin could be loaded; braid chooses alone", value);
  }
  return nullptr;
}

// The process's plugin while a communicator holds it, and the value it was
// loaded for.
std::mutex g_mutex;
std::weak_ptr<TunerPlugin> g_plugin;
std::string g_value;

// Where `comm`'s ranks are: hosts, and the fewest and most ranks on one.
braidTunerNvlDomainInfo_t hosts_of(const ncclComm* comm, size_t* hosts) {
  std::map<uint64_t, int> ranks_on;
  for (const PeerInfo& p : comm->peers) ++ranks_on[p.host_hash];
  braidTunerNvlDomainInfo_t info{int(ranks_on.size()), comm->nranks, 0};
  for (const auto& [host, ranks] : ranks_on) {
    info.minRanksPerNvlDomain = std::min(info.minRanksPerNvlDomain, ranks);
    info.maxRanksPerNvlDomain = std::max(info.maxRanksPerNvlDomain, ranks);
  }
  *hosts = ranks_on.size();
  return info;
}

bool registered(const ncclComm* comm, const void* buffer, uint64_t bytes) {
  const char* p = static_cast<const char*>(buffer);
  return std::any_of(comm->registrations.begin(), comm->registrations.end(), [&](const auto& entry) {
    const char* base = static_cast<const char*>(entry.second->base);
    return p >= base && p + bytes <= base + entry.second->size;
  });
}

// What `comm` may run of the entries a tuner can be offered for `call`.
TunerOffer offer_for(const ncclComm* comm, const CollectiveCall& call) {
  const Collective c = call.collective;
  const uint32_t ring = ring_algorithm_bit(c);
  const bool pinned = !(comm->setup->agreed.unpinned_collectives >> int(c) & 1);
  const bool reduces = c == Collective::AllReduce || c == Collective::ReduceScatter;
  TunerOffer offer;
  offer.ring = ring && !pinned && (!call.algorithms || (call.algorithms & ring)) &&
               !(reduces && comm->plans->rank_order());
  offer.ll = comm->backend->takes_ll_path(call);
  const LinkCost link = link_cost(comm->tuner.between_hosts);
  const uint64_t bytes = call.count * datatype_size(call.type);
  offer.ring_us = collective_us(c, comm->nranks, bytes, "ring", link);
  offer.ll_us = collective_us(c, comm->nranks, bytes, "ll", link);
  return offer;
}

}  // namespace

CommTuner::~CommTuner() {
  if (!live) return;
  const ncclResult_t r = plugin->finalize(context);
  if (r != ncclSuccess) BRAID_WARN("tuner plugin {}: finalize failed ({})", plugin->name(), nccl_result_name(r));
}

std::shared_ptr<TunerPlugin> tuner_plugin() {
  const std::string value = env_raw("NCCL_TUNER_PLUGIN");
  std::lock_guard lock(g_mutex);
  std::shared_ptr<TunerPlugin> held = g_plugin.lock();
  if (held && value == g_value) return held;
  std::shared_ptr<TunerPlugin> plugin = load(value);
  g_plugin = plugin;
  g_value = value;
  return plugin;
}

uint64_t tuner_identity(const TunerPlugin* plugin) {
  return plugin ? fnv1a(fmt::format("v{} {}", plugin->version(), plugin->name())) : 0;
}

Status tuner_comm_init(ncclComm* comm, std::shared_ptr<TunerPlugin> plugin) {
  if (!plugin) return Status::ok();
  size_t hosts = 0;
  braidTunerNvlDomainInfo_t domains = hosts_of(comm, &hosts);
  void* context = nullptr;
  const ncclResult_t r =
      plugin->init(&context, comm->comm_hash, size_t(comm->nranks), hosts, plugin_logger, &domains);
  if (r != ncclSuccess)
    return Status::error(r, fmt::format("tuner plugin {} ({}): init failed (NCCL_TUNER_PLUGIN=none loads none)",
                                        plugin->name(), plugin->library()));
  comm->tuner.plugin = std::move(plugin);
  comm->tuner.context = context;
  comm->tuner.live = true;
  comm->tuner.between_hosts = hosts > 1;
  return Status::ok();
}

void tuner_choose(ncclComm* comm, CollectiveCall* call) {
  CommTuner& t = comm->tuner;
  const int func = tuner_func(call->collective);
  if (!t.live || func < 0 || call->count == 0 || !comm->backend) return;
  const TunerOffer offer = offer_for(comm, *call);
  TunerTable table = tuner_table(offer);
  const uint64_t count_bytes = call->count * datatype_size(call->type);
  const uint64_t bytes = tuner_bytes(call->collective, comm->nranks, count_bytes);
  const int reg_buff =
      registered(comm, call->sendbuff, count_bytes * input_blocks(call->collective, comm->nranks)) &&
      registered(comm, call->recvbuff, count_bytes * output_blocks(call->collective, comm->nranks));
  int channels = 0;
  const ncclResult_t r = t.plugin->get_coll_info(t.context, func, bytes, 1, &table, reg_buff, &channels);
  if (r != ncclSuccess) {
    BRAID_INFO(kColl | kTuning, "tuner plugin {}: getCollInfo of {} {} B failed ({}): braid's own choice",
               t.plugin->name(), to_string(call->collective), bytes, nccl_result_name(r));
    return;
  }
  if (channels > 0 && !t.said_channels) {
    t.said_channels = true;
    BRAID_INFO(kInit | kTuning, "tuner plugin {} asks for {} channels: not applied, braid sets its channels itself",
               t.plugin->name(), channels);
  }
  const TunerPick pick = tuner_pick(offer, table);
  if (pick == TunerPick::Ring) call->algorithms = ring_algorithm_bit(call->collective);
  const char* said = pick == TunerPick::Ring ? "ring" : pick == TunerPick::LL ? "LL (braid's own choice)"
                                                                             : "braid's own choice";
  BRAID_INFO(kColl | kTuning, "tuner plugin {}: {} {} B: {}", t.plugin->name(), to_string(call->collective), bytes,
             said);
}

}  // namespace braid

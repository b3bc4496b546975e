// NCCL's profiler plugins on braid (profiler.h): loading, contexts, events.
#include "src/runtime/profiler.h"

#include <dlfcn.h>
#include <strings.h>

#include <atomic>
#include <cstdarg>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/plugin_library.h"
#include "src/ops/datatype.h"
#include "src/runtime/comm.h"
#include "src/runtime/profiler_abi.h"

namespace braid {
namespace {

constexpr int kApiMask = BRAID_PROFILE_GROUP_API | BRAID_PROFILE_COLL_API | BRAID_PROFILE_P2P_API |
                         BRAID_PROFILE_KERNEL_LAUNCH | BRAID_PROFILE_GROUP | BRAID_PROFILE_COLL | BRAID_PROFILE_P2P |
                         BRAID_PROFILE_PROXY_OP | BRAID_PROFILE_PROXY_STEP | BRAID_PROFILE_KERNEL_CH |
                         BRAID_PROFILE_NET_PLUGIN;
// What a task's events feed (NCCL's masks: a plugin asking only for kernel
// channels still gets the events they hang from).
constexpr int kTaskMask = BRAID_PROFILE_PROXY_OP | BRAID_PROFILE_PROXY_STEP | BRAID_PROFILE_KERNEL_CH |
                          BRAID_PROFILE_NET_PLUGIN;
constexpr int kCollMask = BRAID_PROFILE_COLL | kTaskMask;
constexpr int kP2pMask = BRAID_PROFILE_P2P | kTaskMask;

void plugin_logger(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  plugin_vlog(level, flags, kProfile, "profiler plugin", file, line, fmt, args);
  va_end(args);
}

// NCCL_PROFILER_PLUGIN's library and its table, or null.
struct Loaded {
  void* lib = nullptr;
  const braidNcclProfiler_t* table = nullptr;
};

Loaded load_plugin() {
  const std::string name = env_raw("NCCL_PROFILER_PLUGIN");
  if (strcasecmp(name.c_str(), "none") == 0) return {};
  for (const std::string& candidate : plugin_library_names("libnccl-profiler", name)) {
    void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      BRAID_INFO(kInit | kProfile, "profiler plugin {}: {}", candidate, dlerror());
      continue;
    }
    for (const char* symbol : {"ncclProfiler_v7", "ncclProfiler_v6", "ncclProfiler_v5"})
      if (auto* table = static_cast<const braidNcclProfiler_t*>(dlsym(lib, symbol))) {
        BRAID_INFO(kInit | kProfile, "profiler plugin {} ({}) loaded from {}", table->name ? table->name : "?",
                   symbol, candidate);
        return {lib, table};
      }
    // NCCL would also take v1-v4; braid serves v5 to v7.
    BRAID_WARN("profiler plugin {}: no ncclProfiler_v7, _v6 or _v5 table (braid serves those); not used", candidate);
    dlclose(lib);
  }
  if (!name.empty()) BRAID_WARN("NCCL_PROFILER_PLUGIN={}: no such plugin could be loaded; profiling is off", name);
  return {};
}

// The process's plugin and how many communicators hold it.
std::mutex g_mutex;
Loaded g_loaded;
int g_holders = 0;
// The activation mask, NCCL's one int for the process: every init gets its
// address, and a plugin may write it at any time.
int g_event_mask = 0;
int event_mask() { return std::atomic_ref<int>(g_event_mask).load(std::memory_order_relaxed); }
std::optional<int> g_override_mask;  // profiler_override_mask's, under g_mutex

// The calling thread's group API event (profiler_group_api_start).
struct GroupApi {
  const ncclComm* owner = nullptr;
  void* handle = nullptr;
  bool started = false, end_recorded = false;
};
thread_local GroupApi t_group;

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "AllReduce";
    case Collective::AllGather: return "AllGather";
    case Collective::ReduceScatter: return "ReduceScatter";
    case Collective::Broadcast: return "Broadcast";
    case Collective::Reduce: return "Reduce";
    case Collective::AlltoAll: return "AlltoAll";
    case Collective::Gather: return "Gather";
    case Collective::Scatter: return "Scatter";
    case Collective::Custom: break;
  }
  return "Invalid";
}

// NCCL's names (ncclDatatypeToString).
const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return "Unknown";
  }
}

// The host's clock in ns: the timer of the host backend's kernel channels
// (a GPU's globaltimer counts ns too; plugins use differences).
uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

// Whether `comm`'s plugin takes events of `bits`: not before the
// communicator is ready (a non-blocking init may still be setting it up).
bool wants(const ncclComm* comm, int bits) {
  return comm->ready.load(std::memory_order_acquire) && comm->profiler.table && (event_mask() & bits);
}

void* start(const ncclComm* comm, braidNcclProfilerEventDescr_t& d) {
  void* handle = nullptr;
  d.rank = comm->rank;
  if (comm->profiler.table->startEvent(comm->profiler.context, &handle, &d) != ncclSuccess) return nullptr;
  return handle;
}

void stop(const braidNcclProfiler_t* table, void* handle) {
  if (handle) table->stopEvent(handle);
}

}  // namespace

void profiler_comm_init(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_loaded.table) g_loaded = load_plugin();
  const braidNcclProfiler_t* p = g_loaded.table;
  if (!p) return;
  std::set<uint64_t> hosts;
  for (const PeerInfo& peer : comm->peers) hosts.insert(peer.host_hash);
  void* context = nullptr;
  const ncclResult_t r = p->init(&context, comm->comm_hash, &g_event_mask, comm->config.commName, int(hosts.size()),
                                 comm->nranks, comm->rank, plugin_logger);
  if (r != ncclSuccess) {
    BRAID_INFO(kInit | kProfile, "profiler plugin init failed ({}) for comm {:#x}: not profiled", int(r),
               comm->comm_hash);
    if (g_holders == 0) dlclose(g_loaded.lib), g_loaded = {};
    return;
  }
  if (g_override_mask) std::atomic_ref<int>(g_event_mask).store(*g_override_mask, std::memory_order_relaxed);
  ++g_holders;
  comm->profiler.table = p;
  comm->profiler.context = context;
  BRAID_INFO(kInit | kProfile, "profiler plugin: comm {:#x} rank {} events {:#x}", comm->comm_hash, comm->rank,
             event_mask());
}

void profiler_comm_finalize(ncclComm* comm) {
  if (t_group.owner == comm) profiler_group_api_stop();
  if (!comm->profiler.table) return;
  if (comm->profiler.context) comm->profiler.table->finalize(comm->profiler.context);
  comm->profiler = CommProfiler{};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_holders == 0) dlclose(g_loaded.lib), g_loaded = {};
}

void profiler_override_mask(int mask) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_override_mask = mask;
  std::atomic_ref<int>(g_event_mask).store(mask, std::memory_order_relaxed);
  BRAID_INFO(kInit | kProfile, "profiler event mask set out-of-band via RAS: {:#x}", mask);
}

bool profiler_active(const ncclComm* comm) { return wants(comm, kApiMask); }

void profiler_group_api_start(ncclComm* comm, int depth) {
  if (t_group.started || !wants(comm, kApiMask)) return;
  t_group.started = true;  // once per group, whatever the plugin gave back (NCCL's)
  braidNcclProfilerEventDescr_t d{};
  d.type = BRAID_PROFILE_GROUP_API;
  d.groupApi.groupDepth = depth;
  t_group.handle = start(comm, d);
  if (!t_group.handle) return;
  t_group.owner = comm;
  comm->profiler.table->recordEventState(t_group.handle, BRAID_PROFILER_GROUP_START_API_STOP, nullptr);
}

void profiler_group_api_end_starts() {
  if (!t_group.handle || t_group.end_recorded) return;
  t_group.end_recorded = true;
  t_group.owner->profiler.table->recordEventState(t_group.handle, BRAID_PROFILER_GROUP_END_API_START, nullptr);
}

void profiler_group_api_stop() {
  if (t_group.handle) stop(t_group.owner->profiler.table, t_group.handle);
  t_group = GroupApi{};
}

namespace {
// A call's API event: started and stopped at once, kept as its task's parent.
template <typename Call, typename Fill>
void call_api(ncclComm* comm, Call* call, uint64_t type, int mask, Fill fill) {
  call->profiler.group = t_group.handle;
  if (!wants(comm, mask)) return;
  braidNcclProfilerEventDescr_t d{};
  d.type = type;
  d.parentObj = t_group.handle;
  fill(d);
  call->profiler.call = start(comm, d);
  stop(comm->profiler.table, call->profiler.call);
}
}  // namespace

void profiler_call_api(ncclComm* comm, CollectiveCall* call) {
  call_api(comm, call, BRAID_PROFILE_COLL_API, BRAID_PROFILE_COLL_API | kCollMask, [&](auto& d) {
    d.collApi.func = collective_name(call->collective);
    d.collApi.count = call->count;
    d.collApi.datatype = type_name(call->type);
    d.collApi.root = call->root;
    d.collApi.stream = call->stream;
    d.collApi.userTag = call->profiler.tag;
  });
}

void profiler_call_api(ncclComm* comm, P2PCall* call) {
  call_api(comm, call, BRAID_PROFILE_P2P_API, BRAID_PROFILE_P2P_API | kP2pMask, [&](auto& d) {
    d.p2pApi.func = call->is_send ? "Send" : "Recv";
    d.p2pApi.count = call->count;
    d.p2pApi.datatype = type_name(call->type);
    d.p2pApi.stream = call->stream;
  });
}

ProfiledRun::ProfiledRun(ncclComm* comm, std::span<const CollectiveCall> collectives, std::span<const P2PCall> p2ps) {
  if ((collectives.empty() && p2ps.empty()) || !wants(comm, kApiMask)) return;
  table_ = comm->profiler.table;
  const bool on_host = comm->cuda_device < 0;  // the run is this thread's: its channel can be timed
  void* group_api = collectives.empty() ? p2ps[0].profiler.group : collectives[0].profiler.group;
  if (wants(comm, BRAID_PROFILE_GROUP | kCollMask | kP2pMask)) {
    braidNcclProfilerEventDescr_t d{};
    d.type = BRAID_PROFILE_GROUP;
    group_ = start(comm, d);
  }
  auto channel = [&](void* task) -> void* {
    if (!task || !on_host || !wants(comm, BRAID_PROFILE_KERNEL_CH)) return nullptr;
    braidNcclProfilerEventDescr_t d{};
    d.type = BRAID_PROFILE_KERNEL_CH;
    d.parentObj = task;
    d.kernelCh.channelId = 0;
    d.kernelCh.pTimer = now_ns();
    return start(comm, d);
  };
  for (const CollectiveCall& c : collectives) {
    if (!wants(comm, kCollMask)) break;
    braidNcclProfilerEventDescr_t d{};
    d.type = BRAID_PROFILE_COLL;
    d.parentObj = c.profiler.call;
    d.coll.parentGroup = group_;
    d.coll.seqNumber = comm->profiler.seq[size_t(c.collective)]++;
    d.coll.func = collective_name(c.collective);
    d.coll.sendBuff = c.sendbuff;
    d.coll.recvBuff = c.recvbuff;
    d.coll.root = c.root;
    // As NCCL: AllGather and Broadcast count bytes.
    const bool bytes = c.collective == Collective::AllGather || c.collective == Collective::Broadcast;
    d.coll.count = bytes ? c.count * datatype_size(c.type) : c.count;
    d.coll.datatype = bytes ? "ncclInt8" : type_name(c.type);
    d.coll.nChannels = on_host;  // the host's one channel; a kernel's are not reported
    d.coll.algo = "braid";
    d.coll.proto = on_host ? "host" : "cuda";
    d.coll.kernelVariant = d.coll.proto;
    d.coll.userTag = c.profiler.tag;
    tasks_.push_back(start(comm, d));
    channels_.push_back(channel(tasks_.back()));
  }
  for (const P2PCall& p : p2ps) {
    if (!wants(comm, kP2pMask)) break;
    braidNcclProfilerEventDescr_t d{};
    d.type = BRAID_PROFILE_P2P;
    d.parentObj = p.profiler.call;
    d.p2p.parentGroup = group_;
    d.p2p.func = p.is_send ? "Send" : "Recv";
    d.p2p.buff = p.buffer;
    d.p2p.count = p.count;
    d.p2p.datatype = type_name(p.type);
    d.p2p.peer = p.peer;
    d.p2p.nChannels = on_host;
    tasks_.push_back(start(comm, d));
    channels_.push_back(channel(tasks_.back()));
  }
  if (wants(comm, BRAID_PROFILE_KERNEL_LAUNCH)) {
    braidNcclProfilerEventDescr_t d{};
    d.type = BRAID_PROFILE_KERNEL_LAUNCH;
    d.parentObj = group_api;
    d.kernelLaunch.stream = !collectives.empty() ? collectives[0].stream : p2ps[0].stream;
    launch_ = start(comm, d);
    if (on_host) stop(table_, launch_), launch_ = nullptr;  // nothing is launched: the run starts
  }
}

ProfiledRun::~ProfiledRun() {
  if (!table_) return;
  stop(table_, launch_);
  const uint64_t ended = now_ns();
  for (void* ch : channels_) {
    if (!ch) continue;
    braidNcclProfilerEventStateArgs_t args{};
    args.kernelCh.pTimer = ended;
    table_->recordEventState(ch, BRAID_PROFILER_KERNEL_CH_STOP, &args);
    stop(table_, ch);
  }
  for (void* t : tasks_) stop(table_, t);
  stop(table_, group_);
}

}  // namespace braid

// NCCL's profiler plugins on braid (profiler.h): loading, contexts, events.
#include "src/runtime/profiler.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdarg>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>
#include <string>

#include "src/base/env.h"
#include "src/base/log.h"
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
  (void)flags;
  va_list args;
  va_start(args, fmt);
  plugin_vlog(level, kProfile, "profiler plugin", file, line, fmt, args);
  va_end(args);
}

// NCCL_PROFILER_PLUGIN's library and its table, or null.
struct Loaded {
  void* lib = nullptr;
  const braidNcclProfiler_t* table = nullptr;
};

Loaded load_plugin() {
  const std::string name = env_raw("NCCL_PROFILER_PLUGIN");
  if (name == "none" || name == "NONE") return {};
  std::vector<std::string> candidates;
  if (name.empty()) candidates.push_back("libnccl-profiler.so");
  else candidates = {"libnccl-profiler-" + name + ".so", name};
  for (const std::string& candidate : candidates) {
    void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      BRAID_INFO(kInit | kProfile, "profiler plugin {}: {}", candidate, dlerror());
      continue;
    }
    for (const char* symbol : {"ncclProfiler_v6", "ncclProfiler_v5"})
      if (auto* table = static_cast<const braidNcclProfiler_t*>(dlsym(lib, symbol))) {
        BRAID_INFO(kInit | kProfile, "profiler plugin {} ({}) loaded from {}", table->name ? table->name : "?",
                   symbol, candidate);
        return {lib, table};
      }
    // NCCL would also take v1-v4; braid serves v5 and v6 only.
    BRAID_WARN("profiler plugin {}: no ncclProfiler_v6 or ncclProfiler_v5 table (braid serves those); not used",
               candidate);
    dlclose(lib);
    return {};
  }
  if (!name.empty()) BRAID_WARN("NCCL_PROFILER_PLUGIN={}: no such plugin could be loaded; profiling is off", name);
  return {};
}

// The process's plugin and how many communicators hold it.
std::mutex g_mutex;
Loaded g_loaded;
int g_holders = 0;

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

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

// The host's clock in ns: the timer of the host backend's kernel channels
// (a GPU's globaltimer counts ns too).
uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

bool wants(const ncclComm* comm, int bits) { return comm->profiler.context && (comm->profiler.mask & bits); }

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
  int mask = 0;
  void* context = nullptr;
  const ncclResult_t r = p->init(&context, comm->comm_hash, &mask, comm->config.commName, int(hosts.size()),
                                 comm->nranks, comm->rank, plugin_logger);
  if (r != ncclSuccess) {
    BRAID_INFO(kInit | kProfile, "profiler plugin init failed ({}) for comm {:#x}: not profiled", int(r),
               comm->comm_hash);
    if (g_holders == 0) dlclose(g_loaded.lib), g_loaded = {};
    return;
  }
  ++g_holders;
  comm->profiler.table = p;
  comm->profiler.context = context;
  comm->profiler.mask = mask;
  BRAID_INFO(kInit | kProfile, "profiler plugin: comm {:#x} rank {} events {:#x}", comm->comm_hash, comm->rank, mask);
}

void profiler_comm_finalize(ncclComm* comm) {
  if (!comm->profiler.table) return;
  comm->profiler.table->finalize(comm->profiler.context);
  comm->profiler = CommProfiler{};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_holders == 0) dlclose(g_loaded.lib), g_loaded = {};
}

void profiler_group_api_start(ncclComm* comm, int depth, GroupApiEvent* event) {
  if (event->handle || !wants(comm, kApiMask)) return;
  braidNcclProfilerEventDescr_t d{};
  d.type = BRAID_PROFILE_GROUP_API;
  d.groupApi.groupDepth = depth;
  event->handle = start(comm, d);
  event->table = comm->profiler.table;
  if (event->handle) event->table->recordEventState(event->handle, BRAID_PROFILER_GROUP_START_API_STOP, nullptr);
}

void profiler_group_api_end_starts(GroupApiEvent* event) {
  if (!event->handle || event->end_recorded) return;
  event->end_recorded = true;
  event->table->recordEventState(event->handle, BRAID_PROFILER_GROUP_END_API_START, nullptr);
}

void profiler_group_api_stop(GroupApiEvent* event) {
  stop(event->table, event->handle);
  *event = GroupApiEvent{};
}

namespace {
// A call's API event: started and stopped at once, kept as its task's parent.
template <typename Call, typename Fill>
void call_api(ncclComm* comm, const GroupApiEvent& group, Call* call, uint64_t type, int mask, Fill fill) {
  call->profiler.group = group.handle;
  if (!wants(comm, mask)) return;
  braidNcclProfilerEventDescr_t d{};
  d.type = type;
  d.parentObj = group.handle;
  fill(d);
  call->profiler.call = start(comm, d);
  stop(comm->profiler.table, call->profiler.call);
}
}  // namespace

void profiler_call_api(ncclComm* comm, const GroupApiEvent& group, CollectiveCall* call) {
  call_api(comm, group, call, BRAID_PROFILE_COLL_API, BRAID_PROFILE_COLL_API | kCollMask, [&](auto& d) {
    d.collApi.func = collective_name(call->collective);
    d.collApi.count = call->count;
    d.collApi.datatype = type_name(call->type);
    d.collApi.root = call->root;
    d.collApi.stream = call->stream;
  });
}

void profiler_call_api(ncclComm* comm, const GroupApiEvent& group, P2PCall* call) {
  call_api(comm, group, call, BRAID_PROFILE_P2P_API, BRAID_PROFILE_P2P_API | kP2pMask, [&](auto& d) {
    d.p2pApi.func = call->is_send ? "Send" : "Recv";
    d.p2pApi.count = call->count;
    d.p2pApi.datatype = type_name(call->type);
    d.p2pApi.stream = call->stream;
  });
}

ProfiledRun::ProfiledRun(ncclComm* comm, std::span<const CollectiveCall> collectives, std::span<const P2PCall> p2ps)
    : comm_(comm) {
  if (!wants(comm, kApiMask)) return;
  table_ = comm->profiler.table;
  const bool on_host = comm->cuda_device < 0;  // the run is this thread's: its channel can be timed
  void* group_api = !collectives.empty() ? collectives[0].profiler.group : !p2ps.empty() ? p2ps[0].profiler.group
                                                                                           : nullptr;
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
    d.coll.count = bytes ? c.count * type_bytes(c.type) : c.count;
    d.coll.datatype = bytes ? "ncclInt8" : type_name(c.type);
    d.coll.nChannels = 1;
    d.coll.algo = "braid";
    d.coll.proto = on_host ? "host" : "cuda";
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
    d.p2p.nChannels = 1;
    tasks_.push_back(start(comm, d));
    channels_.push_back(channel(tasks_.back()));
  }
  if (wants(comm, BRAID_PROFILE_KERNEL_LAUNCH)) {
    braidNcclProfilerEventDescr_t d{};
    d.type = BRAID_PROFILE_KERNEL_LAUNCH;
    d.parentObj = group_api;
    d.kernelLaunch.stream = !collectives.empty() ? collectives[0].stream : !p2ps.empty() ? p2ps[0].stream : nullptr;
    launch_ = start(comm, d);
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

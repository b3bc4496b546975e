// The one table of braid's configuration variables.  Values are read from the
// environment on every call (cheap, and tests may setenv between runs), or
// from the snapshot a braid-owned thread installed.
#include "src/core/env.h"

#include <cassert>
#include <cstdlib>
#include <cstring>

namespace braid {

const std::vector<EnvVar>& env_registry() {
  // Never destroyed: a bootstrap root's listener thread (detached, one per
  // unique id) may still read variables while the process runs its exit
  // handlers; a static vector would be freed under it (found by TSan).
  static const auto* vars = new std::vector<EnvVar>{
      {"BRAID_DEBUG", "", "log level: VERSION, WARN, INFO or TRACE (falls back to NCCL_DEBUG)"},
      {"BRAID_DEBUG_SUBSYS", "", "comma list of log subsystems, ^ negates (falls back to NCCL_DEBUG_SUBSYS)"},
      {"BRAID_DEBUG_FILE", "", "log file pattern, %h host, %p pid (falls back to NCCL_DEBUG_FILE)"},
      {"BRAID_TIMEOUT", "300", "seconds without progress before a wait fails (bootstrap, collectives)"},
      {"BRAID_COMM_ID", "", "ip:port of the bootstrap root; rank 0 listens there (also NCCL_COMM_ID)"},
      {"BRAID_HOSTID", "", "overrides host identity: ranks with equal values use shared memory"},
      {"BRAID_SOCKET_ADDR", "", "IPv4 address to listen on for bootstrap and socket transport"},
      {"BRAID_SOCKET_IFNAME", "",
       "interfaces the sockets may use, NCCL's syntax (eth,enp | =eth0 | ^docker,lo); unset: NCCL_SOCKET_IFNAME, else "
       "chosen (src/core/net_interface.h)"},
      {"BRAID_TRANSPORT", "auto", "auto (shm on one host, sockets across), shm or socket"},
      {"BRAID_ALGO", "", "force an algorithm: name for all collectives, or coll=name,coll=name"},
      {"BRAID_STRAGGLER", "off", "StragglAR AllReduce: off, auto (detect a persistent late rank), eager (last arrival, one host) or the late rank"},
      {"BRAID_SHM_SLOT_BYTES", "262144", "bytes per shared-memory fragment; a slot holds two, and calls whose every chunk spans at least 4 slots send slot-wide fragments through half the slots"},
      {"BRAID_SHM_SLOTS", "8", "slots per shared-memory connection"},
      {"BRAID_ONESHOT_MAX_BYTES", "4096", "host backend, ranks on one host: blocking AllReduce, ReduceScatter, AllGather and AlltoAll whose per-rank input is at most this size run one-shot on a shared board, Broadcast, Reduce, Gather and Scatter whose largest writer puts at most this much run eager (0: never)"},
      {"BRAID_DIRECT_MIN_BYTES", "32768", "host backend: calls of at least this many bytes on buffers in windows every rank can map run single-copy (-1: never)"},
      {"BRAID_CMA", "auto", "host backend, processes on one host: collectives on plain buffers may pull peers' inputs with process_vm_readv (cross-memory attach): auto (AllGather, AlltoAll and Broadcast, measured against the shared-memory slots, per collective and size; where ranks outnumber cores, AllGather and AlltoAll of 256 KiB and more only), on (always, and AllReduce, Reduce and ReduceScatter too, pushing their results with process_vm_writev) or off"},
      {"BRAID_LLC_BYTES", "0",
       "host backend: last-level cache bytes the output-store rule counts on (0: sysfs's size; a VM sees its host's "
       "whole cache)"},
      {"BRAID_CMA_MIN_BYTES", "32768", "host backend: calls whose larger buffer is smaller than this never pull (-1: never)"},
      {"BRAID_REDUCE_ISA", "auto", "host reductions: auto (AVX2 and F16C where the CPU has them, chosen at run time) or baseline (the build's own SSE2 loops; the results are bit-identical, this is for tests and timing)"},
      {"BRAID_SLOT_STORES", "auto", "host backend: how calls that stream their output (outputs of 16 MiB and more) write the fragments they send into shared-memory slots: auto (timed per collective and size, through the cache or with streaming stores; through the cache where ranks outnumber cores), cached or streamed"},
      {"BRAID_SOCKET_SLOT_BYTES", "1048576", "bytes per socket fragment"},
      {"BRAID_BACKEND", "auto", "executor backend: auto (cuda when a CUDA device is visible), cuda or host"},
      {"BRAID_CUDA_CHANNELS", "32", "cuda backend: connections per peer pair (schedule channels x parallel slices; each costs slots x slot bytes of device memory per peer; launches stay within what ranks sharing a GPU can keep resident together)"},
      {"BRAID_CUDA_SLOTS", "4", "cuda backend: fragments a connection buffers (2..8)"},
      {"BRAID_CUDA_SLOT_BYTES", "262144", "cuda backend: bytes per fragment slot"},
      {"BRAID_CHECK", "0", "1: check argument consistency across ranks before each collective (read at init; any rank turns it on for all)"},
      {"BRAID_SCHEDULES", "",
       "schedule files to run (braid JSON, MSCCL XML): a file, a directory (searched recursively) or a colon list of "
       "them; a call takes the first that fits it, searching these before the MSCCL_* ones"},
      {"MSCCL_XML_FILES", "", "MSCCL: colon list of algorithm files (searched after BRAID_SCHEDULES)"},
      {"MSCCL_CONFIG", "", "MSCCL: registration file, <msccl_algos><load path minbytes maxbytes proto/> (after MSCCL_XML_FILES)"},
      {"MSCCL_ALGO_DIR", "", "MSCCL: directory of algorithm files, *.xml, not recursive (searched last)"},
      {"BRAID_NCCL_LIB", "", "path of the real libnccl.so.2 to forward to"},
      {"BRAID_FORWARD", "", "collectives (allreduce,allgather,...) or all to run on BRAID_NCCL_LIB (cuda backend)"},
  };
  return *vars;
}

// The NCCL_* variables braid reads, besides its own registry.
constexpr const char* kForeignNames[] = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_COMM_ID",
                                           "NCCL_SOCKET_IFNAME"};

thread_local const EnvSnapshot* t_snapshot = nullptr;

EnvSnapshot EnvSnapshot::capture() {
  EnvSnapshot snap;
  auto add = [&](const char* name) {
    const char* value = std::getenv(name);
    snap.values_.emplace_back(name, value ? value : "");
  };
  for (const EnvVar& v : env_registry()) add(v.name);
  for (const char* name : kForeignNames) add(name);
  return snap;
}

const std::string* EnvSnapshot::find(const char* name) const {
  for (const auto& [n, v] : values_)
    if (n == name) return &v;
  return nullptr;
}

ScopedEnv::ScopedEnv(const EnvSnapshot& snapshot) : previous_(t_snapshot) { t_snapshot = &snapshot; }
ScopedEnv::~ScopedEnv() { t_snapshot = previous_; }

std::string env_raw(const char* name) {
  if (t_snapshot) {
    const std::string* value = t_snapshot->find(name);
    assert(value && "variable missing from EnvSnapshot (add it to kForeignNames)");
    return value ? *value : "";
  }
  const char* value = std::getenv(name);
  return value ? value : "";
}

static const EnvVar* find_var(const char* name) {
  for (const EnvVar& v : env_registry())
    if (std::strcmp(v.name, name) == 0) return &v;
  return nullptr;
}

std::string env_string(const char* name) {
  const EnvVar* var = find_var(name);
  assert(var && "unregistered BRAID_* variable");
  std::string value = env_raw(name);
  if (!value.empty()) return value;
  return var ? var->default_value : "";
}

int64_t env_int(const char* name) {
  std::string text = env_string(name);
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 0);
  if (end == text.c_str() || *end != '\0') {
    // A malformed value falls back to the default rather than to 0.
    const EnvVar* var = find_var(name);
    return var ? std::strtoll(var->default_value, nullptr, 0) : 0;
  }
  return v;
}

bool env_is_set(const char* name) { return !env_raw(name).empty(); }

Status env_choice(const char* name, std::initializer_list<const char*> allowed, int* index) {
  const std::string value = env_string(name);
  std::string words;
  int i = 0;
  for (const char* word : allowed) {
    if (value == word) {
      *index = i;
      return Status::ok();
    }
    words += (i++ ? ", " : "") + std::string(word);
  }
  return BRAID_ERROR(ncclInvalidArgument, "{}={} (expected one of {})", name, value, words);
}

}  // namespace braid

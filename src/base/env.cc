// Reading braid's configuration variables (env_registry.h holds the table).
// Values are read from the environment on every call (cheap, and tests may
// setenv between runs), or from the snapshot a braid-owned thread installed.
// NCCL's configuration files are applied to the environment before the
// first read (nccl_conf.h); then an env plugin, where one is loaded, answers
// in the environment's place (env_plugin.h).
#include "src/base/env.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "src/base/env_plugin.h"
#include "src/base/nccl_conf.h"

extern char** environ;

namespace braid {

std::span<const EnvVar> env_registry() { return kEnvVars; }

// The NCCL_* variables braid reads, besides its own registry.
constexpr EnvVar kNcclVars[] = {
    {"NCCL_DEBUG", "", "NCCL's log level; braid's when BRAID_DEBUG is unset"},
    {"NCCL_DEBUG_SUBSYS", "", "NCCL's log subsystems; braid's when BRAID_DEBUG_SUBSYS is unset"},
    {"NCCL_DEBUG_FILE", "", "NCCL's log file pattern; braid's when BRAID_DEBUG_FILE is unset"},
    {"NCCL_DEBUG_TIMESTAMP_LEVELS", "",
     "levels whose log lines start with the time: VERSION,WARN,INFO,ABORT,TRACE,ALL, ^ for all but (default WARN)"},
    {"NCCL_DEBUG_TIMESTAMP_FORMAT", "",
     "strftime format of that time (default \"[%F %T] \"); %1f..%9f: digits of the second, _ a space"},
    {"NCCL_WARN_ENABLE_DEBUG_INFO", "", "1: the first warning turns the log level up to INFO, as NCCL"},
    {"NCCL_COMM_ID", "",
     "ip:port, host:port or [ipv6]:port of the bootstrap root, rank 0 listens there (BRAID_COMM_ID wins)"},
    {"NCCL_SOCKET_IFNAME", "", "interfaces the sockets may use; braid's when BRAID_SOCKET_IFNAME is unset"},
    {"NCCL_SOCKET_FAMILY", "",
     "AF_INET or AF_INET6: the sockets' address family (unset: the root's, else IPv4 first); other values are "
     "ignored, as NCCL"},
    {"NCCL_SOCKET_RETRY_CNT", "",
     "set (or _SLEEP_MSEC set): a refused or unreachable connect is retried this many times (default 34), as NCCL, "
     "then fails; unset: retried until BRAID_TIMEOUT (src/base/net.h)"},
    {"NCCL_SOCKET_RETRY_SLEEP_MSEC", "",
     "with NCCL_SOCKET_RETRY_CNT: the k-th retry waits k times this many milliseconds (default 100), as NCCL"},
    {"NCCL_UID_STAGGER_THRESHOLD", "",
     "more ranks than this at one bootstrap root (default 256): each connects to it rank / NCCL_UID_STAGGER_RATE "
     "seconds late, as NCCL (src/bootstrap/bootstrap.h)"},
    {"NCCL_UID_STAGGER_RATE", "", "hellos a second a staggered bootstrap root takes (default 7000), as NCCL"},
    {"NCCL_CONF_FILE", "",
     "a file of NAME=value lines setting what the environment lacks, read before ~/.nccl.conf's place and "
     "/etc/nccl.conf (unset: ~/.nccl.conf), as NCCL (src/base/nccl_conf.h)"},
    {"NCCL_IB_HCA", "", "InfiniBand devices and ports; braid's when BRAID_IB_HCA is unset"},
    {"NCCL_NETDEVS_POLICY", "",
     "how many net devices a rank uses: AUTO (unset: its share of the nearest), ALL, or MAX:N; a call between hosts "
     "runs in as many slices as the most any rank uses (src/transport/net/nic_affinity.h)"},
    {"NCCL_IB_GID_INDEX", "", "GID index on RoCE ports; braid's when BRAID_IB_GID_INDEX is unset"},
    {"NCCL_IB_QPS_PER_CONNECTION", "", "queue pairs per connection; braid's when BRAID_IB_QPS_PER_CONNECTION is unset"},
    {"NCCL_IB_SPLIT_DATA_ON_QPS", "",
     "how messages use the queue pairs; braid's when BRAID_IB_SPLIT_DATA_ON_QPS is unset"},
    {"NCCL_IB_TIMEOUT", "", "InfiniBand ack timeout exponent; braid's when BRAID_IB_TIMEOUT is unset"},
    {"NCCL_IB_RETRY_CNT", "", "InfiniBand retries; braid's when BRAID_IB_RETRY_CNT is unset"},
    {"NCCL_IB_SL", "", "InfiniBand service level of every queue pair (0..15, default 0)"},
    {"NCCL_IB_TC", "",
     "RoCE traffic class of every queue pair (0..255; unset: the config's trafficClass, else 0): the DSCP/ECN bits "
     "PFC maps"},
    {"NCCL_IB_PKEY", "",
     "the index in each port's P_Key table of every queue pair's partition key (default 0); ends whose P_Keys cannot "
     "reach each other fail to connect, saying so"},
    {"NCCL_IB_RESILIENCY_PORT_FAILOVER", "",
     "1: every InfiniBand connection keeps a standby path on another port (with one port, on it), which takes over "
     "when a transport error ends the first (src/transport/ibverbs/ib_failover.h); default 0"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY", "",
     "1 (with NCCL_IB_RESILIENCY_PORT_FAILOVER=1): once a failed port is active again a connection's path on it "
     "stands by anew, and traffic moves back to the connection's own port (ib_failover.h); default 0"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY", "",
     "milliseconds between looks at a failed port while its connection is used (default 200)"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX", "",
     "failures a connection recovers from (default 5); after more, a failover is its last"},
    {"NCCL_IB_RETURN_ASYNC_EVENTS", "",
     "0: InfiniBand asynchronous events (a port down, a queue pair in error) are only logged; default 1: a fatal one "
     "ends its connection, and a port down fails over at once (src/transport/ibverbs/ib_event_rules.h)"},
    {"NCCL_IB_PCI_RELAXED_ORDERING", "",
     "2 (default): data buffers registered with relaxed ordering where libibverbs can; 1: the same, and the "
     "InfiniBand net fails to open where it cannot; other values: strict ordering (src/transport/ibverbs/ib_select.h)"},
    {"NCCL_IB_ROCE_VERSION_NUM", "", "the RoCE version of the GID braid picks where no index is set (default 2)"},
    {"NCCL_IB_ADDR_FAMILY", "", "AF_INET (default) or AF_INET6: the address family of the GID braid picks"},
    {"NCCL_IB_ADDR_RANGE", "", "address/mask: the GID braid picks is in it where one is (default any)"},
    {"NCCL_NET_PLUGIN", "", "the NCCL net plugin to load; braid's when BRAID_NET_PLUGIN is unset"},
    {"NCCL_NET", "",
     "between hosts only the net of this name, any case (IB, Socket, a net plugin's name), over the config's "
     "netName; none left on some rank fails init (src/transport/transport_policy.h); unread under BRAID_TRANSPORT"},
    {"NCCL_IB_DISABLE", "", "1: braid's InfiniBand is no candidate between hosts; unread under BRAID_TRANSPORT"},
    {"NCCL_SHM_DISABLE", "",
     "1: ranks of one host connect over the net or sockets, no shared memory; the same on every rank; unread under "
     "BRAID_TRANSPORT"},
    {"NCCL_P2P_DISABLE", "",
     "1 on any rank: a CUDA communicator's device buffers go through host memory (the host-staged backend, as "
     "between hosts: synchronous, not capturable), not CUDA IPC, on every rank"},
    {"NCCL_COMM_BLOCKING", "", "0 or 1: every new communicator's blocking, whatever its config says, as NCCL"},
    {"NCCL_MAX_CTAS", "",
     "1 or more: every new communicator's maxCTAs, whatever its config says, as NCCL (cuda backend: the most blocks "
     "a collective's kernel takes; the ranks take the least)"},
    {"NCCL_MAX_NCHANNELS", "", "1 or more: NCCL's older cap on channels, which caps maxCTAs too, as in NCCL"},
    {"NCCL_TOPO_DUMP_FILE", "",
     "a file: rank NCCL_TOPO_DUMP_FILE_RANK writes its host's topology there at init, in NCCL's XML, which braid "
     "synth/topo read (src/runtime/topo_dump.h)"},
    {"NCCL_TOPO_DUMP_FILE_RANK", "", "the rank that writes NCCL_TOPO_DUMP_FILE (default 0), as NCCL"},
    {"NCCL_TOPO_FILE", "",
     "a topology in NCCL's XML (a VM vendor's file; unset: /var/run/nvidia-topologyd/virtualTopology.xml where it "
     "exists): places GPUs and NICs by its tree for the nearest-NIC choice (src/transport/net/topo_file.h)"},
    {"NCCL_SET_THREAD_NAME", "",
     "1: braid's threads are named for what they do (\"braid socket\", \"braid gin proxy\"), as NCCL names its own; "
     "default 0: they keep the program's name (src/base/thread_name.h)"},
    {"NCCL_NUM_RMA_CTX", "", "0 or more: every new communicator's numRmaCtx, whatever its config says, as NCCL"},
    {"NCCL_MULTI_RANK_GPU_ENABLE", "",
     "NCCL 2.30's several ranks per GPU: 0 refuses a CUDA communicator with two ranks on one GPU; unset or 1 "
     "allows them (braid always could, docs/compatibility.md)"},
    {"NCCL_CUMEM_ENABLE", "",
     "0: ncclMemAlloc on the CUDA backend is cudaMalloc memory, which cannot be in a symmetric window; unset or 1: "
     "cuMem memory exportable as a POSIX descriptor, where the device can"},
    {"NCCL_GIN_PROXY_QUEUE_SIZE", "",
     "descriptors a device communicator's GIN queue holds per target rank, a power of two (default 256, as NCCL)"},
    {"NCCL_CHECK_MODE", "",
     "NCCL 2.29's argument checks: DEBUG_LOCAL checks each host buffer is mapped memory (on CUDA, that each buffer "
     "is device memory is always checked; not yet that it is the communicator's device's); DEBUG_GLOBAL adds "
     "BRAID_CHECK=1 (ranks compare each group's collective arguments, and each pair its sends and receives, "
     "before any data moves)"},
    {"NCCL_CHECK_POINTERS", "", "1: as NCCL_CHECK_MODE=DEBUG_LOCAL (NCCL's older name)"},
    {"NCCL_ALGO", "",
     "NCCL's algorithm list (ring, ^ring, ring;allreduce:^ring): ring admits braid's ring where it has one, an "
     "exclusion everything braid has that it does not exclude; NCCL's other algorithms are not braid's "
     "(src/plan/nccl_algo.h); BRAID_ALGO and a call's algSelection come first; the same on every rank"},
    {"NCCL_PROTO", "",
     "NCCL's protocol list (Simple, ^LL, allreduce:simple;ll): a function whose list excludes LL never takes braid's "
     "CUDA LL path; LL128 is none of braid's (src/plan/nccl_proto.h); the same on every rank"},
    {"NCCL_ENV_PLUGIN", "",
     "an env plugin (ncclEnvPlugin_v2 or _v1) that answers every variable braid reads in the environment's place: "
     "none, a library, or NAME for libnccl-env-NAME.so; unset: libnccl-env.so where it loads (src/base/env_plugin.h)"},
    {"NCCL_SOCKET_NTHREADS", "",
     "with NCCL_NSOCKS_PERTHREAD: their product (at most 64; threads 1..16) is the slices a large call between hosts "
     "over TCP runs in, each slice on TCP connections of its own (src/plan/host_path.h); braid makes no helper "
     "threads; the same on every rank"},
    {"NCCL_NSOCKS_PERTHREAD", "", "TCP streams per NCCL_SOCKET_NTHREADS thread (see there)"},
    {"NCCL_TUNER_PLUGIN", "",
     "an NCCL tuner plugin (ncclTunerPlugin_v7 to _v2): none, a library, or NAME for libnccl-tuner-NAME.so; unset: "
     "libnccl-tuner.so, else the net plugin's library; it may pick braid's ring (or the CUDA LL path) per call "
     "(src/runtime/tuner.h); the same on every rank"},
    {"NCCL_PROFILER_PLUGIN", "",
     "a profiler plugin (ncclProfiler_v5 to v7): none, NAME (libnccl-profiler-NAME.so, else NAME as a path); unset: "
     "libnccl-profiler.so where it loads"},
    {"NCCL_RMA_EAGER_INIT", "",
     "NCCL 2.31: 1 connects one-sided RMA at init, 0 at the first window, overriding the config's rmaEagerInit; "
     "other values leave the config's"},
    {"NCCL_RUN_DIAGNOSTICS", "",
     "NCCL 2.31's active diagnostics: 1 sends a pattern over every directed pair of ranks at each init and rank 0 "
     "prints what arrived intact (\"NCCL DIAG\" lines on standard output)"},
    {"NCCL_RUN_RAS_DIAGNOSTICS", "",
     "NCCL 2.31's RAS diagnostics at init: 1 makes rank 0 print whether the ranks agree on their NCCL_* and "
     "BRAID_* variables, library, GPUs and CUDA driver"},
    {"NCCL_RAS_ENABLE", "",
     "RAS (ncclras queries of a running job): on unless set to anything but 1 (as NCCL: only 1 enables it)"},
    {"NCCL_RAS_ADDR", "",
     "host:port of the RAS client socket every process of the host shares (default localhost:28028); give each "
     "job on a host its own"},
    {"NCCL_RAS_TIMEOUT_FACTOR", "",
     "multiplies RAS's timeouts (a positive number, default 1): a status query's wait per process and the "
     "monitor's probe interval"},
    {"NCCL_WIN_STRIDE", "",
     "bytes between LSA ranks' copies in the flat range of symmetric memory, a multiple of 4 GiB (the largest "
     "any rank sets wins); default: the memory's size split among the ranks sharing it, rounded up"},
};

std::span<const EnvVar> nccl_env_vars() { return kNcclVars; }

thread_local const EnvSnapshot* t_snapshot = nullptr;

namespace {
bool nccl_or_braid(const char* name) {
  return std::strncmp(name, "NCCL_", 5) == 0 || std::strncmp(name, "BRAID_", 6) == 0;
}

std::atomic<HostEnvGetter> g_host_getter{nullptr};
std::mutex g_host_mutex;  // the host's answer holds until its next call for the name, maybe another thread's

// A variable's value: the host NCCL's where braid runs inside one, else the
// env plugin's where one is in use, else the environment's (after NCCL's
// configuration files are applied).
std::optional<std::string> lookup(const char* name) {
  if (HostEnvGetter host = g_host_getter.load()) {
    std::lock_guard<std::mutex> lock(g_host_mutex);
    const char* value = host(name, true);
    if (!value) return std::nullopt;
    return std::string(value);
  }
  apply_nccl_conf_files_once();
  if (EnvPlugin* plugin = process_env_plugin()) return plugin->get(name);
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  return std::string(value);
}

// Every set NCCL_* and BRAID_* variable as NAME=value, sorted by name.  An
// env plugin cannot list what it holds: with one, the names are the
// environment's and the tables', and the values its answers.
std::vector<std::string> scan_nccl_and_braid() {
  apply_nccl_conf_files_once();
  std::set<std::string> names;
  for (char** e = environ; e && *e; ++e)
    if (nccl_or_braid(*e)) names.insert(std::string(*e, std::strcspn(*e, "=")));
  if (g_host_getter.load() || process_env_plugin()) {
    for (const EnvVar& v : env_registry()) names.insert(v.name);
    for (const EnvVar& v : kNcclVars) names.insert(v.name);
  }
  std::vector<std::string> found;
  for (const std::string& name : names)
    if (std::optional<std::string> value = lookup(name.c_str())) found.push_back(name + "=" + *value);
  return found;
}
}  // namespace

EnvSnapshot EnvSnapshot::capture() {
  // A thread braid started (it runs under a snapshot) passes its own on:
  // reading the environment there would race the application's setenv.
  if (t_snapshot) return *t_snapshot;
  EnvSnapshot snap;
  auto add = [&](const char* name) { snap.values_.emplace_back(name, lookup(name).value_or("")); };
  for (const EnvVar& v : env_registry()) add(v.name);
  for (const EnvVar& v : kNcclVars) add(v.name);
  snap.nccl_and_braid_ = scan_nccl_and_braid();
  // Every other NCCL_* and BRAID_* variable that is set, so that a reader
  // missing from the tables above still sees its value on braid's threads.
  for (const std::string& entry : snap.nccl_and_braid_) {
    const size_t eq = entry.find('=');
    std::string name = entry.substr(0, eq);
    if (!snap.find(name.c_str())) snap.values_.emplace_back(std::move(name), entry.substr(eq + 1));
  }
  return snap;
}

const std::string* EnvSnapshot::find(const char* name) const {
  for (const auto& [n, v] : values_)
    if (n == name) return &v;
  return nullptr;
}

ScopedEnv::ScopedEnv(const EnvSnapshot& snapshot) : previous_(t_snapshot) { t_snapshot = &snapshot; }
ScopedEnv::~ScopedEnv() { t_snapshot = previous_; }

std::string env_raw(const char* name) { return env_value(name).value_or(""); }

std::optional<std::string> env_value(const char* name) {
  if (t_snapshot) {
    const std::string* value = t_snapshot->find(name);
    // Every NCCL_* and BRAID_* variable that was set is in the snapshot, so
    // one of those not found was unset; any other name must be in a table.
    assert((value || nccl_or_braid(name)) && "variable missing from EnvSnapshot (add it to env_registry.h)");
    if (!value || value->empty()) return std::nullopt;  // the snapshot keeps unset as ""
    return *value;
  }
  return lookup(name);
}

void env_read_through_host(HostEnvGetter getter) { g_host_getter.store(getter); }

std::vector<std::string> env_nccl_and_braid() {
  if (t_snapshot) return t_snapshot->nccl_and_braid();
  return scan_nccl_and_braid();
}

std::string env_string(EnvName name) {
  std::string value = env_raw(name.name());
  return value.empty() ? name.var().default_value : value;
}

namespace {

std::optional<int64_t> number(const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 0);
  if (end == text.c_str() || *end != '\0') return std::nullopt;
  return v;
}

}  // namespace

std::optional<int64_t> env_number(EnvName name) { return number(env_string(name)); }

std::optional<int64_t> env_nccl_int(const char* name) { return number(env_raw(name)); }

int64_t env_int(EnvName name) {
  // A malformed value falls back to the default rather than to 0.
  return number(env_string(name)).value_or(std::strtoll(name.var().default_value, nullptr, 0));
}

bool env_is_set(EnvName name) { return !env_raw(name.name()).empty(); }

std::string env_string_or_nccl(EnvName name, const char* nccl_name) {
  std::string value = env_raw(name.name());
  if (value.empty()) value = env_raw(nccl_name);
  return value.empty() ? name.var().default_value : value;
}

int64_t env_int_or_nccl(EnvName name, const char* nccl_name) {
  return number(env_string_or_nccl(name, nccl_name)).value_or(std::strtoll(name.var().default_value, nullptr, 0));
}

Status env_choice(EnvName name, std::initializer_list<const char*> allowed, int* index) {
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
  return BRAID_ERROR(ncclInvalidArgument, "{}={} (expected one of {})", name.name(), value, words);
}

}  // namespace braid

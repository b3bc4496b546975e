// Communicator setup: bootstrap rendezvous, peer exchange, transports.
#include "src/core/comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "src/core/cross_memory.h"
#include "src/core/env.h"
#include "src/core/log.h"
#include "src/exec/device_backend.h"
#include "src/exec/forward.h"
#include "src/exec/host/direct_task.h"
#include "src/exec/host/eager.h"
#include "src/exec/host/oneshot.h"
#include "src/exec/host/task.h"
#include "src/plan/copy_path.h"
#include "src/plan/host_tuning.h"
#include "src/plan/planner.h"
#include "src/plan/slot_stores.h"
#include "src/transport/doorbell.h"

ncclComm::ncclComm() = default;
ncclComm::~ncclComm() = default;

namespace braid {

bool AsyncJob::wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex);
  return cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done; });
}

void AsyncJob::finish(ncclResult_t r) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    result = r;
    done = true;
  }
  cv.notify_all();
}

namespace {

// A random value drawn once per process image.  With the pid it tells
// whether two ranks share an address space: pids repeat across containers
// and hosts, and a forked child keeps this value but not the pid.
uint64_t this_process() {
  static const uint64_t id = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  return id;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// What every rank tells every other at init.
struct InitInfo {
  PeerInfo peer;
  uint64_t tile_bytes = 0;
  uint64_t wide_tile_bytes = 0;  // the widest fragment this rank's transports' slots take
  int32_t api_version = 0;
  int32_t wants_device = 0;  // DeviceProbe::usable: every rank must agree
  int32_t check_args = 0;    // BRAID_CHECK: on for all when any rank sets it
  HostTuningReport tuning;  // for the schedule choices all ranks make alike
  uint64_t process = 0;     // this_process(): with peer.pid, equal <=> one address space
  uint64_t direct_min_bytes = 0;  // BRAID_DIRECT_MIN_BYTES; all use the largest
  uint64_t oneshot_max_bytes = 0;  // BRAID_ONESHOT_MAX_BYTES (0 where it cannot apply); all use the smallest
  uint32_t unpinned_collectives = 0;  // bit per Collective no schedule is pinned to; all use the common bits
  CmaMode cma_mode = CmaMode::Off;  // BRAID_CMA; all use the least
  uint64_t cma_min_bytes = 0;       // BRAID_CMA_MIN_BYTES; all use the largest
  CmaProbe cma_probe;               // for peers to try reading this process
};

// The collectives whose schedule this rank may replace by a fast path
// (a board, src/exec/host/oneshot.h and eager.h, or the pull path,
// direct_task.h): BRAID_ALGO forcing an algorithm, or a schedule file for
// this many ranks, means the user wants that schedule to run.
uint32_t unpinned_collectives(int nranks) {
  const auto& files = file_schedules().schedules;
  uint32_t bits = 0;
  for (int i = 0; i < int(Collective::Custom); ++i) {
    const Collective c = Collective(i);
    const bool from_file =
        std::any_of(files.begin(), files.end(), [&](const auto& s) { return s->collective == c && s->nranks == nranks; });
    if (forced_algorithm(c).empty() && !from_file) bits |= 1u << i;
  }
  return bits;
}

uint32_t collectives_where(bool (*serves)(Collective)) {
  uint32_t bits = 0;
  for (int i = 0; i < int(Collective::Custom); ++i)
    if (serves(Collective(i))) bits |= 1u << i;
  return bits;
}

Status cma_mode_from_env(CmaMode* out) {
  int i = 0;
  BRAID_TRY(env_choice("BRAID_CMA", {"off", "auto", "on"}, &i));  // CmaMode's order
  *out = CmaMode(i);
  return Status::ok();
}

class RouterTransport final : public Transport {
 public:
  RouterTransport(const TransportContext& ctx, std::unique_ptr<Transport> shm, std::unique_ptr<Transport> socket)
      : ctx_(ctx), shm_(std::move(shm)), socket_(std::move(socket)) {}
  const char* name() const override { return "router"; }
  Status send_pipe(int peer, int channel, SendPipe** out) override {
    BRAID_TRY(check_peer(peer));
    return pick(peer)->send_pipe(peer, channel, out);
  }
  Status recv_pipe(int peer, int channel, RecvPipe** out) override {
    BRAID_TRY(check_peer(peer));
    return pick(peer)->recv_pipe(peer, channel, out);
  }
  size_t slot_bytes() const override {
    size_t b = SIZE_MAX;
    for (auto* t : {shm_.get(), socket_.get()})
      if (t) b = std::min(b, t->slot_bytes());
    return b;
  }
  int slots() const override {
    int s = INT32_MAX;
    for (auto* t : {shm_.get(), socket_.get()})
      if (t) s = std::min(s, t->slots());
    return s;
  }
  void abort() override {
    if (shm_) shm_->abort();
    if (socket_) socket_->abort();
  }
  // Each transport's doorbell hears only its own traffic: with both, sleep
  // on shared memory's and have the sockets ring it.
  Doorbell* doorbell() override {
    if (!shm_ || !socket_) return shm_ ? shm_->doorbell() : socket_->doorbell();
    if (!both_) {
      Doorbell* shm = shm_->doorbell();
      Doorbell* socket = socket_->doorbell();
      if (!shm || !socket || !socket->forward_to(shm)) return nullptr;
      both_.emplace(shm, socket);
    }
    return &*both_;
  }

 private:
  Status check_peer(int peer) const {
    if (peer < 0 || peer >= ctx_.nranks)
      return BRAID_ERROR(ncclInvalidArgument, "peer {} out of range [0, {})", peer, ctx_.nranks);
    return Status::ok();
  }
  Transport* pick(int peer) const {
    bool same_host = ctx_.peers[peer].host_hash == ctx_.peers[ctx_.rank].host_hash;
    return (same_host && shm_) || !socket_ ? shm_.get() : socket_.get();
  }
  TransportContext ctx_;
  std::unique_ptr<Transport> shm_, socket_;
  std::optional<ForwardedDoorbell> both_;
};

}  // namespace

void comm_register(ncclComm* comm) { live_comms().insert(comm); }
bool comm_unregister(ncclComm* comm) { return live_comms().erase(comm); }
bool comm_is_live(const ncclComm* comm) { return live_comms().contains(comm); }

bool comm_acquire(ncclComm* comm) {
  return live_comms().if_live(comm, [&] { comm->running.fetch_add(1); });
}
void comm_release(ncclComm* comm) { comm->running.fetch_sub(1); }

bool comm_wait_idle(ncclComm* comm, int64_t timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (comm->running.load() > 0 || live_comms().in_use(comm)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

Status comm_wait_job(ncclComm* comm) {
  std::shared_ptr<AsyncJob> job;
  {
    std::lock_guard<std::mutex> lock(comm->job_mutex);
    job = comm->job;
  }
  if (!job) return Status::ok();
  int64_t timeout_ms = env_int("BRAID_TIMEOUT") * 1000;
  if (!job->wait(timeout_ms + 1000))
    return BRAID_ERROR(ncclSystemError, "the communicator's background work did not finish within BRAID_TIMEOUT");
  return Status::ok();
}

ncclResult_t comm_async_state(ncclComm* comm) {
  ncclResult_t sticky = ncclResult_t(comm->async_error.load());
  if (sticky != ncclSuccess) return sticky;
  std::shared_ptr<AsyncJob> job;
  {
    std::lock_guard<std::mutex> lock(comm->job_mutex);
    job = comm->job;
  }
  if (job) {
    std::lock_guard<std::mutex> lock(job->mutex);
    if (!job->done) return ncclInProgress;
    if (job->result != ncclSuccess) return job->result;
  }
  // Revoked: in progress until the work it interrupted has let go.
  if (comm->revoked && comm->running.load() > 0) return ncclInProgress;
  return ncclResult_t(comm->async_error.load());
}

uint64_t machine_hash() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return fnv1a(std::string(host) + "/" + boot);
}

uint64_t host_hash() {
  std::string id = env_string("BRAID_HOSTID");
  return id.empty() ? machine_hash() : fnv1a(id);
}

Status make_router_transport(const TransportContext& ctx, std::unique_ptr<Transport> shm,
                             std::unique_ptr<Transport> socket, std::unique_ptr<Transport>* out) {
  *out = std::make_unique<RouterTransport>(ctx, std::move(shm), std::move(socket));
  return Status::ok();
}

namespace {
// Everything after the bootstrap: peer exchange and transports.
Status comm_setup(ncclComm* comm);
}  // namespace

Status comm_init(ncclComm* comm, const ncclUniqueId& id, int nranks, int rank, const ncclConfig_t* config) {
  int64_t timeout_s = env_int("BRAID_TIMEOUT");
  Deadline deadline = Deadline::after(std::chrono::milliseconds(timeout_s * 1000));
  // rank, nranks and config were set by the caller before this (maybe
  // background) init started, so queries never race with it.
  (void)config;
  BRAID_TRY(Bootstrap::connect(id, rank, nranks, deadline, &comm->bootstrap, &comm->stop));
  return comm_setup(comm);
}

Status comm_init_scalable(ncclComm* comm, const std::vector<ncclUniqueId>& ids, int nranks, int rank,
                          const ncclConfig_t* config) {
  int64_t timeout_s = env_int("BRAID_TIMEOUT");
  Deadline deadline = Deadline::after(std::chrono::milliseconds(timeout_s * 1000));
  // rank, nranks and config were set by the caller before this (maybe
  // background) init started, so queries never race with it.
  (void)config;
  BRAID_TRY(Bootstrap::connect_scalable(ids, rank, nranks, deadline, &comm->bootstrap, &comm->stop));
  return comm_setup(comm);
}

namespace {
Status comm_setup(ncclComm* comm) {
  const int rank = comm->rank, nranks = comm->nranks;
  comm->comm_hash = comm->bootstrap->comm_hash();

  int choice = 0;  // BRAID_TRANSPORT and BRAID_BACKEND are checked here and compared as text below
  BRAID_TRY(env_choice("BRAID_TRANSPORT", {"auto", "shm", "socket"}, &choice));
  const std::string mode = env_string("BRAID_TRANSPORT");

  std::unique_ptr<SocketListener> listener;
  std::string address;
  if (mode != "shm") BRAID_TRY(socket_listen(comm->bootstrap->address(), &listener, &address));

  std::vector<InitInfo> infos(nranks);
  InitInfo& mine = infos[rank];
  mine.peer.host_hash = host_hash();
  mine.peer.machine_hash = machine_hash();
  mine.peer.pid = int32_t(getpid());
  mine.process = this_process();
  std::snprintf(mine.peer.socket_addr, sizeof(mine.peer.socket_addr), "%s", address.c_str());
  mine.tile_bytes = uint64_t(std::min(env_int("BRAID_SHM_SLOT_BYTES"), env_int("BRAID_SOCKET_SLOT_BYTES")));
  mine.wide_tile_bytes =
      uint64_t(std::min<int64_t>(kShmSlotFragments * env_int("BRAID_SHM_SLOT_BYTES"), env_int("BRAID_SOCKET_SLOT_BYTES")));
  mine.api_version = NCCL_VERSION_CODE;
  BRAID_TRY(env_choice("BRAID_BACKEND", {"auto", "cuda", "host"}, &choice));
  const std::string backend = env_string("BRAID_BACKEND");
  DeviceProbe probe = probe_device_backend();
  if (backend == "cuda" && !probe.usable)
    return BRAID_ERROR(ncclInvalidUsage, "BRAID_BACKEND=cuda but no usable CUDA device (or braid built without CUDA)");
  mine.wants_device = probe.usable;
  mine.check_args = env_int("BRAID_CHECK") != 0;
  mine.tuning = {mine.peer.machine_hash, host_allreduce_rd_max_bytes(nranks), host_usable_cores()};
  const int64_t direct_min = env_int("BRAID_DIRECT_MIN_BYTES");
  mine.direct_min_bytes = direct_min < 0 ? UINT64_MAX : uint64_t(direct_min);
  // One-shot needs the board every rank maps.
  const int64_t oneshot_max = env_int("BRAID_ONESHOT_MAX_BYTES");
  if (mode != "socket" && oneshot_max > 0)
    mine.oneshot_max_bytes = uint64_t(std::min<int64_t>(oneshot_max, kOneShotLimitBytes));
  mine.unpinned_collectives = unpinned_collectives(nranks);
  BRAID_TRY(cma_mode_from_env(&mine.cma_mode));
  const int64_t cma_min = env_int("BRAID_CMA_MIN_BYTES");
  mine.cma_min_bytes = cma_min < 0 ? UINT64_MAX : uint64_t(cma_min);
  if (mine.cma_mode != CmaMode::Off) mine.cma_probe = cma_probe_of_this_process();
  SlotStoresMode stores;  // this rank's own (src/plan/slot_stores.h)
  BRAID_TRY(slot_stores_mode_from_env(&stores));
  int reduce_isa_choice = 0;  // read where reductions run (src/core/datatype.cc); checked here
  BRAID_TRY(env_choice("BRAID_REDUCE_ISA", {"auto", "baseline"}, &reduce_isa_choice));
  BRAID_TRY(comm->bootstrap->allgather(infos.data(), sizeof(InitInfo)));

  TransportContext ctx;
  ctx.comm_hash = comm->comm_hash;
  ctx.rank = rank;
  ctx.nranks = nranks;
  comm->tile_bytes = comm->wide_tile_bytes = UINT64_MAX;
  comm->direct_min_bytes = 0;
  comm->oneshot_max_bytes = UINT64_MAX;
  uint32_t unpinned = ~0u;
  CmaMode cma_mode = CmaMode::On;
  uint64_t cma_min_bytes = 0;
  for (const InitInfo& info : infos) {
    if (info.api_version != NCCL_VERSION_CODE)
      return BRAID_ERROR(ncclInvalidUsage, "ranks disagree on the NCCL API version ({} vs {})", info.api_version,
                         NCCL_VERSION_CODE);
    if (info.wants_device != mine.wants_device)
      return BRAID_ERROR(ncclInvalidUsage,
                         "ranks disagree on the backend (some see a CUDA device, some do not): set BRAID_BACKEND "
                         "to the same value (host or cuda) on every rank");
    ctx.peers.push_back(info.peer);
    comm->tile_bytes = std::min(comm->tile_bytes, info.tile_bytes);
    comm->wide_tile_bytes = std::min(comm->wide_tile_bytes, info.wide_tile_bytes);
    // One rank checking alone would wait for records nobody sends.
    comm->check_args |= info.check_args != 0;
    // Ranks must take the direct path for the same calls.
    comm->direct_min_bytes = std::max(comm->direct_min_bytes, info.direct_min_bytes);
    comm->oneshot_max_bytes = std::min(comm->oneshot_max_bytes, info.oneshot_max_bytes);
    unpinned &= info.unpinned_collectives;
    cma_mode = std::min(cma_mode, info.cma_mode);
    cma_min_bytes = std::max(cma_min_bytes, info.cma_min_bytes);
  }
  comm->oneshot_collectives = unpinned & (collectives_where(oneshot_serves) | collectives_where(eager_serves));
  comm->peers = ctx.peers;
  comm->cache_share = cache_share(ranks_on_host(ctx.peers, ctx.rank));

  // Sockets only when some peer is on another host (or forced); shared memory
  // whenever a peer shares this host.
  bool remote_peer = false;
  for (const PeerInfo& p : ctx.peers) remote_peer |= p.host_hash != mine.peer.host_hash;
  if (remote_peer || nranks < 2) comm->oneshot_max_bytes = 0;
  std::unique_ptr<Transport> shm, socket;
  if (mode != "socket") BRAID_TRY(make_shm_transport(ctx, &shm));
  if (mode == "socket" || (remote_peer && mode != "shm")) {
    if (!listener) return BRAID_ERROR(ncclInvalidUsage, "BRAID_TRANSPORT=shm but some ranks are on other hosts");
    BRAID_TRY(make_socket_transport(ctx, std::move(listener), &socket));
  }
  if (mode == "shm" && remote_peer)
    return BRAID_ERROR(ncclInvalidUsage, "BRAID_TRANSPORT=shm but some ranks are on other hosts");
  BRAID_TRY(make_router_transport(ctx, std::move(shm), std::move(socket), &comm->transport));
  // A fragment must fit in every transport's slot.
  comm->tile_bytes = std::min<uint64_t>(comm->tile_bytes, comm->transport->slot_bytes());
  // Calls with large chunks send fragments as wide as every rank's slots take (call_tile_bytes).
  comm->wide_tile_bytes = std::min<uint64_t>(comm->wide_tile_bytes, comm->transport->slot_bytes());
  // Between hosts, narrow fragments only (every rank has a peer elsewhere, or none has).
  if (remote_peer) comm->tile_bytes = comm->wide_tile_bytes = std::min(comm->tile_bytes, kRemoteFragmentBytes);
  comm->plans = std::make_unique<PlanCache>();
  std::vector<HostTuningReport> reports;
  for (const InitInfo& info : infos) reports.push_back(info.tuning);
  const HostTuning tuning = agree_host_tuning(reports);
  comm->plans->set_tuning(tuning);
  comm->one_process = !probe.usable && nranks > 1 && std::all_of(infos.begin(), infos.end(), [&](const InitInfo& i) {
    return i.process == mine.process && i.peer.pid == mine.peer.pid;
  });
  if (comm->one_process) comm->direct_guard = direct_guard_for(comm->comm_hash);
  // The pull path, between processes of this host on the host backend.
  if (!remote_peer && !comm->one_process && !probe.usable && nranks > 1 && cma_mode != CmaMode::Off) {
    comm->pull_collectives = unpinned & collectives_where(cma_mode == CmaMode::On ? pull_serves
                                                          : tuning.oversubscribed ? pull_in_auto_oversubscribed
                                                                                  : pull_in_auto);
    comm->pull_min_bytes = cma_mode == CmaMode::Auto && tuning.oversubscribed
                               ? std::max(cma_min_bytes, kOversubscribedPullMinBytes)
                               : cma_min_bytes;
    comm->pull_always = cma_mode == CmaMode::On;
    comm->time_slot_calls_to_all_done = cma_mode == CmaMode::Auto && tuning.oversubscribed;
    comm->can_pull = true;
    for (int r = 0; r < nranks; ++r)
      if (r != rank && infos[r].peer.pid != mine.peer.pid)
        comm->can_pull = comm->can_pull && cma_can_read(infos[r].peer.pid, infos[r].cma_probe);
    if (rank == 0)
      comm->copy_paths = std::make_unique<CopyPathChooser>(
          1, tuning.oversubscribed ? kOversubscribedCopyPathWindow : CopyPathChooser::kDefaultWindow);
    comm->slot_leases = std::make_unique<SlotLeases>();
    if (!comm->can_pull)
      BRAID_INFO(kInit, "comm {:#x} rank {}: cannot read peers' memory (process_vm_readv); collectives keep "
                 "the shared-memory slots", comm->comm_hash, rank);
  }
  if (!probe.usable && nranks > 1) {
    comm->stream_slots_always = stores == SlotStoresMode::Streamed;
    if (stores == SlotStoresMode::Auto && !tuning.oversubscribed)
      comm->slot_stores = std::make_unique<SlotStoreChooser>(kSlotStoresFirstCheckEvery);
  }
  if (probe.usable) {
    // CUDA IPC reaches the ranks of one host; with a peer elsewhere the
    // device buffers go through the host transports instead.
    if (remote_peer) BRAID_TRY(make_cuda_staged_backend(comm, probe.device, &comm->device));
    else BRAID_TRY(make_cuda_backend(comm, probe.device, &comm->device));
    comm->cuda_device = probe.device;
  }
  comm->ready.store(true, std::memory_order_release);
  BRAID_INFO(kInit, "comm {:#x} rank {}/{} ready: transport {}, fragment {} bytes ({} for large chunks)",
             comm->comm_hash, rank, nranks, comm->device ? comm->device->name() : mode.c_str(), comm->tile_bytes,
             comm->wide_tile_bytes);
  return Status::ok();
}
}  // namespace

}  // namespace braid

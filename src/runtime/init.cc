// Communicator init after the bootstrap, in three steps:
//   agree            every rank publishes its facts and settings in one
//                    allgather and folds them (agreement.h)
//   make transports  shared memory to the ranks of this host; to the others
//                    a net plugin, InfiniBand or sockets, as the ranks agree
//                    (src/transport/policy_transport.h: BRAID_TRANSPORT,
//                    or NCCL_NET, NCCL_SHM_DISABLE and NCCL_IB_DISABLE)
//   make backend     CUDA where every rank sees a device (host-staged with
//                    ranks on several hosts), else the host backend with the
//                    host paths' settings (src/plan/host_path.h)
#include "src/runtime/init.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "src/base/env.h"
#include "src/base/host_identity.h"
#include "src/base/log.h"
#include "src/base/nccl_conf.h"
#include "src/exec/device_backend.h"
#include "src/exec/host/host_backend.h"
#include "src/plan/copy_path.h"
#include "src/plan/host_path.h"
#include "src/plan/host_tuning.h"
#include "src/plan/planner.h"
#include "src/runtime/agreement.h"
#include "src/runtime/comm.h"
#include "src/runtime/cuda_settings.h"
#include "src/runtime/diagnostics.h"
#include "src/runtime/ras_service.h"
#include "src/runtime/topo_dump.h"
#include "src/runtime/tuner.h"
#include "src/transport/cross_memory.h"
#include "src/transport/policy_transport.h"
#include "src/transport/peer_processes.h"

namespace braid {
namespace {

// BRAID_CMA: whether collectives between processes may pull (and push)
// peers' buffers with cross-memory attach (src/transport/cross_memory.h).
// Ordered: ranks use the least any of them asks for.
enum class CmaMode : int32_t { Off = 0, Auto = 1, On = 2 };

// What every rank tells every other at init: the values all fold into one,
// and the facts each rank keeps per peer.
struct InitInfo {
  AgreedValues agreed;
  PeerInfo peer;
  HostTuningReport tuning;  // folded by agree_host_tuning (src/plan/host_tuning.h)
  uint64_t process = 0;     // this_process(): with peer.pid, equal <=> one address space
  CmaProbe cma_probe;       // for peers to try reading this process
  uint64_t gpu = 0;         // DeviceProbe::gpu: the GPU this rank runs on (0: none)
  char gpu_name[sizeof DeviceProbe::name] = {};  // DeviceProbe::name
  char gpu_bus_id[sizeof DeviceProbe::pci_bus_id] = {};  // DeviceProbe::pci_bus_id, for NCCL_TOPO_DUMP_FILE
  int32_t gpu_sm = 0;                                    // DeviceProbe::sm
  RasRank ras;              // where RAS queries reach this rank's process (ras_service.h)
  uint8_t failed = 0;  // this rank's init failed before the exchange: the rest is not filled
};

bool one_address_space(const InitInfo& a, const InitInfo& b) {
  return a.process == b.process && same_process(a.peer, b.peer);
}

// NCCL_MULTI_RANK_GPU_ENABLE (NCCL 2.30): NCCL refuses two ranks of one
// communicator on one GPU unless it is set.  braid's CUDA backend has always
// run them (they share the GPU like any two processes, docs/compatibility.md),
// so braid allows them unless the variable is 0, which asks for NCCL's old
// refusal.  Host ranks have no GPU to share.  Every rank looks at every
// pair, so all of them refuse together.
Status check_ranks_per_gpu(const std::vector<InitInfo>& infos) {
  if (env_raw("NCCL_MULTI_RANK_GPU_ENABLE") != "0") return Status::ok();
  for (size_t a = 0; a < infos.size(); ++a)
    for (size_t b = a + 1; b < infos.size(); ++b)
      if (infos[a].gpu && infos[a].gpu == infos[b].gpu && infos[a].peer.machine_hash == infos[b].peer.machine_hash)
        return BRAID_ERROR(ncclInvalidUsage, "ranks {} and {} run on one GPU and NCCL_MULTI_RANK_GPU_ENABLE=0 "
                           "forbids several ranks per GPU (unset it, or set 1, to allow them)", a, b);
  return Status::ok();
}

// The collectives whose schedule this rank may replace by a fast path (a
// board or the pull path): BRAID_ALGO pinning an algorithm, or a schedule
// file for this many ranks, means the user wants that schedule to run.
uint32_t unpinned_collectives(int nranks, const BraidAlgo& braid_algo) {
  const auto& files = file_schedules().schedules;
  uint32_t bits = 0;
  for (int i = 0; i < int(Collective::Custom); ++i) {
    const Collective c = Collective(i);
    const bool from_file =
        std::any_of(files.begin(), files.end(), [&](const auto& s) { return s->collective == c && s->nranks == nranks; });
    if (!braid_algo.pins(c) && !from_file) bits |= 1u << i;
  }
  return bits;
}

// Once per process (a forked child is another: it logs too): what NCCL's
// configuration files set (nccl_conf.h), and the NCCL variables set that
// braid does not read (nccl-tests' own NCCL_TESTS_* aside), so that a job
// tuned for NCCL sees what has no effect.
void log_environment_once() {
  static std::atomic<pid_t> logged_by{0};
  const pid_t me = getpid();
  if (logged_by.exchange(me) == me) return;
  for (const ConfSetting& s : nccl_conf_settings()) BRAID_INFO(kInit | kEnv, "{}={} set by {}", s.name, s.value, s.file);
  for (const std::string& why : nccl_conf_unread()) BRAID_WARN("NCCL configuration file not read: {}", why);
  const std::span<const EnvVar> read = nccl_env_vars();
  std::string unread;
  for (const std::string& entry : env_nccl_and_braid()) {
    const std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("NCCL_", 0) != 0 || name.rfind("NCCL_TESTS_", 0) == 0) continue;
    if (std::none_of(read.begin(), read.end(), [&](const EnvVar& v) { return name == v.name; }))
      unread += (unread.empty() ? "" : ", ") + name;
  }
  if (!unread.empty())
    BRAID_INFO(kInit | kEnv, "set, and not read by braid (docs/compatibility.md says why): {}", unread);
  log_write_later_lines();  // the env plugin's (env_plugin.h)
}

Status read_local_choices(const ncclComm* comm, LocalChoices* out) {
  log_environment_once();
  int choice = 0;
  BRAID_TRY(read_transport_policy(comm->net_name, &out->transport));
  BRAID_TRY(env_choice("BRAID_BACKEND", {"auto", "cuda", "host"}, &choice));
  out->device = probe_device_backend();
  if (env_string("BRAID_BACKEND") == "cuda" && !out->device.usable)
    return BRAID_ERROR(ncclInvalidUsage, "BRAID_BACKEND=cuda but no usable CUDA device (or braid built without CUDA)");
  BRAID_TRY(slot_stores_mode_from_env(&out->slot_stores));
  BRAID_TRY(TuningTable::current(&out->tuning_table));
  out->braid_algo = parse_braid_algo(env_string("BRAID_ALGO"));
  out->nccl_algo_text = env_raw("NCCL_ALGO");
  BRAID_TRY(parse_nccl_algo(out->nccl_algo_text, &out->nccl_algo));
  out->nccl_proto_text = env_raw("NCCL_PROTO");
  BRAID_TRY(parse_nccl_proto(out->nccl_proto_text, &out->nccl_proto));
  out->tuner = tuner_plugin();
  // Read where reductions run (src/ops/host_kernels.cc); checked here.
  BRAID_TRY(env_choice("BRAID_REDUCE_ISA", {"auto", "baseline"}, &choice));
  return Status::ok();
}

// This rank's InitInfo.
Status describe_this_rank(const ncclComm* comm, const LocalChoices& local, const std::string& socket_address,
                          InitInfo* mine) {
  const int nranks = comm->nranks;
  mine->peer.host_hash = host_hash();
  mine->peer.machine_hash = machine_hash();
  mine->peer.pid = int32_t(getpid());
  mine->peer.pid_ns = pid_namespace();
  std::snprintf(mine->peer.socket_addr, sizeof(mine->peer.socket_addr), "%s", socket_address.c_str());
  mine->process = this_process();
  mine->gpu = local.device.usable ? local.device.gpu : 0;
  if (local.device.usable) {
    std::memcpy(mine->gpu_name, local.device.name, sizeof mine->gpu_name);
    std::memcpy(mine->gpu_bus_id, local.device.pci_bus_id, sizeof mine->gpu_bus_id);
    mine->gpu_sm = local.device.sm;
  }
  mine->tuning = {mine->peer.machine_hash, host_allreduce_rd_max_bytes(nranks), host_usable_cores()};
  ras_peer_address(comm->bootstrap->address(), &mine->ras.addr);
  mine->ras.pid = getpid();
  mine->ras.cuda_dev = local.device.usable ? local.device.device : -1;
  AgreedValues& a = mine->agreed;
  a.api_version = NCCL_VERSION_CODE;
  a.transport_mode = local.transport.agreement_code();
  a.tcp_slices = tcp_slices_from_env();
  // Both ends of a ring lay it out alike, or one's check (shm.cc) fails it alone and the other waits.
  a.shm_slots = env_int("BRAID_SHM_SLOTS");
  a.shm_slot_bytes = env_int("BRAID_SHM_SLOT_BYTES");
  a.wants_device = local.device.usable;
  a.tile_bytes = uint64_t(std::min(env_int("BRAID_SHM_SLOT_BYTES"), env_int("BRAID_SOCKET_SLOT_BYTES")));
  a.wide_tile_bytes = uint64_t(
      std::min<int64_t>(kShmSlotFragments * env_int("BRAID_SHM_SLOT_BYTES"), env_int("BRAID_SOCKET_SLOT_BYTES")));
  // A net alone (no shared memory): its own fragments, whole.
  if (local.transport.mode == "ib" || local.transport.mode == "plugin")
    a.tile_bytes = a.wide_tile_bytes = uint64_t(std::max<int64_t>(4096, env_int("BRAID_NET_SLOT_BYTES")));
  a.check_args = env_int("BRAID_CHECK") != 0 || env_raw("NCCL_CHECK_MODE") == "DEBUG_GLOBAL";
  const int64_t direct_min = env_int("BRAID_DIRECT_MIN_BYTES");
  a.direct_min_bytes = direct_min < 0 ? UINT64_MAX : uint64_t(direct_min);
  // A board needs every rank to map it: not over sockets alone.
  // Not a number: "auto" (the default, which a malformed value also means, as with env_int).
  const std::optional<int64_t> board_max = env_number("BRAID_ONESHOT_MAX_BYTES");
  if (local.transport.shm && (!board_max || *board_max > 0))
    a.board_max_bytes = board_max ? uint64_t(std::min<int64_t>(*board_max, kBoardLimitBytes)) : kBoardAutoInAgreement;
  a.braid_algo = local.braid_algo.pins_hash();
  a.schedule_files = file_schedules_hash(nranks);
  a.unpinned_collectives = unpinned_collectives(nranks, local.braid_algo);
  a.nccl_algo = nccl_algo_hash(local.nccl_algo);  // its effect: "Ring" and "ring" agree
  a.nccl_proto = local.nccl_proto.ll_excluded;  // its effect: "Simple" and "^ll" agree
  a.tuner = tuner_identity(local.tuner.get());
  a.p2p_disabled = env_nccl_int("NCCL_P2P_DISABLE").value_or(0) != 0;
  int cma = 0;
  BRAID_TRY(env_choice("BRAID_CMA", {"off", "auto", "on"}, &cma));  // CmaMode's order
  a.cma_mode = cma;
  const int64_t cma_min = env_int("BRAID_CMA_MIN_BYTES");
  a.cma_min_bytes = cma_min < 0 ? UINT64_MAX : uint64_t(cma_min);
  if (CmaMode(cma) != CmaMode::Off) mine->cma_probe = cma_probe_of_this_process();
  const ncclConfig_t& c = comm->config;
  a.rma_contexts = c.numRmaCtx == NCCL_CONFIG_UNDEF_INT ? 1 : c.numRmaCtx;
  a.rma_signals = c.numRmaSig == NCCL_CONFIG_UNDEF_INT ? 1 : c.numRmaSig;
  // NCCL_RMA_EAGER_INIT (2.31) overrides the config where it is 0 or 1;
  // NCCL ignores any other value, and so does braid.
  const std::optional<int64_t> eager = env_nccl_int("NCCL_RMA_EAGER_INIT");
  a.rma_eager = eager && (*eager == 0 || *eager == 1) ? *eager == 1 : c.rmaEagerInit == 1;
  // The most blocks of a collective launch: NCCL takes the least of maxCTAs
  // (NCCL_MAX_CTAS applied to the config already) and NCCL_MAX_NCHANNELS.
  a.cuda_max_ctas = c.maxCTAs > 0 ? c.maxCTAs : INT32_MAX;  // NCCL_CONFIG_UNDEF_INT is negative
  if (const auto channels = env_nccl_int("NCCL_MAX_NCHANNELS"); channels && *channels > 0)
    a.cuda_max_ctas = int32_t(std::min<int64_t>(a.cuda_max_ctas, *channels));
  BRAID_TRY(read_cuda_requests(*local.tuning_table, &a));
  a.straggler = straggler_code(straggler_setting(nranks));
  BRAID_TRY(env_choice("BRAID_STRAGGLAR_LANES", {"auto", "connection", "compact"}, &a.stragglar_lanes));
  BRAID_TRY(env_choice("BRAID_DETERMINISTIC", {"0", "1"}, &a.deterministic));
  a.run_diagnostics = std::strtol(env_raw("NCCL_RUN_DIAGNOSTICS").c_str(), nullptr, 0) != 0;
  a.run_ras_diagnostics = std::strtol(env_raw("NCCL_RUN_RAS_DIAGNOSTICS").c_str(), nullptr, 0) != 0;
  return Status::ok();
}

// The host paths' settings from what the ranks agreed on.
HostPathSettings host_path_settings(const ncclComm* comm, const std::vector<InitInfo>& infos, const AgreedValues& a,
                                    const LocalChoices& local, const Transport& transport) {
  const int rank = comm->rank, nranks = comm->nranks;
  const InitInfo& mine = infos[rank];
  bool remote_peer = false;
  for (const InitInfo& i : infos) remote_peer |= i.peer.host_hash != mine.peer.host_hash;
  std::vector<HostTuningReport> reports;
  for (const InitInfo& i : infos) reports.push_back(i.tuning);
  const HostTuning tuning = agree_host_tuning(reports);
  HostPathSettings s;
  s.rank = rank;
  s.nranks = nranks;
  s.pinned_collectives = ~a.unpinned_collectives & collectives_where([](Collective) { return true; });
  // A fragment must fit in every transport's slot.
  s.tile_bytes = std::min<uint64_t>(a.tile_bytes, transport.slot_bytes());
  s.wide_tile_bytes = std::min<uint64_t>(a.wide_tile_bytes, transport.slot_bytes());
  // Between hosts, narrow fragments only (every rank has a peer elsewhere, or none has).
  if (remote_peer) s.tile_bytes = s.wide_tile_bytes = std::min(s.tile_bytes, kRemoteFragmentBytes);
  // Between hosts: TCP (the socket transport) in NCCL's socket counts as
  // slices; a net in as many as it has paths (the same on every rank).
  for (int r = 0; r < nranks; ++r) {
    if (infos[r].peer.host_hash == mine.peer.host_hash) continue;
    const uint32_t slices =
        std::strcmp(transport.peer_path(r), "socket") == 0 ? uint32_t(a.tcp_slices) : transport.wire_paths(r);
    if (slices <= 1) continue;
    s.remote_slices = slices;
    s.sliced_peers.resize(nranks);
    s.sliced_peers[r] = true;
  }
  // Boards serve small calls, not where every rank must compare its
  // arguments first.  Only what every rank has alike may decide: not whether
  // this rank's communicator is nonblocking (its calls run on the boards as
  // tasks, as grouped calls do: src/exec/host/board_task.h).
  const bool boards = !remote_peer && nranks > 1 && !a.check_args;
  s.board_collectives =
      boards ? a.unpinned_collectives & (collectives_where(oneshot_serves) | collectives_where(eager_serves)) : 0;
  if (boards) s.board_max_bytes = board_limits(a.board_max_bytes, tuning.oversubscribed, nranks);
  s.direct_min_bytes = a.direct_min_bytes;
  // Single-copy paths load and store user buffers: host memory only (a
  // host-staged communicator's buffers are device memory).
  const bool host_buffers = !local.device.usable;
  s.one_process = host_buffers && nranks > 1 && std::all_of(infos.begin(), infos.end(), [&](const InitInfo& i) {
                    return one_address_space(i, mine);
                  });
  s.oversubscribed = tuning.oversubscribed;
  // The pull path, between processes of this host.
  const CmaMode cma = CmaMode(a.cma_mode);
  if (host_buffers && !remote_peer && !s.one_process && nranks > 1 && cma != CmaMode::Off) {
    s.pull_collectives = a.unpinned_collectives & collectives_where(cma == CmaMode::On ? pull_serves
                                                                    : tuning.oversubscribed ? pull_in_auto_oversubscribed
                                                                                            : pull_in_auto);
    s.pull_min_bytes = cma == CmaMode::Auto && tuning.oversubscribed
                           ? std::max(a.cma_min_bytes, kOversubscribedPullMinBytes)
                           : a.cma_min_bytes;
    s.pull_always = cma == CmaMode::On;
    s.time_slot_calls_to_all_done = cma == CmaMode::Auto && tuning.oversubscribed;
    s.can_pull = true;
    s.cma_checked = true;
    for (int r = 0; r < nranks; ++r)  // a peer of another pid namespace: its pid is not its name here
      if (r != rank && !one_address_space(infos[r], mine))
        s.can_pull = s.can_pull && watchable_pid(infos[r].peer, mine.peer) != 0 &&
                     cma_can_read(infos[r].peer.pid, infos[r].cma_probe);
    if (!s.can_pull)
      BRAID_INFO(kInit, "comm {:#x} rank {}: cannot read peers' memory (process_vm_readv); collectives keep "
                 "the shared-memory slots", comm->comm_hash, rank);
  }
  if (host_buffers && nranks > 1) {
    s.slot_stores = local.slot_stores;
    if (s.slot_stores == SlotStoresMode::Auto && tuning.oversubscribed) s.slot_stores = SlotStoresMode::Cached;
  } else {
    s.slot_stores = SlotStoresMode::Cached;
  }
  std::vector<PeerInfo> peers;
  for (const InitInfo& i : infos) peers.push_back(i.peer);
  s.cache_share = cache_share(ranks_on_host(peers, rank));
  return s;
}

// Whether every rank can load and store every peer's buffers: threads of
// one process can; processes of one host can where every one of them could
// read every peer through CMA (one more allgather, only then).
Status agree_peer_access(ncclComm* comm, HostPathSettings* s) {
  s->peer_access = s->one_process || comm->nranks == 1;  // one rank has no peer to reach
  if (s->one_process || !s->cma_checked) return Status::ok();
  std::vector<uint8_t> can(size_t(comm->nranks));
  can[size_t(comm->rank)] = s->can_pull;
  BRAID_TRY(comm->bootstrap->allgather(can.data(), 1));
  s->peer_access = std::all_of(can.begin(), can.end(), [](uint8_t c) { return c != 0; });
  return Status::ok();
}

Status make_backend(ncclComm* comm, const CommSetup& setup, const TransportContext& ctx) {
  const LocalChoices& local = setup.local;
  BackendContext b;
  b.comm = ctx;
  b.bootstrap = comm->bootstrap.get();
  b.transport = comm->transport.get();
  b.plans = comm->plans.get();
  b.stop = &comm->stop;
  b.rma_contexts = setup.agreed.rma_contexts;
  b.rma_signals = setup.agreed.rma_signals;
  b.rma_eager = setup.agreed.rma_eager != 0;
  b.max_ctas = setup.agreed.cuda_max_ctas;
  b.pinned_collectives = setup.host.pinned_collectives;
  b.ll_excluded_collectives = setup.local.nccl_proto.ll_excluded;
  b.cuda = setup.cuda.comm;
  b.cuda_calls = setup.cuda.calls;
  b.check_buffer_devices = comm->check_pointers;
  // NCCL's rmaEagerInit: one-sided RMA connects now, with every rank, where
  // the backend has it (on another it fails at the first RMA call, saying so).
  // A backend without RMA declines (every rank alike); one that has it and
  // fails has left its exchanges midway: that fails the init or resume.
  // The backend is built aside and then swapped in under backend_mutex: a
  // watchdog thread may be in ncclCommGetAsyncError during a resume.
  std::unique_ptr<Backend> made;
  auto install = [&] {  // then rmaEagerInit's connections
    {
      std::lock_guard<std::mutex> lock(comm->backend_mutex);
      comm->backend = std::move(made);
    }
    if (!b.rma_eager) return Status::ok();
    if (!comm->backend->has_rma()) {
      BRAID_WARN("rmaEagerInit (config or NCCL_RMA_EAGER_INIT) = 1: the {} backend has no one-sided RMA",
                 comm->backend->name());
      return Status::ok();
    }
    return comm->backend->rma_start();
  };
  if (!local.device.usable) {
    made = std::make_unique<HostBackend>(b, setup.host);
    return install();
  }
  // CUDA IPC reaches the ranks of one host; with a peer elsewhere, or
  // NCCL_P2P_DISABLE=1 (as NCCL then goes through host memory), the device
  // buffers go through the host transports instead.
  bool remote_peer = false;
  for (const PeerInfo& p : ctx.peers) remote_peer |= p.host_hash != ctx.peers[ctx.rank].host_hash;
  if (remote_peer || setup.agreed.p2p_disabled)
    BRAID_TRY(make_cuda_staged_backend(b, local.device.device, setup.host, &made));
  else BRAID_TRY(make_cuda_backend(b, local.device.device, &made));
  comm->cuda_device = local.device.device;
  return install();
}

// BRAID_STRAGGLAR_LANES as agreed (auto, connection, compact) for this
// backend: auto is compact where lanes are thread blocks of one GPU launch.
StragglarLanes stragglar_lanes(int32_t agreed, const std::string& backend) {
  if (agreed == 0) return backend == "cuda" ? StragglarLanes::Compact : StragglarLanes::PerConnection;
  return agreed == 2 ? StragglarLanes::Compact : StragglarLanes::PerConnection;
}

Deadline init_deadline() { return Deadline::after(std::chrono::milliseconds(env_int("BRAID_TIMEOUT") * 1000)); }

// For tests, a rank whose init fails, or stalls until aborted (as one stuck
// in its device's setup), between its exchanges.
Status init_test_hooks(const ncclComm* comm) {
  if (env_int("BRAID_TEST_FAIL_INIT_RANK") == comm->rank)
    return BRAID_ERROR(ncclInternalError, "BRAID_TEST_FAIL_INIT_RANK={}: this rank's init fails between its exchanges",
                       comm->rank);
  if (env_int("BRAID_TEST_STALL_INIT_RANK") == comm->rank) {
    for (Deadline until = init_deadline(); !comm->stop.load() && !until.expired();)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return BRAID_ERROR(ncclInternalError, "BRAID_TEST_STALL_INIT_RANK={}: this rank's init stalled until {}",
                       comm->rank, comm->stop.load() ? "aborted" : "BRAID_TIMEOUT");
  }
  return Status::ok();
}

// Everything after the bootstrap.
Status comm_setup(ncclComm* comm) {
  const int rank = comm->rank, nranks = comm->nranks;
  comm->comm_hash = comm->bootstrap->comm_hash();
  auto setup = std::make_unique<CommSetup>();
  LocalChoices& local = setup->local;
  std::unique_ptr<SocketListener> listener;
  std::string address;
  std::vector<InitInfo> infos(nranks);
  // A failure here travels in the first exchange, so every rank fails with
  // it at once: returning before it would leave the next rank of the ring
  // waiting until BRAID_TIMEOUT for a connection this one never makes.
  Status prepared = read_local_choices(comm, &local);
  if (prepared.is_ok() && policy_may_use_sockets(local.transport))
    prepared = socket_listen(comm->bootstrap->address(), &listener, &address);
  if (prepared.is_ok()) prepared = describe_this_rank(comm, local, address, &infos[rank]);
  infos[rank].failed = !prepared.is_ok();
  Status gathered = comm->bootstrap->allgather(infos.data(), sizeof(InitInfo));
  BRAID_TRY(std::move(prepared));  // this rank's own error first
  BRAID_TRY(std::move(gathered));
  for (int r = 0; r < nranks; ++r)
    if (infos[r].failed)
      return BRAID_ERROR(ncclRemoteError, "rank {}'s init failed before its first exchange (its error says why)", r);
  // From here on RAS queries see this communicator (as INIT until it is ready).
  std::vector<RasRank> ras_ranks;
  for (const InitInfo& i : infos) ras_ranks.push_back(i.ras);
  ras_comm_added(comm, ras_ranks, infos[0].peer.host_hash, uint64_t(infos[0].peer.pid),
                 local.device.usable ? std::string(local.device.name, strnlen(local.device.name, 64)) : "");
  std::vector<AgreedValues> values;
  for (const InitInfo& i : infos) values.push_back(i.agreed);
  AgreedValues agreed;
  BRAID_TRY(fold_agreed(values, &agreed));
  BRAID_TRY(check_ranks_per_gpu(infos));
  BRAID_TRY(init_test_hooks(comm));
  comm->check_args = agreed.check_args != 0;
  const std::string check_mode = env_raw("NCCL_CHECK_MODE");
  comm->check_pointers = check_mode == "DEBUG_LOCAL" || check_mode == "DEBUG_GLOBAL" ||
                         env_raw("NCCL_CHECK_POINTERS") == "1";

  TransportContext ctx;
  ctx.comm_hash = comm->comm_hash;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.policy = local.transport;
  ctx.traffic_class = comm->config.trafficClass == NCCL_CONFIG_UNDEF_INT ? -1 : comm->config.trafficClass;
  if (local.device.usable) ctx.gpu_pci_bus_id = local.device.pci_bus_id;
  for (const InitInfo& i : infos) ctx.peers.push_back(i.peer);
  comm->peers = ctx.peers;
  std::vector<TopoDumpRank> topo;
  for (const InitInfo& i : infos)
    topo.push_back({i.peer.host_hash, std::string(i.gpu_bus_id, strnlen(i.gpu_bus_id, sizeof i.gpu_bus_id)), i.gpu_sm});
  dump_topology_if_asked(rank, topo);
  BRAID_TRY(PeerProcesses::create(ctx, *comm->bootstrap, &ctx.processes));
  BRAID_TRY(make_policy_transport(ctx, comm->bootstrap.get(), std::move(listener), &comm->transport));
  comm->plans = std::make_unique<PlanCache>();
  std::vector<HostTuningReport> reports;
  for (const InitInfo& i : infos) reports.push_back(i.tuning);
  comm->plans->set_tuning(agree_host_tuning(reports));
  setup->agreed = agreed;
  if (local.device.usable) {
    std::vector<uint64_t> gpus;
    std::vector<std::string> names;
    for (const InitInfo& i : infos) {
      gpus.push_back(i.gpu);
      names.emplace_back(i.gpu_name, strnlen(i.gpu_name, sizeof i.gpu_name));
    }
    setup->cuda = resolve_cuda_settings(local.tuning_table, agreed, gpus, names);
  }
  setup->host = host_path_settings(comm, infos, agreed, local, *comm->transport);
  BRAID_TRY(agree_peer_access(comm, &setup->host));
  setup->ctx = ctx;
  const HostPathSettings& host = setup->host;
  // Before the backend, which may set up StragglAR's tracking.
  comm->plans->set_rank_order(agreed.deterministic != 0);
  comm->plans->set_straggler_setting(straggler_of_code(agreed.straggler));
  comm->plans->set_nccl_algo(local.nccl_algo);
  if (!local.braid_algo.problems.empty()) {
    static std::once_flag said;  // once per process: every communicator reads the same variable
    std::call_once(said, [&] {
      std::string problems;
      for (const std::string& p : local.braid_algo.problems) problems += (problems.empty() ? "" : "; ") + p;
      BRAID_WARN("BRAID_ALGO={}: ignored {}", env_string("BRAID_ALGO"), problems);
    });
  }
  if (!local.nccl_algo.unserved.empty()) {
    static std::once_flag said;  // once per process: every communicator reads the same variable
    std::call_once(said, [&] {
      BRAID_WARN("NCCL_ALGO={}: braid has none of the algorithms it lists for {}: those keep braid's own choice "
                 "(BRAID_ALGO names braid's algorithms)", local.nccl_algo_text, local.nccl_algo.unserved);
    });
  }
  if (!local.nccl_proto.unserved.empty()) {
    static std::once_flag said;
    std::call_once(said, [&] {
      BRAID_WARN("NCCL_PROTO={}: braid has none of the protocols it lists for {} (braid's are LL and Simple): those "
                 "keep braid's own choice", local.nccl_proto_text, local.nccl_proto.unserved);
    });
  }
  BRAID_TRY(make_backend(comm, *setup, ctx));
  comm->setup = std::move(setup);
  // Schedule files needing deeper connections than the backend's are not used.
  comm->plans->set_slots(comm->backend->connection_slots());
  comm->plans->set_stragglar_lanes(stragglar_lanes(agreed.stragglar_lanes, comm->backend->name()));
  comm->plans->set_peer_access(comm->backend->runs_one_sided());
  if (agreed.run_diagnostics || agreed.run_ras_diagnostics) BRAID_TRY(run_init_diagnostics(comm));
  BRAID_TRY(tuner_comm_init(comm, local.tuner));
  BRAID_INFO(kInit, "comm {:#x} rank {}/{} ready: backend {}, transport {} ({}), fragment {} bytes ({} for large chunks)",
             comm->comm_hash, rank, nranks, comm->backend->name(), local.transport.mode, comm->transport->name(),
             host.tile_bytes, host.wide_tile_bytes);
  return Status::ok();
}

// Every rank's init succeeds or none does.  Ranks may make no exchange
// after the step where one fails (threads of one process pass each other
// nothing), and would come out with a communicator whose peer has none: a
// barrier ends every init.  A rank that fails does not join it, nor any
// exchange after its failure, which its peers could take for the one they
// wait in: its bootstrap is broken instead (group.cc), which ends their
// waits at once.
Status agreed_setup(ncclComm* comm) {
  // Either an abort sees bootstrap_up and aborts the bootstrap, or this sees
  // its stop (both sequentially consistent).
  comm->bootstrap_up.store(true);
  if (comm->stop.load()) comm->bootstrap->abort();
  BRAID_TRY(comm_setup(comm));
  BRAID_TRY(std::move(comm->bootstrap->barrier()).context("communicator init"));
  // After the last step that can fail (a failed init is freed, never
  // finalized), before calls may read it.
  profiler_comm_init(comm);
  comm->ready.store(true, std::memory_order_release);
  return Status::ok();
}

}  // namespace

Status comm_init(ncclComm* comm, const ncclUniqueId& id) {
  BRAID_TRY(Bootstrap::connect(id, comm->rank, comm->nranks, init_deadline(), &comm->bootstrap, &comm->stop));
  return agreed_setup(comm);
}

Status comm_init_scalable(ncclComm* comm, const std::vector<ncclUniqueId>& ids) {
  BRAID_TRY(
      Bootstrap::connect_scalable(ids, comm->rank, comm->nranks, init_deadline(), &comm->bootstrap, &comm->stop));
  return agreed_setup(comm);
}

Status comm_release_buffers(ncclComm* comm) {
  // One allgather is the barrier and the check: a signal that arrived and
  // was never waited for would be lost with the connections.
  std::vector<uint64_t> pending(comm->nranks);
  pending[comm->rank] = comm->backend->rma_signals_pending();
  BRAID_TRY(std::move(comm->bootstrap->allgather(pending.data(), sizeof(uint64_t))).context("ncclCommSuspend"));
  for (int r = 0; r < comm->nranks; ++r)
    if (pending[r])
      return BRAID_ERROR(ncclInvalidUsage, "ncclCommSuspend: rank {} has {} one-sided signals nobody waited for; "
                         "wait for them first (they would be lost)", r, pending[r]);
  std::unique_ptr<Backend> dropped;
  {
    std::lock_guard<std::mutex> lock(comm->backend_mutex);  // a watchdog's ncclCommGetAsyncError may be polling it
    dropped = std::move(comm->backend);
  }
  dropped.reset();
  comm->transport.reset();
  return Status::ok();
}

Status comm_restore_buffers(ncclComm* comm) {
  const CommSetup& setup = *comm->setup;
  TransportContext ctx = setup.ctx;
  // New names for the new segments and sockets: the old ones may still be
  // going away on a slower peer.
  ctx.comm_hash = comm->comm_hash ^ (uint64_t(++comm->resumes) * 0x9e3779b97f4a7c15ULL);
  std::unique_ptr<SocketListener> listener;
  std::string address;
  if (policy_may_use_sockets(setup.local.transport))
    BRAID_TRY(socket_listen(comm->bootstrap->address(), &listener, &address));
  std::vector<PeerInfo> peers(comm->nranks);
  std::snprintf(peers[comm->rank].socket_addr, sizeof(peers[comm->rank].socket_addr), "%s", address.c_str());
  BRAID_TRY(std::move(comm->bootstrap->allgather(peers.data(), sizeof(PeerInfo))).context("ncclCommResume"));
  for (int r = 0; r < comm->nranks; ++r)
    std::memcpy(ctx.peers[r].socket_addr, peers[r].socket_addr, sizeof(ctx.peers[r].socket_addr));
  BRAID_TRY(make_policy_transport(ctx, comm->bootstrap.get(), std::move(listener), &comm->transport));
  BRAID_TRY(make_backend(comm, setup, ctx));
  // Windows are registered collectively and dropped locally: announce again
  // those every rank still has, in registration order.
  std::vector<char> alive(size_t(comm->nranks) * comm->windows_registered, 1);
  std::vector<char> mine(comm->windows_registered, 0);
  for (const auto& [handle, w] : comm->windows) mine[w->seq] = 1;
  std::copy(mine.begin(), mine.end(), alive.begin() + ptrdiff_t(comm->rank * comm->windows_registered));
  if (comm->windows_registered)
    BRAID_TRY(std::move(comm->bootstrap->allgather(alive.data(), comm->windows_registered)).context("ncclCommResume"));
  if (env_int("BRAID_TEST_FAIL_RESUME_RANK") == comm->rank)
    return BRAID_ERROR(ncclSystemError, "BRAID_TEST_FAIL_RESUME_RANK={}: this rank's resume fails as it connects "
                       "its windows again", comm->rank);
  std::vector<const Window*> windows;
  for (const auto& [handle, w] : comm->windows) windows.push_back(w.get());
  std::sort(windows.begin(), windows.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
  for (const Window* w : windows) {
    bool everywhere = true;
    for (int r = 0; r < comm->nranks; ++r) everywhere &= alive[size_t(r) * comm->windows_registered + w->seq] != 0;
    if (everywhere) BRAID_TRY(comm->backend->window_registered(w->info));
  }
  BRAID_INFO(kInit, "comm {:#x} rank {}/{} resumed: backend {}, {} windows", comm->comm_hash, comm->rank,
             comm->nranks, comm->backend->name(), windows.size());
  return Status::ok();
}

MemoryHeld comm_memory(const ncclComm* comm) {
  MemoryHeld m;
  if (comm->backend) m = comm->backend->memory_held();
  if (comm->transport) m.releasable += comm->transport->bytes_held();
  if (comm->plans) m.persistent += comm->plans->bytes_held();
  return m;
}

}  // namespace braid

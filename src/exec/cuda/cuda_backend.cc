// The CUDA backend of a communicator: FIFO arena, CUDA IPC peer mapping,
// device plans, launches and error reporting (kernels in kernels.cu).
//
// Memory: each rank owns one arena holding the receive FIFOs of every
// (sender, channel) pair; at init the ranks exchange arena handles through
// the bootstrap (CUDA IPC across processes, the raw pointer between threads
// of one process, where IPC refuses to open its own handle).  The p2p
// channel follows the collective channels.  Ranks may share one GPU: there is
// no one-rank-per-device rule, unlike NCCL.
//
// Small AllReduce, ReduceScatter, AllGather and AlltoAll (a rank moving up
// to BRAID_CUDA_LL_MAX_BYTES, agreed) skip schedules and FIFOs: one block
// runs the LL protocol (src/ops/ll_oneshot.h) over an LL region at the end
// of every rank's arena, where peers store lines.
//
// A communicator's calls run in issue order across streams, as NCCL's do
// (call_order.h); what the kernels' error words say, and their abort flag,
// are src/exec/cuda_kernel_errors.h's.
//
// A plan (the schedule flattened into device records with its FIFOs
// resolved) is built once per schedule and kept: launches then only pass
// arguments by value, which keeps them capturable in CUDA graphs.  The only
// per-call stream work besides the kernel is a memset of the lane counters
// (and BRAID_STRAGGLER=auto's stamps, cuda_straggler.h).
//
// Ranks wait for each other inside their kernels, so two rules hold for
// everything a call does (measured on an H200: perf/results/cuda_h200):
// - nothing may order this rank's launch behind other streams' work, as a
//   peer's kernel already running may be waiting for it: no cudaMalloc,
//   cudaMemset or synchronous cudaMemcpy after init, only stream-ordered
//   work from this rank's own memory pool (stream_buffers.h, plan_for);
// - the launches of the ranks on one device must fit on it together: a
//   launch's blocks stay within the device's share (src/exec/device_share.h).
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <mutex>

#include "braid/chunking.h"
#include "src/ops/datatype.h"
#include "src/ops/reduction.h"
#include "src/base/env.h"
#include "src/base/host_identity.h"
#include "src/base/log.h"
#include "src/exec/cuda/call_order.h"
#include "src/exec/cuda/cuda_device_api_memory.h"
#include "src/exec/cuda/cuda_rma.h"
#include "src/exec/cuda/cuda_straggler.h"
#include "src/exec/cuda/peer_arena.h"
#include "src/exec/cuda_kernel_errors.h"
#include "src/exec/cuda/launch.h"
#include "src/exec/cuda/stream_buffers.h"
#include "src/exec/cuda_plan_image.h"
#include "src/exec/cuda_thread_ranks.h"
#include "src/exec/cuda/braid_streams.h"
#include "src/exec/cuda/cuda_try.h"
#include "src/bootstrap/bootstrap.h"
#include "src/exec/cuda_arena.h"
#include "src/exec/device_backend.h"
#include "src/exec/device_share.h"
#include "src/exec/forward.h"
#include "src/exec/group_rounds.h"
#include "src/plan/alg_selection.h"
#include "src/plan/planner.h"
#include "src/transport/peer_processes.h"

namespace braid {

// The CUDA backends' part of a group (their GroupRunner).
Status run_cuda_group(std::span<CommWork> work);

namespace {

using cuda::DevFifo;
using cuda::DevicePlan;

constexpr uint64_t kCtrlBytes = CudaArenaLayout::kCtrlBytes;
constexpr uint64_t kLLCounterBytes = CudaArenaLayout::kLLCounterBytes;

struct ArenaInfo {
  cudaIpcMemHandle_t handle;
  uint64_t address = 0;  // in the owner's address space
  uint64_t process = 0;  // this_process(): with the pid, which ranks share an address space
  int32_t pid = 0;
  int32_t device = -1;  // the owner's device ordinal (meaningful to threads of its process)
  DeviceShare share;    // see launch_block_budget
};

bool same_process(const ArenaInfo& a, const ArenaInfo& b) { return a.pid == b.pid && a.process == b.process; }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendContext& ctx) : ctx_(ctx) {}
  ~CudaBackend() override { release(); }

  const char* name() const override { return "cuda"; }
  GroupRunner group_runner() const override { return run_cuda_group; }
  DeviceApiMemory& device_api_memory() override { return cuda_device_api_memory(device_); }

  Status init(int device) {
    device_ = device;
    CUDA_TRY(cudaSetDevice(device));
    CUDA_TRY(cuda::preload_kernels());
    // Agreed at init (src/runtime/cuda_settings.h), ranges checked there.
    if (!ctx_.cuda_calls) return BRAID_ERROR(ncclInternalError, "cuda backend made without its tuning");
    const CommTuning& t = ctx_.cuda;
    channels_ = t.channels;
    nslots_ = t.slots;
    slot_bytes_ = t.slot_bytes;
    ctx_.plans->set_device_tuning(ctx_.cuda_calls);
    timeout_ns_ = uint64_t(env_int("BRAID_TIMEOUT")) * 1000000000ull;
    const int n = ctx_.comm.nranks;
    // FIFOs, the LL region, one-sided signals, this rank's LL call counter
    const CudaArenaLayout arena(n, t, uint64_t(ctx_.rma_contexts) * uint64_t(ctx_.rma_signals));
    conn_stride_ = arena.conn_stride;
    ll_max_bytes_ = t.ll_max_bytes;
    ll_offset_ = arena.ll_offset;
    arena_bytes_ = arena.bytes;
    CUDA_TRY(cudaMalloc(&arena_, arena_bytes_));
    // Zeroed before any peer can know where it is (its first lines must not land before the zeros), on
    // braid's own stream: other communicators' kernels may be waiting for ranks still in this init.
    BRAID_TRY(on_own_stream([&](cudaStream_t s) { return cudaMemsetAsync(arena_, 0, arena_bytes_, s); }));
    BRAID_TRY(order_.init());
    const size_t words = cuda::KernelErrors::words(n);
    CUDA_TRY(cudaHostAlloc(&flags_host_, words * sizeof(int), cudaHostAllocMapped));
    std::fill_n(flags_host_, words, 0);
    int* flags_device = nullptr;
    CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flags_device), flags_host_, 0));
    errors_.init(flags_host_, flags_device, n, ctx_.comm.comm_hash, ctx_.comm.rank, timeout_ns_ / 1000000000ull);
    // This rank's own pool for what calls allocate (stream_buffers.h),
    // keeping what it frees cached instead of handing it back at each sync.
    cudaMemPoolProps pool_props{};
    pool_props.allocType = cudaMemAllocationTypePinned;
    pool_props.location.type = cudaMemLocationTypeDevice;
    pool_props.location.id = device;
    CUDA_TRY(cudaMemPoolCreate(&pool_, &pool_props));
    uint64_t keep = UINT64_MAX;
    CUDA_TRY(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    buffers_.set_pool(pool_);
    BRAID_TRY(straggler_.init(ctx_));

    std::vector<ArenaInfo> infos(n);
    ArenaInfo& mine = infos[ctx_.comm.rank];
    CUDA_TRY(cudaIpcGetMemHandle(&mine.handle, arena_));
    mine.address = reinterpret_cast<uintptr_t>(arena_);
    mine.pid = getpid();
    mine.process = this_process();
    mine.device = device;
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    mine.share.machine_hash = machine_hash();
    static_assert(sizeof prop.uuid == sizeof mine.share.device_id);
    std::memcpy(mine.share.device_id, &prop.uuid, sizeof prop.uuid);
    CUDA_TRY(cuda::resident_collective_blocks(device, &mine.share.resident_blocks));
    BRAID_TRY(ctx_.bootstrap->allgather(infos.data(), sizeof(ArenaInfo)));
    std::vector<DeviceShare> shares;
    for (const ArenaInfo& a : infos) shares.push_back(a.share);
    block_budget_ = launch_block_budget(shares);
    for (const ArenaInfo& a : infos)
      threads_on_device_ += same_process(a, mine) && same_device(a.share, mine.share);
    cuda::warn_unless_thread_ranks_settled(device, threads_on_device_);
    peer_arena_.assign(n, nullptr);
    opened_.assign(n, false);
    for (int r = 0; r < n; ++r) {
      const ArenaInfo& p = infos[r];
      if (p.share.machine_hash != mine.share.machine_hash)
        return BRAID_ERROR(ncclInvalidUsage,
                           "rank {} is on another machine: the CUDA backend connects ranks of one machine only so "
                           "far (set BRAID_BACKEND=host to use sockets with host buffers)",
                           r);
      if (same_process(p, mine)) {
        if (p.device != device) BRAID_TRY(cuda::enable_peer_access(device, p.device));
        peer_arena_[r] = reinterpret_cast<char*>(p.address);
      } else {
        void* mapped = nullptr;
        BRAID_TRY(cuda::open_peer_arena(ctx_.comm, r, p.handle, &mapped));
        peer_arena_[r] = static_cast<char*>(mapped);
        opened_[r] = true;
      }
    }
    // Other processes' exits stop the waits for them (cuda_kernel_errors.h).
    BRAID_TRY(errors_.watch_peers(PeerProcesses::of(ctx_.comm)->watchable()));
    std::vector<char*> arenas = peer_arena_;
    arenas[size_t(ctx_.comm.rank)] = static_cast<char*>(arena_);
    rma_.init({ctx_.comm.rank, n, ctx_.rma_signals, device, arena.rma_offset, arena.rma_pairs,
               std::move(arenas), errors_.device_words(), errors_.device_abort_flag(), errors_.device_exited(),
               timeout_ns_});
    if (ll_max_bytes_) {
      std::vector<LLLine*> regions(n);
      for (int r = 0; r < n; ++r)
        regions[r] = reinterpret_cast<LLLine*>((r == ctx_.comm.rank ? static_cast<char*>(arena_) : peer_arena_[r]) +
                                               ll_offset_);
      CUDA_TRY(cudaMalloc(&ll_regions_, n * sizeof(LLLine*)));
      BRAID_TRY(on_own_stream([&](cudaStream_t s) {
        return cudaMemcpyAsync(ll_regions_, regions.data(), n * sizeof(LLLine*), cudaMemcpyHostToDevice, s);
      }));
    }
    BRAID_INFO(kInit,
               "comm {:#x} rank {}/{}: cuda backend on device {}, {} channels x {} slots x {} bytes, "
               "{} blocks a launch{}, LL one-shot for messages up to {} bytes",
               ctx_.comm.comm_hash, ctx_.comm.rank, n, device, channels_, nslots_, slot_bytes_,
               std::min(block_budget_, ctx_.max_ctas),
               ctx_.max_ctas < block_budget_ ? fmt::format(" (maxCTAs {})", ctx_.max_ctas) : "", ll_max_bytes_);
    const TuningKey& key = ctx_.cuda_calls->key();
    BRAID_INFO(kInit | kTuning,
               "comm {:#x} rank {}/{}: tuning for '{}', {} rank(s) per device: channels from {}; slots from {}; "
               "slot bytes from {}; LL limit from {}",
               ctx_.comm.comm_hash, ctx_.comm.rank, n, key.device, key.per_device, describe(t.channels_from),
               describe(t.slots_from), describe(t.slot_bytes_from), describe(t.ll_max_bytes_from));
    return Status::ok();
  }

  int connection_slots() const override { return int(nslots_); }
  // One-sided schedules between threads of one process on one device: one
  // context, so every rank's device addresses (user buffers of any
  // allocator, scratch from the pool) are valid in every kernel.  Across
  // devices, pool memory and cudaMallocAsync or VMM user buffers would need
  // cudaMemPoolSetAccess / cuMemSetAccess for each peer device; processes,
  // every call's user buffers mapped through CUDA IPC: neither done yet.
  bool runs_one_sided() const override { return one_device(); }
  bool takes_ll_path(const CollectiveCall& c) const override {
    LLCollective which;
    return ll_serves(c, -1, ctx_.cuda_calls->call(c.collective, c.count * datatype_size(c.type)), &which);
  }

  // Work enqueued on `stream` in the communicator's call order:
  // enqueue(capturing), capturing saying whether the stream is captured.
  template <class Enqueue>
  Status ordered(cudaStream_t stream, Enqueue&& enqueue) {
    CUDA_TRY(cudaSetDevice(device_));
    warn_if_legacy_stream(stream);
    bool capturing = false;
    BRAID_TRY(order_.begin(stream, &capturing));
    // The order is kept also where the call failed part way: what it did
    // enqueue (a plan's upload, a kernel) stays ahead of the next call.
    Status enqueued = enqueue(capturing);
    Status ended = order_.end(stream, capturing);
    BRAID_TRY(std::move(enqueued));
    return ended;
  }

  // Whether `call` goes to the real NCCL (BRAID_FORWARD).
  bool forwarded(const CollectiveCall& call) const {
    if (!forward_wanted(call.collective)) return false;
    // NVIDIA's NCCL picks its own reduction order: BRAID_DETERMINISTIC keeps reductions here.
    if (!ctx_.plans->rank_order() || !collective_reduces(call.collective)) return true;
    static std::once_flag said;
    std::call_once(said, [] { BRAID_WARN("BRAID_DETERMINISTIC: reductions are not forwarded (BRAID_FORWARD)"); });
    return false;
  }

  // Enqueues one collective on call.stream: its schedule's plan, or the
  // real NCCL where BRAID_FORWARD asks for it.
  Status collective(const CollectiveCall& call) {
    if (forwarded(call)) return forwarder_.run(call, ctx_);
    return ordered(call.stream, [&](bool capturing) { return enqueue_collective(call, capturing); });
  }
  // The arrival collective() would make for `call` (BRAID_STRAGGLER=eager), made now.
  Status arrive_ahead(const CollectiveCall& call) {
    if (forwarded(call)) return Status::ok();
    return straggler_.arrive_ahead(call);
  }
  Status enqueue_collective(const CollectiveCall& call, bool capturing) {
    if (capturing) buffers_.captured();  // what it uses must outlive the graph
    int straggler = -1;
    BRAID_TRY(straggler_.begin(call, capturing, &straggler));
    Status launched = launch_collective(call, straggler, capturing);
    // A tracked call is completed on the board even when its launch failed:
    // every rank's decision four calls later waits for this entry.
    Status stamped = straggler_.end(call.stream);
    BRAID_TRY(std::move(launched));
    BRAID_TRY(std::move(stamped));
    // ncclCollConfig_t::launchCompletionEvent, recorded behind the kernels
    // (Avg's divide included) in stream order: it completes when they do,
    // never before the launch has completed.  Later than NCCL's (CUDA's
    // launch-completion attribute), so work waiting on it never overlaps the
    // collective.
    if (call.launch_event) CUDA_TRY(cudaEventRecord(call.launch_event, call.stream));
    return Status::ok();
  }

  // The call's kernels: PreMulSum's scaling, the LL protocol or the
  // schedule, Avg's divide.
  Status launch_collective(const CollectiveCall& call, int straggler, bool capturing) {
    CollectiveCall c = call;
    BRAID_TRY(stage_premul(&c));
    const CallTuning tuned = ctx_.cuda_calls->call(c.collective, c.count * datatype_size(c.type));
    LLCollective ll;
    if (ll_serves(c, straggler, tuned, &ll)) BRAID_TRY(launch_ll(c, ll, capturing));
    else BRAID_TRY(launch_schedule(c, straggler, tuned, capturing));
    if (c.reduction.divisor > 0 && has_output(c, ctx_.comm.rank))
      CUDA_TRY(cuda::launch_divide(c.recvbuff, output_shape(c.collective, ctx_.comm.nranks, c.count, 1).elems(), c.type,
                                   c.reduction.divisor, c.stream));
    return Status::ok();
  }

  // A group's streams (src/exec/cuda/call_order.h), the first launch's
  // first: collectives run first, then the send/recv batch on its first
  // call's stream.  Every communicator of a group is checked before any of
  // them launches, so that all ranks refuse alike.
  Status group_streams(const CommWork& w, std::vector<cudaStream_t>* streams) {
    streams->clear();
    auto add = [&](cudaStream_t s) {
      if (std::find(streams->begin(), streams->end(), s) == streams->end()) streams->push_back(s);
    };
    for (const CollectiveCall& c : w.collectives)
      if (!forward_wanted(c.collective)) add(c.stream);
    for (const P2PCall& p : w.p2ps) add(p.stream);
    if (streams->size() < 2) return Status::ok();
    CUDA_TRY(cudaSetDevice(device_));
    for (cudaStream_t s : *streams) warn_if_legacy_stream(s);
    return cuda::CallOrder::check_group(*streams);
  }
  Status join_streams_before(const std::vector<cudaStream_t>& streams) {
    if (streams.size() < 2) return Status::ok();
    CUDA_TRY(cudaSetDevice(device_));
    return order_.join_before(streams);
  }
  Status join_streams_after(const std::vector<cudaStream_t>& streams) { return order_.join_after(streams); }

  // The LL protocol serves a small AllReduce, ReduceScatter, AllGather or
  // AlltoAll that no fixed schedule, call selection naming algorithms,
  // straggler or NCCL_PROTO claims (the same answer on every rank: all
  // inputs are agreed or the call's own).  Small: what a rank sends to every peer together (its message,
  // message_bytes) within the LL limit, so that a block is within each
  // region's capacity, and the tuning table does not send the call's size
  // to the schedules.
  bool ll_serves(const CollectiveCall& c, int straggler, const CallTuning& tuned, LLCollective* which) const {
    return ll_regions_ && ll_collective_of(c.collective, which) &&
           ll_path(c.collective, ctx_.comm.nranks, c.count * datatype_size(c.type), ll_max_bytes_, tuned.path) &&
           straggler < 0 && admits_fast_paths(c.algorithms) && !(ctx_.pinned_collectives >> int(c.collective) & 1) &&
           !(ctx_.ll_excluded_collectives >> int(c.collective) & 1);
  }

  Status launch_ll(const CollectiveCall& c, LLCollective which, bool capturing) {
    BRAID_INFO(kColl, "{}(ll_oneshot) count={} {} rank {}/{} on cuda", to_string(c.collective), c.count,
               datatype_name(c.type), ctx_.comm.rank, ctx_.comm.nranks);
    BRAID_TRY(check_buffers(c.sendbuff, c.recvbuff, capturing));
    cuda::LLLaunch L;
    LLArgs& a = L.args;
    a.collective = which;
    a.input = static_cast<const char*>(c.sendbuff);
    a.output = static_cast<char*>(c.recvbuff);
    a.bytes = c.count * datatype_size(c.type);
    a.max_bytes = ll_max_bytes_;
    a.regions = ll_regions_;
    a.rank = ctx_.comm.rank;
    a.nranks = ctx_.comm.nranks;
    a.type = c.type;
    reduce_kind_of(c.reduction.fold, &a.op);  // any kind for the collectives that do not reduce
    L.seq = reinterpret_cast<uint64_t*>(static_cast<char*>(arena_) + arena_bytes_ - kLLCounterBytes);
    L.error = errors_.device_words();
    L.abort_flag = errors_.device_abort_flag();
    L.exited = errors_.device_exited();
    L.timeout_ns = timeout_ns_;
    CUDA_TRY(cuda::launch_ll(L, c.stream));
    return Status::ok();
  }

  // Pointer queries are not stream work; skip them while a graph is being
  // captured (the same buffers were checked by the uncaptured first call).
  // The device a call's device buffers must be on: this one under
  // NCCL_CHECK_MODE's local check, else any (-1).
  int required_device() const { return ctx_.check_buffer_devices ? device_ : -1; }
  Status check_buffers(const void* input, const void* output, bool capturing) {
    if (capturing) return Status::ok();
    if (input) BRAID_TRY(check_device_memory(input, "sendbuff", required_device()));
    if (output) BRAID_TRY(check_device_memory(output, "recvbuff", required_device()));
    return Status::ok();
  }

  // The call's schedule, as a DevicePlan run by one block per (lane, slice).
  Status launch_schedule(const CollectiveCall& c, int straggler, const CallTuning& tuned, bool capturing) {
    std::shared_ptr<const Schedule> planned;
    BRAID_TRY(ctx_.plans->schedule_for(c.collective, ctx_.comm.nranks, c.root, c.count * datatype_size(c.type),
                                       &planned, straggler, placement_of(c, ctx_.comm.rank, ctx_.comm.nranks),
                                       c.algorithms));
    BRAID_INFO(kColl, "{}({}) count={} {} rank {}/{} on cuda", to_string(c.collective), planned->name, c.count,
               datatype_name(c.type), ctx_.comm.rank, ctx_.comm.nranks);
    const Schedule& schedule = *planned;
    if (schedule.slots > int(nslots_))  // the planner skips such files; never deadlock on one
      return BRAID_ERROR(ncclInvalidUsage, "schedule {} needs {} slots per connection; BRAID_CUDA_SLOTS is {}",
                         schedule.name, schedule.slots, nslots_);
    cudaStream_t stream = c.stream;
    const RankProgram& prog = schedule.ranks.at(ctx_.comm.rank);
    const size_t esize = datatype_size(c.type);
    cuda::CollectiveLaunch L;
    StepBuffers& B = L.buffers;
    B.input_shape = input_shape(c.collective, ctx_.comm.nranks, c.count, prog.input_chunks);
    B.output_shape = output_shape(c.collective, ctx_.comm.nranks, c.count, prog.output_chunks);
    const uint64_t full_capacity = scratch_chunk_capacity(B.input_shape, B.output_shape);
    B.input = has_input(c, ctx_.comm.rank) ? static_cast<const char*>(c.sendbuff) : nullptr;
    B.output = has_output(c, ctx_.comm.rank) ? static_cast<char*>(c.recvbuff) : nullptr;
    BRAID_TRY(check_buffers(B.input, B.output, capturing));

    const DevicePlan* plan = nullptr;
    BRAID_TRY(plan_for(schedule, stream, capturing, &plan));
    // Slices: enough bytes per block to be worth a block each (the tuning
    // table's slice_bytes; a function of the call alone, so every rank
    // picks the same number).
    const uint64_t slices = std::clamp<uint64_t>(c.count * esize / tuned.slice_bytes, 1, plan->max_slices);
    B.scratch_stride = uint64_t(prog.scratch_chunks) * full_capacity;
    BRAID_TRY(buffers_.grow(&buffers_.scratch, B.scratch_stride * slices * esize, stream, "scratch"));
    BRAID_TRY(buffers_.grow(&buffers_.lane_done, plan->nlanes * slices * sizeof(uint32_t), stream, "lane counter"));
    L.fifos_per_slice = plan->fifos_per_slice;
    B.scratch = buffers_.scratch.as<char>();
    L.lanes = plan->lanes;
    L.ops = plan->ops;
    L.deps = plan->deps;
    L.fifos = plan->fifos;
    B.esize = uint32_t(esize);
    const uint64_t tile_bytes = framed_tile_bytes(slot_bytes_, slot_bytes_, plan->max_frame, B.esize);
    if (tile_bytes == 0)
      return BRAID_ERROR(ncclInvalidUsage, "schedule {}: a message of {} chunks does not fit a {}-byte slot "
                         "(BRAID_CUDA_SLOT_BYTES)", schedule.name, plan->max_frame, slot_bytes_);
    B.tile_elems = std::max<uint64_t>(1, tile_bytes / esize);
    if (!plan->chunk_messages) B.tile_elems = std::max(B.tile_elems, whole_call_tile_elems(B, full_capacity));
    L.nslots = nslots_;
    L.slot_bytes = slot_bytes_;
    L.type = c.type;
    reduce_kind_of(c.reduction.fold, &L.kind);  // Sum, Prod, Max or Min: always a kind
    L.lane_done = buffers_.lane_done.as<uint32_t>();
    L.error = errors_.device_words();
    L.abort_flag = errors_.device_abort_flag();
    L.exited = errors_.device_exited();
    L.timeout_ns = timeout_ns_;
    if (plan->nlanes == 0) return Status::ok();
    if (plan->signals) {
      const size_t table = slices * ctx_.comm.nranks * sizeof(PeerBuffers);
      BRAID_TRY(buffers_.grow(&buffers_.peers, table, stream, "peer table"));
      CUDA_TRY(cudaMemsetAsync(buffers_.peers.ptr, 0, table, stream));  // a stale entry must never pass for this call's
      L.self = peer_buffers_of(B, uint64_t(this_pid()), this_process());
      L.peers = buffers_.peers.as<PeerBuffers>();
      L.nranks = uint32_t(ctx_.comm.nranks);
    }
    CUDA_TRY(cudaMemsetAsync(buffers_.lane_done.ptr, 0, plan->nlanes * slices * sizeof(uint32_t), stream));
    CUDA_TRY(cuda::launch_collective(L, plan->nlanes, uint32_t(slices), stream));
    return Status::ok();
  }

  // Enqueues one group's send/recv batch (on the first call's stream).
  Status p2p(const std::vector<P2PCall>& calls) {
    if (calls.empty()) return Status::ok();
    return ordered(calls[0].stream, [&](bool capturing) { return enqueue_p2p(calls, capturing); });
  }
  Status enqueue_p2p(const std::vector<P2PCall>& calls, bool capturing) {
    cudaStream_t stream = calls[0].stream;
    if (capturing) buffers_.captured();
    // One block per (peer, direction), ops in call order: same-connection
    // messages must stay in order, as NCCL matches them.
    std::map<std::pair<int, bool>, std::vector<const P2PCall*>> by_link;
    for (const P2PCall& p : calls) {
      BRAID_TRY(check_device_memory(p.buffer, p.is_send ? "sendbuff" : "recvbuff", required_device()));
      by_link[{p.peer, p.is_send}].push_back(&p);
    }
    // A send whose bytes a receive of the same batch overwrites (sendrecv in
    // place) is copied aside first, in stream order, as the host executor does.
    auto bytes_of = [](const P2PCall& p) { return p.count * datatype_size(p.type); };
    auto overlaps_a_recv = [&](const P2PCall& send) {
      const char* b = static_cast<const char*>(send.buffer);
      for (const P2PCall& r : calls) {
        const char* rb = static_cast<const char*>(r.buffer);
        if (!r.is_send && b < rb + bytes_of(r) && rb < b + bytes_of(send)) return true;
      }
      return false;
    };
    std::map<const P2PCall*, uint64_t> staged;  // call -> offset in the staging buffer
    uint64_t staging = 0;
    for (const P2PCall& p : calls)
      if (p.is_send && overlaps_a_recv(p)) staged[&p] = std::exchange(staging, (staging + bytes_of(p) + 255) & ~255ull);
    if (staging) {
      BRAID_TRY(buffers_.grow(&buffers_.staging, staging, stream, "staging"));
      for (auto [p, offset] : staged)
        CUDA_TRY(cudaMemcpyAsync(buffers_.staging.as<char>() + offset, p->buffer, bytes_of(*p),
                                 cudaMemcpyDeviceToDevice, stream));
    }
    std::vector<cuda::DevP2PBlock> blocks;
    std::vector<cuda::DevP2POp> ops;
    std::vector<DevFifo> fifos;
    for (auto& [link, list] : by_link) {
      auto [peer, is_send] = link;
      fifos.push_back(is_send ? fifo_to(peer, channels_) : fifo_from(peer, channels_));
      blocks.push_back({uint32_t(ops.size()), uint32_t(list.size())});
      for (const P2PCall* p : list) {
        auto it = staged.find(p);
        char* buffer = it == staged.end() ? static_cast<char*>(p->buffer) : buffers_.staging.as<char>() + it->second;
        ops.push_back({buffer, bytes_of(*p), int32_t(fifos.size() - 1), uint8_t(is_send)});
      }
    }
    // The batch's records travel in a small device buffer that is reused
    // once the stream has passed the previous batch's kernel.
    size_t bytes = blocks.size() * sizeof(blocks[0]) + ops.size() * sizeof(ops[0]) + fifos.size() * sizeof(fifos[0]);
    std::vector<char> host(bytes);
    char* cursor = host.data();
    auto put = [&](const void* src, size_t n) {
      std::memcpy(cursor, src, n);
      size_t off = size_t(cursor - host.data());
      cursor += n;
      return off;
    };
    size_t off_blocks = put(blocks.data(), blocks.size() * sizeof(blocks[0]));
    size_t off_ops = put(ops.data(), ops.size() * sizeof(ops[0]));
    size_t off_fifos = put(fifos.data(), fifos.size() * sizeof(fifos[0]));
    char* base = nullptr;
    BRAID_TRY(p2p_records(std::move(host), stream, capturing, &base));
    cuda::P2PLaunch L;
    L.blocks = reinterpret_cast<const cuda::DevP2PBlock*>(base + off_blocks);
    L.ops = reinterpret_cast<const cuda::DevP2POp*>(base + off_ops);
    L.fifos = reinterpret_cast<const DevFifo*>(base + off_fifos);
    L.nslots = nslots_;
    L.slot_bytes = slot_bytes_;
    L.error = errors_.device_words();
    L.abort_flag = errors_.device_abort_flag();
    L.exited = errors_.device_exited();
    L.timeout_ns = timeout_ns_;
    CUDA_TRY(cuda::launch_p2p(L, uint32_t(blocks.size()), stream));
    return Status::ok();
  }

  Status poll_error() override {
    BRAID_TRY(errors_.poll());
    const cudaError_t e = cudaPeekAtLastError();
    if (e == cudaSuccess || e == cudaErrorNotReady) return Status::ok();
    return Status::error(ncclUnhandledCudaError,
                         fmt::format("CUDA error on device {}: {}", device_, cudaGetErrorString(e)));
  }

  // Thread-ranks sharing a device wait for each other inside their kernels,
  // and the legacy default stream runs every kernel of the process one after
  // another: a call that needs two of them running at once then hangs until
  // BRAID_TIMEOUT.  Not an error, as calls that fit in the FIFOs complete.
  void warn_if_legacy_stream(cudaStream_t stream) {
    if (threads_on_device_ < 2 || (stream != nullptr && stream != cudaStreamLegacy)) return;
    if (legacy_stream_warned_.exchange(true)) return;
    BRAID_WARN("comm {:#x} rank {}: {} ranks of this process share device {} and this call is on the legacy default "
               "stream, which runs their kernels one at a time while they wait for each other: give each rank its "
               "own stream",
               ctx_.comm.comm_hash, ctx_.comm.rank, threads_on_device_, device_);
  }

  // One-sided calls (cuda_rma.h): every arena is mapped at init, so there
  // is nothing to start; windows are told to it for their mappings.
  Status window_registered(const WindowInfo& window) override {
    rma_.window_registered(window);
    return Status::ok();
  }
  void window_deregistered(uint64_t seq) override { rma_.window_deregistered(seq); }
  bool has_rma() const override { return true; }
  Status rma_start() override { return Status::ok(); }
  bool rma_started() const override { return true; }
  Status rma_write(const RmaCall& call) override {
    return ordered(call.stream, [&](bool) { return rma_.write(call); });
  }
  Status rma_wait(const RmaCall& call) override { return ordered(call.stream, [&](bool) { return rma_.wait(call); }); }
  uint64_t rma_signals_pending() const override { return rma_.pending(); }

  void abort() override {
    errors_.abort();
    forwarder_.abort();
  }

  // Kernels stop at their next wait; the forwarded twin goes (only
  // destroy, split and shrink follow a revoke).
  void revoke() override {
    errors_.revoke();
    forwarder_.abort();
  }
  bool quiescent() override { return order_.idle(); }

 private:
  DevFifo fifo_at(char* arena, int sender, uint32_t channel) const {
    char* base = arena + (uint64_t(sender) * (channels_ + 1) + channel) * conn_stride_;
    DevFifo f;
    f.tail = reinterpret_cast<uint64_t*>(base);
    f.head = reinterpret_cast<uint64_t*>(base + 64);
    f.lengths = reinterpret_cast<uint64_t*>(base + 128);
    f.totals = reinterpret_cast<uint64_t*>(base + 192);
    f.slots = base + kCtrlBytes;
    return f;
  }
  DevFifo fifo_to(int peer, uint32_t channel) const {
    DevFifo f = fifo_at(peer_arena_[peer], ctx_.comm.rank, channel);
    f.peer = peer;
    return f;
  }
  DevFifo fifo_from(int peer, uint32_t channel) const {
    DevFifo f = fifo_at(static_cast<char*>(arena_), peer, channel);
    f.peer = peer;
    return f;
  }

  // PreMulSum: the input scaled into a device copy (stream-ordered), then a
  // plain Sum over it, as the host path does.
  Status stage_premul(CollectiveCall* c) {
    if (!c->reduction.premul) return Status::ok();
    const PreMulSumOp& op = c->reduction.scalar;
    BRAID_TRY(check_device_memory(c->sendbuff, "sendbuff", required_device()));
    const uint64_t elems = input_blocks(c->collective, ctx_.comm.nranks) * c->count;
    BRAID_TRY(buffers_.grow(&buffers_.premul, elems * datatype_size(c->type), c->stream, "PreMulSum"));
    const void* scalar_device = op.residence == ncclScalarDevice ? op.pointer : nullptr;
    CUDA_TRY(cuda::launch_scale(buffers_.premul.ptr, c->sendbuff, elems, c->type, scalar_device, op.immediate,
                                c->stream));
    c->sendbuff = buffers_.premul.ptr;
    c->reduction.premul = false;
    return Status::ok();
  }

  Status p2p_records(std::vector<char> host, cudaStream_t stream, bool capturing, char** out) {
    BRAID_TRY(buffers_.grow(&buffers_.p2p, std::max<uint64_t>(host.size(), 4096), stream, "p2p"));
    // Stream-ordered upload: safe against the previous batch still reading.
    // (cudaMemcpyAsync from pageable memory stages the bytes before returning;
    // a captured copy reads them again at each replay, so they are kept.)
    const size_t bytes = host.size();
    const char* src = host.data();
    if (capturing) {
      captured_records_.push_back(std::move(host));
      src = captured_records_.back().data();  // the buffer moved with it
    }
    CUDA_TRY(cudaMemcpyAsync(buffers_.p2p.ptr, src, bytes, cudaMemcpyHostToDevice, stream));
    *out = buffers_.p2p.as<char>();
    return Status::ok();
  }

  Status plan_for(const Schedule& schedule, cudaStream_t stream, bool capturing, const DevicePlan** out) {
    auto it = plans_.find(&schedule);
    if (it != plans_.end()) {
      DevicePlan& plan = it->second;
      if (capturing && plan.uploaded) {  // the upload, once, before a graph that reads the plan
        BRAID_TRY(cuda::wait_outside_capture(plan.uploaded));
        cudaEventDestroy(std::exchange(plan.uploaded, nullptr));
      }
      *out = &plan;
      return Status::ok();
    }
    BRAID_TRY(cuda::refuse_allocation_in_capture(stream, "plan"));
    std::shared_ptr<const RankRecords> records;
    BRAID_TRY(ctx_.plans->records(schedule, ctx_.comm.rank, &records));
    const RankRecords& rec = *records;
    if (rec.one_sided && !one_device())  // the planner offers them only where they run (runs_one_sided)
      return BRAID_ERROR(ncclInvalidUsage, "schedule {} has one-sided ops (put, get), which the CUDA backend runs "
                         "only between ranks that are threads of one process on one device", schedule.name);
    const std::vector<LaneRecord>& lanes = rec.lanes;
    const std::vector<OpRecord>& ops = rec.ops;
    const std::vector<DepRecord>& deps = rec.deps;
    // Slice s of a lane on channel c uses connection channel s * used + c,
    // where `used` is how many channels the schedule itself uses.
    const uint32_t used = rec.channels;
    if (used > channels_)
      return BRAID_ERROR(ncclInvalidUsage, "schedule {} uses {} channels; raise BRAID_CUDA_CHANNELS (now {})",
                         schedule.name, used, channels_);
    // Slices multiply the blocks of a launch: keep the widest rank's launch
    // within the block budget, or ranks sharing a device could wait forever
    // on a peer whose blocks never became resident.
    uint32_t widest = 1;
    for (const RankProgram& rp : schedule.ranks) widest = std::max<uint32_t>(widest, uint32_t(rp.lanes.size()));
    if (int64_t(widest) > block_budget_)
      BRAID_WARN("schedule {}: {} blocks a launch, but ranks sharing a device have room for {} each: kernels may "
                 "wait on each other until BRAID_TIMEOUT",
                 schedule.name, widest, block_budget_);
    else if (int64_t(widest) > ctx_.max_ctas)
      BRAID_INFO(kTuning, "schedule {}: {} blocks a launch (one per lane of a rank), over maxCTAs {}: it runs unsliced",
                 schedule.name, widest, ctx_.max_ctas);
    const uint32_t max_slices = launch_slices(channels_, used, widest, block_budget_, ctx_.max_ctas);
    // Every slice's copy of the connection table, on its own channels.
    const size_t per_slice = rec.connections.size();
    std::vector<DevFifo> fifos(per_slice * max_slices);
    for (uint32_t slice = 0; slice < max_slices; ++slice)
      for (size_t i = 0; i < per_slice; ++i) {
        const ConnectionRecord& c = rec.connections[i];
        const uint32_t channel = slice * used + c.channel;
        fifos[slice * per_slice + i] = c.send ? fifo_to(c.peer, channel) : fifo_from(c.peer, channel);
      }
    const cuda::PlanImage image = cuda::plan_image(lanes, ops, deps, fifos);
    const std::vector<char>& host = image.bytes;
    DevicePlan plan;
    // Stream-ordered, for the reason stream_buffers.h gives (a plan is built
    // at a call's first use of a schedule, while peers may already wait in
    // their kernels), on the call's own stream, ahead of its kernel, and
    // never waited for here: a stream of braid's own, drained, could share
    // a hardware queue with a peer's, behind the peer's kernel that waits
    // for this rank (braid_streams.h), and the drain would wait until the
    // timeout.  Later calls on any stream are ordered after this one
    // (CallOrder); captured ones wait for the upload on the host, above.
    void* block = nullptr;
    CUDA_TRY(cudaMallocFromPoolAsync(&block, host.size(), pool_, stream));
    cuda::point_plan_at(image, block, &plan);
    CUDA_TRY(cudaMemcpyAsync(plan.block, host.data(), host.size(), cudaMemcpyHostToDevice, stream));
    CUDA_TRY(cudaEventCreateWithFlags(&plan.uploaded, cudaEventDisableTiming));
    CUDA_TRY(cudaEventRecord(plan.uploaded, stream));
    plan.nlanes = uint32_t(lanes.size());
    plan.max_slices = max_slices;
    plan.fifos_per_slice = uint32_t(per_slice);
    plan.max_frame = rec.max_frame;
    plan.chunk_messages = rec.chunk_messages;
    plan.signals = rec.signals;
    BRAID_INFO(kColl, "cuda plan for {}: {} lanes, {} ops, {} fifos", schedule.name, lanes.size(), ops.size(),
               fifos.size());
    *out = &plans_.emplace(&schedule, plan).first->second;
    return Status::ok();
  }

 public:
  // Device memory this communicator allocated (ncclCommMemStats): the FIFO
  // arena, scratch, staging and plans; all of it goes with ncclCommSuspend.
  MemoryHeld memory_held() const override {
    MemoryHeld m;
    m.releasable = arena_bytes_ + buffers_.bytes_held() + cuda::kFlagWords * sizeof(int) +
                   (ll_regions_ ? ctx_.comm.nranks * sizeof(LLLine*) : 0);
    for (const auto& [schedule, plan] : plans_) m.releasable += plan.bytes;
    return m;
  }

 private:
  void release() {
    if (device_ < 0) return;
    cudaSetDevice(device_);
    // Kernels of this communicator may still run (destroy without a sync, or
    // abort releasing them): wait before freeing what they use.
    cudaDeviceSynchronize();
    for (auto& [schedule, plan] : plans_) {
      cudaFree(plan.block);
      if (plan.uploaded) cudaEventDestroy(plan.uploaded);
    }
    for (size_t r = 0; r < peer_arena_.size(); ++r)
      if (opened_[r]) cudaIpcCloseMemHandle(peer_arena_[r]);
    buffers_.free_all();
    captured_records_.clear();
    if (ll_regions_) cudaFree(ll_regions_);
    if (pool_) cudaMemPoolDestroy(pool_);
    if (arena_) cudaFree(arena_);
    errors_.release();
    if (flags_host_) cudaFreeHost(flags_host_);
    straggler_.release();
    order_.release();
    cudaGetLastError();
  }

  BackendContext ctx_;
  Forwarder forwarder_;  // BRAID_FORWARD's twin communicator on the real NCCL
  cuda::CallOrder order_;  // this communicator's calls in issue order across streams
  CudaStraggler straggler_;  // BRAID_STRAGGLER
  int device_ = -1;
  uint32_t channels_ = 0, nslots_ = 0;
  int32_t block_budget_ = 0;  // see launch_block_budget
  int threads_on_device_ = 0;  // ranks of this process on this device, this one included
  bool one_device() const { return threads_on_device_ == ctx_.comm.nranks; }  // every rank one of them
  std::atomic<bool> legacy_stream_warned_{false};
  uint64_t slot_bytes_ = 0, conn_stride_ = 0, arena_bytes_ = 0, timeout_ns_ = 0;
  uint64_t ll_max_bytes_ = 0, ll_offset_ = 0;  // the LL region: arena_ + ll_offset_
  LLLine** ll_regions_ = nullptr;  // device array: every rank's LL region as mapped here
  void* arena_ = nullptr;
  std::vector<char*> peer_arena_;
  std::vector<bool> opened_;
  int* flags_host_ = nullptr;  // cuda::DevFlag words
  cuda::KernelErrors errors_;  // what they say, and the abort flag's raising
  cuda::CudaRma rma_;          // ncclPutSignal, ncclSignal, ncclWaitSignal
  cudaMemPool_t pool_ = nullptr;
  // scratch, lane counters, peer tables, p2p records, PreMulSum's scaled
  // input, sends copied aside (see p2p)
  cuda::StreamBuffers buffers_;
  std::vector<std::vector<char>> captured_records_;  // p2p records a captured graph copies at each replay
  std::map<const Schedule*, DevicePlan> plans_;  // schedules live in the comm's PlanCache
};

}  // namespace

// Each communicator's part runs on its own streams: collectives in issue
// order (in rounds across communicators, group_rounds.h), then its
// send/recv batch, as the host path orders them.
Status run_cuda_group(std::span<CommWork> work) {
  std::vector<std::vector<cudaStream_t>> streams(work.size());
  auto backend = [&](size_t i) -> CudaBackend& { return static_cast<CudaBackend&>(*work[i].backend); };
  for (size_t i = 0; i < work.size(); ++i) BRAID_TRY(backend(i).group_streams(work[i], &streams[i]));
  for (size_t i = 0; i < work.size(); ++i) BRAID_TRY(backend(i).join_streams_before(streams[i]));
  BRAID_TRY(enqueue_in_rounds(
      work, [&](size_t i, const CollectiveCall& c) { return backend(i).arrive_ahead(c); },
      [&](size_t i, const CollectiveCall& c) { return backend(i).collective(c); }));
  for (size_t i = 0; i < work.size(); ++i) {
    BRAID_TRY(backend(i).p2p(work[i].p2ps));
    BRAID_TRY(backend(i).join_streams_after(streams[i]));
  }
  return Status::ok();
}

Status make_cuda_backend(const BackendContext& ctx, int device, std::unique_ptr<Backend>* out) {
  auto backend = std::make_unique<CudaBackend>(ctx);
  BRAID_TRY(backend->init(device));
  *out = std::move(backend);
  return Status::ok();
}

}  // namespace braid

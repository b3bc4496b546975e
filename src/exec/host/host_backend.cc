#include "src/exec/host/host_backend.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "braid/chunking.h"
#include "src/base/log.h"
#include "src/bootstrap/bootstrap.h"
#include "src/exec/host/board_task.h"
#include "src/exec/host/collective_task.h"
#include "src/exec/host/eager.h"
#include "src/exec/host/oneshot.h"
#include "src/exec/host/p2p_task.h"
#include "src/exec/host/rma.h"
#include "src/exec/host/straggler_task.h"
#include "src/ops/datatype.h"
#include "src/ops/premul.h"
#include "src/plan/alg_selection.h"
#include "src/plan/planner.h"

namespace braid {
namespace {

// Collectives use channels [0, kP2PChannel); send/recv have their own, so a
// group's point-to-point traffic never interleaves with a schedule's.
constexpr int kP2PChannel = 1 << 12;
// The straggler detector's duration exchange (BRAID_STRAGGLER=auto) runs
// beside an AllReduce, so it needs a channel no schedule uses.
constexpr int kStragglerStampChannel = kP2PChannel - 1;
// The direct path's descriptors and "done" messages (single_copy.h).
constexpr int kSingleCopyChannel = kP2PChannel - 2;

}  // namespace

HostBackend::HostBackend(const BackendContext& ctx, const HostPathSettings& settings)
    : ctx_(ctx),
      paths_(settings),
      // Room for every peer's input, output and scratch of a call, and as many
      // again: one-sided calls never evict what the next call names.
      peer_memory_(size_t(std::max(16, 6 * ctx.comm.nranks))) {
  if (settings.one_process) guard_ = single_copy_guard_for(ctx.comm.comm_hash);
  single_copy_.rank = ctx.comm.rank;
  single_copy_.nranks = ctx.comm.nranks;
  single_copy_.pid = ctx.comm.peers[ctx.comm.rank].pid;
  single_copy_.transport = ctx.transport;
  single_copy_.windows = &windows_;
  single_copy_.guard = guard_.get();
  single_copy_.paths = &paths_;
}

HostBackend::~HostBackend() = default;

GroupRunner HostBackend::group_runner() const { return run_host_group; }

BoardCounts HostBackend::board_counts() const {
  return BoardCounts{oneshot_calls_, eager_calls_, eager_ ? eager_->depth() : 0, eager_ ? eager_->ring_bytes() : 0};
}

Status HostBackend::window_registered(const WindowInfo& window) {
  bool direct = false;
  BRAID_TRY(windows_.add(ctx_.comm, *ctx_.bootstrap, window, &direct));
  if (direct) paths_.note_mapped_window();
  // The first window is where one-sided RMA starts (NCCL's rmaEagerInit = 0):
  // every rank registers it, so all connect together.
  if (!rma_) BRAID_TRY(rma_start());
  rma_->add_window(window);
  // A peer may put into the window as soon as its registration returns:
  // every rank's receiver must know the window by then.
  return std::move(ctx_.bootstrap->barrier()).context("window registration");
}

void HostBackend::window_deregistered(uint64_t seq) {
  windows_.remove(seq);
  if (rma_) rma_->remove_window(seq);
}

Status HostBackend::window_peer_pointer(uint64_t seq, int peer, uint64_t offset, void** out) {
  *out = nullptr;
  // Only threads of one process, or ncclMemAlloc memory of processes on one
  // host, map each other's windows: elsewhere the peer is not reachable.
  const HostWindow* w = windows_.by_seq(seq);
  if (!w) return Status::ok();
  *out = w->views[peer] + offset;
  return Status::ok();
}

MemoryHeld HostBackend::memory_held() const {
  MemoryHeld m;
  m.releasable = scratch_.capacity() + (oneshot_ ? oneshot_->bytes() : 0) + (eager_ ? eager_->bytes() : 0) +
                 (rma_ ? rma_->bytes_held() : 0);
  return m;
}

Status HostBackend::rma_start() {
  if (!rma_) BRAID_TRY(RmaEngine::start(ctx_, &rma_));
  return Status::ok();
}

Status HostBackend::rma_write(const RmaCall& call) { return rma_->write(call); }
Status HostBackend::rma_wait(const RmaCall& call) { return rma_->wait(call.waits, call.wait_ms); }
uint64_t HostBackend::rma_signals_pending() const { return rma_ ? rma_->signals_pending() : 0; }

bool HostBackend::runs_alone(const CollectiveCall& call) const {
  return paths_.board_for(call) != HostPaths::Board::None;
}

Status HostBackend::run_alone(const CollectiveCall& call, bool* ran) {
  const HostPaths::Board board = paths_.board_for(call);
  *ran = board != HostPaths::Board::None;
  return *ran ? run_on_board(call, board) : Status::ok();
}

BoardCall HostBackend::board_call(const CollectiveCall& c) {
  return BoardCall{.collective = c.collective,
                   .input = c.sendbuff,
                   .output = c.recvbuff,
                   .count = c.count,
                   .type = c.type,
                   .op = c.reduction.fold,
                   .divisor = c.reduction.divisor,
                   .root = c.root};
}

Board* HostBackend::board(HostPaths::Board which, uint64_t* call) {
  const TransportContext& comm = ctx_.comm;
  auto setup = [&](const char* suffix, const char* what) {
    return board_setup(comm, fmt::format("/braid-{:016x}-{}", comm.comm_hash, suffix), what, ctx_.stop);
  };
  const BoardLimits& limits = paths_.settings().board_max_bytes;
  if (which == HostPaths::Board::Eager) {
    if (!eager_) {  // once: the largest payload any rooted collective puts on it
      const uint64_t largest = std::max(limits.most, limits.broadcast_gather);
      eager_ = EagerBoard::make(setup("eager", "eager rooted collectives"), largest);
    }
    *call = ++eager_calls_;
    return eager_.get();
  }
  if (!oneshot_) oneshot_ = OneShotBoard::make(setup("oneshot", "one-shot collectives"), limits.most);
  *call = ++oneshot_calls_;
  return oneshot_.get();
}

std::string HostBackend::describe_on_board(const CollectiveCall& c, HostPaths::Board which) const {
  const TransportContext& comm = ctx_.comm;
  if (which == HostPaths::Board::Eager)
    return fmt::format("{}(eager) count={} {} root {} rank {}/{}", to_string(c.collective), c.count,
                       datatype_name(c.type), c.root, comm.rank, comm.nranks);
  return fmt::format("{}(oneshot) count={} {} rank {}/{}", to_string(c.collective), c.count, datatype_name(c.type),
                     comm.rank, comm.nranks);
}

Status HostBackend::run_on_board(const CollectiveCall& c, HostPaths::Board which) {
  BRAID_INFO(kColl, "{}", describe_on_board(c, which));
  uint64_t call = 0;
  Board* b = board(which, &call);
  return b->run(call, board_call(c), ctx_.stop);
}

// One group's work on host backends, from tasks to completion.
class HostGroup {
 public:
  explicit HostGroup(std::span<CommWork> work) : work_(work), queues_(work.size()) {
    for (size_t i = 0; i < work.size(); ++i) queues_[i].abort = host(i).ctx_.stop;
  }

  Status run() {
    BRAID_TRY(stage_premul());
    BRAID_TRY(plan_schedules());
    for (size_t i = 0; i < work_.size(); ++i) {
      for (size_t k = 0; k < work_[i].collectives.size(); ++k) BRAID_TRY(add_collective(i, k));
      BRAID_TRY(add_p2p_batch(i));
    }
    const auto started = std::chrono::steady_clock::now();
    Status s = run_task_queues(queues_);
    if (s.is_ok() && timing_.paths) {
      const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - started;
      timing_.paths->record_slot_stores(timing_.collective, timing_.output_bytes, timing_.stores, us.count());
    }
    for (size_t i = 0; i < work_.size(); ++i) {
      if (queues_[i].tasks.empty() || dynamic_cast<BoardTask*>(queues_[i].tasks.front().get())) continue;
      std::unique_ptr<Task> front = std::move(queues_[i].tasks.front());
      if (auto* decided = dynamic_cast<StragglerAllReduceTask*>(front.get())) front = decided->take_allreduce();
      if (front) recycle_task(std::move(front), &host(i).spare_task_, &host(i).spare_single_copy_task_);
    }
    return s;
  }

 private:
  HostBackend& host(size_t i) const { return static_cast<HostBackend&>(*work_[i].backend); }
  const TransportContext& comm(size_t i) const { return host(i).ctx_.comm; }

  size_t collective_count() const {
    size_t n = 0;
    for (const CommWork& w : work_) n += w.collectives.size();
    return n;
  }
  bool has_p2p() const {
    return std::any_of(work_.begin(), work_.end(), [](const CommWork& w) { return !w.p2ps.empty(); });
  }

  // PreMulSum: the inputs are scaled into staging copies that live until
  // the group is done, and the collective runs as Sum over them.
  Status stage_premul() {
    for (size_t i = 0; i < work_.size(); ++i)
      for (CollectiveCall& c : work_[i].collectives) {
        if (!c.reduction.premul) continue;
        const PreMulSumOp& op = c.reduction.scalar;
        const void* scalar = op.residence == ncclScalarDevice ? op.pointer : &op.immediate;
        const size_t elems = c.count * input_blocks(c.collective, comm(i).nranks);
        staging_.emplace_back(elems * datatype_size(c.type));
        scale_by(staging_.back().data(), c.sendbuff, elems, c.type, scalar);
        c.sendbuff = staging_.back().data();
        c.reduction.premul = false;
      }
    return Status::ok();
  }

  // Every collective planned first: tasks of one communicator run one after
  // another, so they share one scratch buffer sized for the largest.
  Status plan_schedules() {
    for (size_t i = 0; i < work_.size(); ++i) {
      HostBackend& h = host(i);
      const int rank = comm(i).rank, nranks = comm(i).nranks;
      for (const CollectiveCall& c : work_[i].collectives) {
        Planned& p = planned_.emplace_back();
        // A call that runs on a board alone runs on it in a group too (board_task.h).
        p.board = h.paths_.board_for(c);
        if (p.board != HostPaths::Board::None) continue;
        // BRAID_STRAGGLER (src/plan/straggler.h): a fixed late rank is planned
        // for now, a decided one once the call starts (planned here without
        // one, which reserves its scratch: StragglAR's is never larger).
        if (c.collective == Collective::AllReduce) {
          StragglerTracker& st = h.ctx_.plans->straggler(nranks, rank);
          p.straggler = st.fixed_straggler();
          p.decided_at_start = st.decides_at_start(comm(i), c.count * datatype_size(c.type));
        }
        BRAID_TRY(plan(i, c, p.straggler, &p.schedule));
        BRAID_TRY(h.scratch_.reserve(scratch_bytes(i, c, *p.schedule)));
      }
    }
    return Status::ok();
  }

  Status add_collective(size_t i, size_t k) {
    HostBackend& h = host(i);
    const CollectiveCall& c = work_[i].collectives[k];
    Planned& p = planned_[next_planned_++];
    if (p.board != HostPaths::Board::None) {
      const BoardCall call = HostBackend::board_call(c);
      uint64_t number = 0;
      Board* b = h.board(p.board, &number);
      BRAID_TRY(b->admits(call));
      std::string label = h.describe_on_board(c, p.board);
      BRAID_INFO(kColl, "{}", label);
      queues_[i].tasks.push_back(std::make_unique<BoardTask>(b, number, call, std::move(label)));
      return Status::ok();
    }
    const TaskStores stores = h.paths_.stores_for(c);
    // Not timed for the store chooser: its time includes waiting for a late rank.
    if (p.decided_at_start) return add_straggler_allreduce(i, c, std::move(p.schedule), stores);
    // The communicator's last task, rebound when it fits (no allocation).
    std::unique_ptr<Task> task = std::move(h.spare_task_);
    BRAID_TRY(make_task(i, c, std::move(p.schedule), h.scratch_.data(), 0, stores, &task));
    const Task* on_slots = task.get();
    // A call whose selection names its algorithms (ncclCollConfig_t, NCCL_ALGO) runs that schedule.
    if (p.straggler < 0 && admits_fast_paths(c.algorithms))
      BRAID_TRY(maybe_single_copy(i, c, stores.stream_output, &task));
    // A lone call on the slots whose store choice is measured is timed for
    // its chooser (a single-copy task may not use the slots at all).
    if (stores.timed && collective_count() == 1 && !has_p2p() && task.get() == on_slots)
      timing_ = {&h.paths_, c.collective,
                 c.count * datatype_size(c.type) * output_blocks(c.collective, comm(i).nranks), stores.slots};
    BRAID_INFO(kColl, "{}", task->describe());
    queues_[i].tasks.push_back(std::move(task));
    return Status::ok();
  }

  Status make_task(size_t i, const CollectiveCall& c, std::shared_ptr<const Schedule> schedule, void* scratch,
                   int channel_base, const TaskStores& stores, std::unique_ptr<Task>* out) const {
    const HostBackend& h = host(i);
    const int rank = comm(i).rank, nranks = comm(i).nranks;
    const RankProgram& prog = schedule->ranks.at(rank);
    CollectiveArgs a;
    a.input_shape = input_shape(c.collective, nranks, c.count, prog.input_chunks);
    a.output_shape = output_shape(c.collective, nranks, c.count, prog.output_chunks);
    a.scratch_capacity = scratch_chunk_capacity(a.input_shape, a.output_shape);
    a.tile_bytes = h.paths_.tile_bytes_for(c, *schedule);
    a.slices = h.paths_.slices_for(c, *schedule);
    BRAID_TRY(h.ctx_.plans->records(*schedule, rank, &a.records));
    a.schedule = std::move(schedule);
    a.rank = rank;
    a.input = has_input(c, rank) ? c.sendbuff : nullptr;
    a.output = has_output(c, rank) ? c.recvbuff : nullptr;
    a.scratch = scratch;
    a.type = c.type;
    a.op = c.reduction.fold;
    if (a.output) a.divide_output_by = c.reduction.divisor;
    a.narrow_tile_bytes = h.paths_.settings().tile_bytes;
    a.frame_bytes = h.paths_.settings().wide_tile_bytes;  // a slot's capacity on every rank
    a.stream_output = a.output && stores.stream_output;
    a.stream_send_slots = stores.slots == SlotStores::Streamed;
    a.channel_base = channel_base;
    a.transport = h.ctx_.transport;
    a.peer_memory = &host(i).peer_memory_;
    a.collective = c.collective;  // the label is formatted only if needed (describe())
    a.count = c.count;
    a.nranks = nranks;
    return make_collective_task(std::move(a), out);
  }

  // Wraps a collective's schedule task in the direct path where its ranks
  // exchange descriptors (the same answer on every rank).
  Status maybe_single_copy(size_t i, const CollectiveCall& c, bool stream_output, std::unique_ptr<Task>* task) {
    HostBackend& h = host(i);
    const int rank = comm(i).rank, nranks = comm(i).nranks;
    const uint64_t bytes =
        c.count * datatype_size(c.type) * std::max(input_blocks(c.collective, nranks), output_blocks(c.collective, nranks));
    if (!h.paths_.exchanges_descriptors(c.collective, bytes)) return Status::ok();
    SingleCopyArgs d;
    d.ctx = &h.single_copy_;
    d.collective = c.collective;
    d.input = has_input(c, rank) ? c.sendbuff : nullptr;
    d.output = has_output(c, rank) ? c.recvbuff : nullptr;
    d.count = c.count;
    d.type = c.type;
    d.op = c.reduction.fold;
    d.divide_output_by = c.reduction.divisor;
    d.root = c.root;
    d.channel = kSingleCopyChannel;
    d.stream_output = stream_output;  // into every output this rank writes, its own or not
    d.fallback = std::move(*task);
    return make_single_copy_task(std::move(d), std::move(h.spare_single_copy_task_), task);
  }

  Status add_p2p_batch(size_t i) {
    const std::vector<P2PCall>& calls = work_[i].p2ps;
    if (calls.empty()) return Status::ok();
    HostBackend& h = host(i);
    std::vector<P2POp> ops;
    for (const P2PCall& p : calls) {
      const size_t bytes = p.count * datatype_size(p.type);
      ops.push_back(P2POp{p.is_send, p.peer, static_cast<char*>(p.buffer), bytes, datatype_size(p.type),
                          h.paths_.p2p_slices(p.peer, bytes)});
    }
    std::unique_ptr<Task> task;
    std::string label =
        fmt::format("send/recv batch of {} ops, rank {}/{}", ops.size(), comm(i).rank, comm(i).nranks);
    BRAID_TRY(make_p2p_task(std::move(ops), h.ctx_.transport, kP2PChannel, h.paths_.settings().tile_bytes, label,
                            &task));
    queues_[i].tasks.push_back(std::move(task));
    return Status::ok();
  }

  // c's schedule, for a late rank (-1: none).
  Status plan(size_t i, const CollectiveCall& c, int straggler, std::shared_ptr<const Schedule>* out) const {
    const int rank = comm(i).rank, nranks = comm(i).nranks;
    return host(i).ctx_.plans->schedule_for(c.collective, nranks, c.root, c.count * datatype_size(c.type), out,
                                            straggler, placement_of(c, rank, nranks), c.algorithms);
  }

  size_t scratch_bytes(size_t i, const CollectiveCall& c, const Schedule& schedule) const {
    const int nranks = comm(i).nranks;
    const RankProgram& prog = schedule.ranks.at(comm(i).rank);
    const BufferShape in = input_shape(c.collective, nranks, c.count, prog.input_chunks);
    const BufferShape out = output_shape(c.collective, nranks, c.count, prog.output_chunks);
    return size_t(host(i).paths_.slices_for(c, schedule)) * prog.scratch_chunks * scratch_chunk_capacity(in, out) *
           datatype_size(c.type);
  }

  // An AllReduce whose late rank the ranks decide as it starts
  // (straggler_task.h); `usual` is its plan without one.
  Status add_straggler_allreduce(size_t i, const CollectiveCall& c, std::shared_ptr<const Schedule> usual,
                                 const TaskStores& stores) {
    HostBackend& h = host(i);
    const int rank = comm(i).rank, nranks = comm(i).nranks;
    StragglerAllReduceTask::Args a;
    a.tracker = &h.ctx_.plans->straggler(nranks, rank);
    a.comm = &h.ctx_.comm;
    a.stop = h.ctx_.stop;
    a.bytes = c.count * datatype_size(c.type);
    a.label = fmt::format("allreduce count={} {} rank {}/{}", c.count, datatype_name(c.type), rank, nranks);
    if (a.tracker->tracks(a.bytes)) BRAID_TRY(make_stamps(i, *a.tracker, &a.stamps));
    a.plan = [this, i, c, stores, usual = std::move(usual)](int straggler, std::unique_ptr<Task>* out) -> Status {
      HostBackend& h = host(i);
      std::shared_ptr<const Schedule> schedule = usual;
      if (straggler >= 0) BRAID_TRY(plan(i, c, straggler, &schedule));
      if (scratch_bytes(i, c, *schedule) > h.scratch_.capacity())
        return BRAID_ERROR(ncclInternalError, "schedule {} for late rank {} needs more scratch than its group reserved",
                           schedule->name, straggler);
      *out = std::move(h.spare_task_);  // null where a later call of the group took it
      BRAID_TRY(make_task(i, c, std::move(schedule), h.scratch_.data(), 0, stores, out));
      BRAID_INFO(kColl, "{}", (*out)->describe());
      return Status::ok();
    };
    queues_[i].tasks.push_back(std::make_unique<StragglerAllReduceTask>(std::move(a)));
    return Status::ok();
  }

  // The duration exchange of BRAID_STRAGGLER=auto: an allgather of one
  // int64 per rank, on its own channel so that it runs beside the AllReduce.
  Status make_stamps(size_t i, StragglerTracker& tracker, std::unique_ptr<Task>* out) const {
    CollectiveCall stamps;
    stamps.collective = Collective::AllGather;
    stamps.sendbuff = tracker.stamp_send();
    stamps.recvbuff = tracker.stamp_recv();
    stamps.count = 1;
    stamps.type = ncclInt64;
    std::shared_ptr<const Schedule> schedule;
    BRAID_TRY(host(i).ctx_.plans->schedule_for(Collective::AllGather, comm(i).nranks, -1, sizeof(int64_t), &schedule));
    return make_task(i, stamps, std::move(schedule), nullptr, kStragglerStampChannel, {}, out);  // 8 B: never streamed
  }

  std::span<CommWork> work_;
  std::vector<TaskQueue> queues_;
  std::vector<std::vector<char>> staging_;  // PreMulSum's scaled inputs
  // How each collective runs, in work order: on a board, or its schedule
  // (planned for a late rank, or -1).
  struct Planned {
    HostPaths::Board board = HostPaths::Board::None;
    std::shared_ptr<const Schedule> schedule;
    int straggler = -1;
    bool decided_at_start = false;  // the late rank is decided as the call starts
  };
  std::vector<Planned> planned_;
  size_t next_planned_ = 0;
  // A lone collective on the slots whose store choice is measured.
  struct {
    HostPaths* paths = nullptr;
    Collective collective = Collective::Custom;
    uint64_t output_bytes = 0;
    SlotStores stores = SlotStores::Cached;
  } timing_;
};

Status run_host_group(std::span<CommWork> work) {
  if (work.empty()) return Status::ok();
  return HostGroup(work).run();
}

}  // namespace braid

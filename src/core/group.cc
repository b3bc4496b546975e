#include "src/core/group.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <thread>
#include <vector>

#include "braid/chunking.h"
#include "src/core/byte_ranges.h"
#include "src/core/comm.h"
#include "src/core/datatype.h"
#include "src/core/env.h"
#include "src/core/log.h"
#include "src/core/premul.h"
#include "src/exec/device_backend.h"
#include "src/exec/forward.h"
#include "src/exec/host_staged.h"
#include "src/exec/host/collective_task.h"
#include "src/exec/host/direct_task.h"
#include "src/exec/host/eager.h"
#include "src/exec/host/oneshot.h"
#include "src/exec/host/p2p_task.h"
#include "src/plan/host_tuning.h"
#include "src/plan/planner.h"
#include "src/plan/slot_stores.h"

namespace braid {
namespace {

// Collectives use channels [0, kP2PChannel); send/recv have their own, so a
// group's point-to-point traffic never interleaves with a schedule's.
constexpr int kP2PChannel = 1 << 12;
// The straggler detector's duration exchange (BRAID_STRAGGLER=auto) runs
// beside an AllReduce, so it needs a channel no schedule uses.
constexpr int kStragglerStampChannel = kP2PChannel - 1;
// The direct path's descriptors and "done" messages (direct_task.h).
constexpr int kDirectChannel = kP2PChannel - 2;

struct GroupState {
  int depth = 0;
  std::vector<InitCall> inits;
  std::vector<CollectiveCall> collectives;
  std::vector<P2PCall> p2ps;
};
thread_local GroupState group;

// Whether this rank writes outputs with streaming stores: the executor, and
// the direct and pull paths (src/plan/output_stores.h).
bool streams_output(const CollectiveCall& c) {
  const int n = c.comm->nranks;
  const uint64_t block = c.count * datatype_size(c.type);
  const uint64_t in_bytes = has_input(c) ? block * input_blocks(c.collective, n) : 0;
  const uint64_t out_bytes = has_output(c) ? block * output_blocks(c.collective, n) : 0;
  const bool in_place = ranges_overlap(c.sendbuff, in_bytes, c.recvbuff, out_bytes);
  return should_stream_output(c.comm->cache_share, c.collective, n, block, in_place);
}

// The call's placement on this rank, as NCCL and MSCCL define in place: the
// send buffer exactly where the in-place form puts it (AllGather: block
// `rank` of the output; ReduceScatter: the output is block `rank` of the
// input; otherwise the same pointer).  Schedule files may claim only one.
Placement placement_of(const CollectiveCall& c) {
  const int n = c.comm->nranks;
  const uint64_t block = c.count * datatype_size(c.type);
  const char *send = static_cast<const char*>(c.sendbuff), *recv = static_cast<const char*>(c.recvbuff);
  const uint64_t at = uint64_t(c.comm->rank) * block;
  const bool in_place = c.collective == Collective::AllGather || c.collective == Collective::Gather ? send == recv + at
                        : c.collective == Collective::ReduceScatter || c.collective == Collective::Scatter ? recv == send + at
                                                                                                           : send == recv;
  if (in_place) return Placement::InPlace;
  const bool overlap = ranges_overlap(send, block * input_blocks(c.collective, n), recv, block * output_blocks(c.collective, n));
  return overlap ? Placement::Unknown : Placement::OutOfPlace;  // partly overlapping: neither form fits
}

// Bytes of the call's larger buffer on a rank (input or output).
uint64_t larger_buffer_bytes(const CollectiveCall& c) {
  const int n = c.comm->nranks;
  return c.count * datatype_size(c.type) * std::max(input_blocks(c.collective, n), output_blocks(c.collective, n));
}

// How a call's task stores: into its user outputs (streamed or not,
// src/plan/output_stores.h) and into its send slots (src/plan/slot_stores.h).
struct TaskStores {
  bool stream_output = false;
  SlotStores slots = SlotStores::Cached;
};

// The fragment size of call `c` on `schedule` (src/plan/host_tuning.h,
// call_tile_bytes), by the smallest chunk any rank cuts the call into: all
// ranks must tile alike.  Only a call larger than kWideTileMinTiles wide
// fragments can have chunks that large, so smaller ones never look at the ranks.
uint64_t tile_bytes_for(const CollectiveCall& c, const Schedule& schedule) {
  const ncclComm* comm = c.comm;
  const uint64_t esize = datatype_size(c.type), wide = comm->wide_tile_bytes;
  if (larger_buffer_bytes(c) < kWideTileMinTiles * wide) return comm->tile_bytes;
  uint64_t least = UINT64_MAX;
  for (const RankProgram& p : schedule.ranks)
    for (const BufferShape& s : {input_shape(c.collective, comm->nranks, c.count, p.input_chunks),
                                 output_shape(c.collective, comm->nranks, c.count, p.output_chunks)})
      if (s.chunks > 0) least = std::min(least, s.chunk_capacity() * esize);
  return call_tile_bytes(comm->tile_bytes, wide, least);
}

Status make_task(const CollectiveCall& c, std::shared_ptr<const Schedule> schedule, void* scratch,
                 std::unique_ptr<Task>* out, int channel_base = 0, TaskStores stores = {}) {
  ncclComm* comm = c.comm;
  const RankProgram& prog = schedule->ranks.at(comm->rank);
  CollectiveArgs a;
  a.input_shape = input_shape(c.collective, comm->nranks, c.count, prog.input_chunks);
  a.output_shape = output_shape(c.collective, comm->nranks, c.count, prog.output_chunks);
  for (const BufferShape* s : {&a.input_shape, &a.output_shape})
    if (s->chunks % s->blocks != 0)
      return BRAID_ERROR(ncclInternalError, "schedule {}: {} chunks do not split into {} blocks", schedule->name,
                         s->chunks, s->blocks);
  a.scratch_capacity = scratch_chunk_capacity(a.input_shape, a.output_shape);
  a.schedule = std::move(schedule);
  a.rank = comm->rank;
  a.input = has_input(c) ? c.sendbuff : nullptr;
  a.output = has_output(c) ? c.recvbuff : nullptr;
  a.scratch = scratch;
  a.type = c.type;
  a.op = c.op == ncclAvg ? ncclSum : c.op;
  bool reduces_to_output = c.collective == Collective::AllReduce || c.collective == Collective::ReduceScatter ||
                           c.collective == Collective::Reduce;
  if (c.op == ncclAvg && reduces_to_output && a.output) a.divide_output_by = comm->nranks;
  a.tile_bytes = tile_bytes_for(c, *a.schedule);
  a.narrow_tile_bytes = comm->tile_bytes;
  a.frame_bytes = comm->wide_tile_bytes;
  a.stream_output = a.output && stores.stream_output;
  a.stream_send_slots = stores.slots == SlotStores::Streamed;
  a.channel_base = channel_base;
  a.transport = comm->transport.get();
  a.collective = c.collective;  // the label is formatted only if needed (describe())
  a.count = c.count;
  a.nranks = comm->nranks;
  return make_collective_task(std::move(a), out);
}

// Wraps a collective's schedule task in the direct path when every rank
// will (the same facts on every rank: windows, size, BRAID_ALGO).
Status maybe_direct(const CollectiveCall& c, bool stream_output, std::unique_ptr<Task>* task) {
  ncclComm* comm = c.comm;
  const uint64_t bytes = larger_buffer_bytes(c);
  if (comm->plans->forces(c.collective) || take_slot_lease(comm, c.collective, bytes) ||
      !direct_supported(comm, c.collective, bytes))
    return Status::ok();
  DirectArgs d;
  d.comm = comm;
  d.collective = c.collective;
  d.input = has_input(c) ? c.sendbuff : nullptr;
  d.output = has_output(c) ? c.recvbuff : nullptr;
  d.count = c.count;
  d.type = c.type;
  d.op = c.op == ncclAvg ? ncclSum : c.op;
  if (c.op == ncclAvg) d.divide_output_by = comm->nranks;
  d.root = c.root;
  d.channel = kDirectChannel;
  d.stream_output = stream_output;  // into every output this rank writes, its own or not
  d.fallback = std::move(*task);
  return make_direct_task(std::move(d), std::move(comm->spare_direct_task), task);
}

// How a call's executor stores into its send slots (src/plan/slot_stores.h):
// only calls that stream their output (`stream_output`) of `output_bytes`
// from kSlotStoresMinOutputBytes are concerned.
// `timed`: the choice is the chooser's, and the call's time is wanted.
struct SlotStoresChoice {
  SlotStores stores = SlotStores::Cached;
  bool timed = false;
};
SlotStoresChoice slot_stores_for(const CollectiveCall& c, uint64_t output_bytes, bool stream_output) {
  const ncclComm* comm = c.comm;
  if (output_bytes < kSlotStoresMinOutputBytes || !stream_output) return {};
  if (comm->stream_slots_always) return {SlotStores::Streamed, false};
  if (!comm->slot_stores) return {};
  return {comm->slot_stores->choose(c.collective, output_bytes).option, true};
}

void record_error(ncclComm* comm, const Status& s) {
  std::lock_guard<std::mutex> lock(comm->error_mutex);
  comm->last_error = s.to_string();
}

Status run_inits(std::vector<InitCall>& inits) {
  auto init_one = [](InitCall& call) {
    const ncclConfig_t* config = call.has_config ? &call.config : nullptr;
    if (!call.scalable_ids.empty()) return comm_init_scalable(call.comm, call.scalable_ids, call.nranks, call.rank, config);
    return comm_init(call.comm, call.id, call.nranks, call.rank, config);
  };
  if (inits.size() == 1) return init_one(inits[0]);
  // Several ranks initialised from one thread must rendezvous concurrently.
  std::vector<Status> results(inits.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < inits.size(); ++i)
    threads.emplace_back(with_caller_env([&, i] { results[i] = init_one(inits[i]); }));
  for (auto& t : threads) t.join();
  for (Status& s : results) BRAID_TRY(std::move(s));
  return Status::ok();
}

// PreMulSum: the inputs are scaled into staging copies that live until the
// group is done, and the collective runs as Sum over them.
Status stage_premul(std::vector<CollectiveCall>& collectives, std::vector<std::vector<char>>* staging) {
  for (CollectiveCall& c : collectives) {
    if (!c.has_premul) continue;
    const PreMulSumOp& op = c.premul;
    const void* scalar = op.residence == ncclScalarDevice ? op.pointer : &op.immediate;
    size_t elems = c.collective == Collective::ReduceScatter ? c.count * size_t(c.comm->nranks) : c.count;
    staging->emplace_back(elems * datatype_size(c.type));
    scale_by(staging->back().data(), c.sendbuff, elems, c.type, scalar);
    c.sendbuff = staging->back().data();
    c.op = ncclSum;
  }
  return Status::ok();
}

// Device communicators: enqueue everything on their streams and return (the
// work is asynchronous, as in NCCL); collectives in issue order, then the
// send/recv batch, like the host path.
Status run_device_work(const std::vector<CollectiveCall>& collectives, const std::vector<P2PCall>& p2ps) {
  // Host-staged communicators run their part of the group as one batch (its
  // work may depend on itself across communicators, like any group).
  auto staged = [](const auto& call) { return call.comm->device->host_staged() != nullptr; };
  std::vector<CollectiveCall> staged_collectives;
  std::vector<P2PCall> staged_p2ps;
  std::copy_if(collectives.begin(), collectives.end(), std::back_inserter(staged_collectives), staged);
  std::copy_if(p2ps.begin(), p2ps.end(), std::back_inserter(staged_p2ps), staged);
  if (!staged_collectives.empty() || !staged_p2ps.empty())
    BRAID_TRY(run_host_staged(std::move(staged_collectives), std::move(staged_p2ps)));

  for (const CollectiveCall& c : collectives) {
    if (staged(c)) continue;
    if (forward_wanted(c.collective)) {
      BRAID_TRY(forward_collective(c));
      continue;
    }
    std::shared_ptr<const Schedule> schedule;
    BRAID_TRY(c.comm->plans->schedule_for(c.collective, c.comm->nranks, c.root, c.count * datatype_size(c.type),
                                          &schedule, -1, placement_of(c)));
    BRAID_INFO(kColl, "{}({}) count={} {} rank {}/{} on {}", to_string(c.collective), schedule->name, c.count,
               datatype_name(c.type), c.comm->rank, c.comm->nranks, c.comm->device->name());
    BRAID_TRY(c.comm->device->collective(c, schedule));
  }
  std::map<ncclComm*, std::vector<P2PCall>> batches;
  for (const P2PCall& p : p2ps)
    if (!staged(p)) batches[p.comm].push_back(p);
  for (auto& [comm, calls] : batches) BRAID_TRY(comm->device->p2p(calls));
  return Status::ok();
}

Status run_work(std::vector<CollectiveCall> collectives, std::vector<P2PCall> p2ps) {
  auto on_device = [](const auto& call) { return call.comm->device != nullptr; };
  std::vector<CollectiveCall> device_collectives;
  std::vector<P2PCall> device_p2ps;
  std::copy_if(collectives.begin(), collectives.end(), std::back_inserter(device_collectives), on_device);
  std::copy_if(p2ps.begin(), p2ps.end(), std::back_inserter(device_p2ps), on_device);
  std::erase_if(collectives, on_device);
  std::erase_if(p2ps, on_device);
  if (!device_collectives.empty() || !device_p2ps.empty()) BRAID_TRY(run_device_work(device_collectives, device_p2ps));
  return run_host_work(std::move(collectives), std::move(p2ps));
}

}  // namespace

Status run_host_work(std::vector<CollectiveCall> collectives, std::vector<P2PCall> p2ps) {
  if (collectives.empty() && p2ps.empty()) return Status::ok();

  BRAID_TRY(check_agreement(collectives));
  std::vector<std::vector<char>> staging;
  BRAID_TRY(stage_premul(collectives, &staging));
  std::vector<ncclComm*> comms;  // a group touches few communicators: a linear search wins
  auto queue_index = [&](ncclComm* comm) {
    size_t i = std::find(comms.begin(), comms.end(), comm) - comms.begin();
    if (i == comms.size()) comms.push_back(comm);
    return i;
  };
  for (const auto& c : collectives) queue_index(c.comm);
  for (const auto& p : p2ps) queue_index(p.comm);
  std::vector<TaskQueue> queues(comms.size());
  // Abort and revoke both raise `stop`.
  for (size_t i = 0; i < comms.size(); ++i) queues[i].abort = &comms[i]->stop;

  // BRAID_STRAGGLER (src/plan/straggler.h): a lone AllReduce may run
  // StragglAR, and in auto mode carries the duration exchange.
  StragglerTracker* tracked = nullptr;
  int straggler = -1;
  if (collectives.size() == 1 && p2ps.empty() && collectives[0].collective == Collective::AllReduce) {
    const CollectiveCall& c = collectives[0];
    uint64_t bytes = c.count * datatype_size(c.type);
    StragglerTracker& st = c.comm->plans->straggler(c.comm->nranks, c.comm->rank);
    BRAID_TRY(st.plan_call(c.comm, bytes, &straggler));
    if (st.tracks(bytes)) {
      tracked = &st;
      st.call_started(bytes);
    }
  }

  // Plan every collective first: tasks of one communicator run one after
  // another, so they can share one scratch buffer sized for the largest.
  std::vector<std::shared_ptr<const Schedule>> schedules(collectives.size());
  for (size_t i = 0; i < collectives.size(); ++i) {
    const CollectiveCall& c = collectives[i];
    size_t esize = datatype_size(c.type);
    BRAID_TRY(c.comm->plans->schedule_for(c.collective, c.comm->nranks, c.root, c.count * esize, &schedules[i],
                                          straggler, placement_of(c)));
    const RankProgram& prog = schedules[i]->ranks.at(c.comm->rank);
    BufferShape in = input_shape(c.collective, c.comm->nranks, c.count, prog.input_chunks);
    BufferShape out = output_shape(c.collective, c.comm->nranks, c.count, prog.output_chunks);
    size_t need = size_t(prog.scratch_chunks) * scratch_chunk_capacity(in, out) * esize;
    if (c.comm->scratch.size() < need) c.comm->scratch.resize(need);
  }
  // A lone collective on the slots whose store choice is measured is timed
  // for its chooser.
  struct StoreTiming {
    SlotStoreChooser* chooser = nullptr;
    Collective collective = Collective::Custom;
    uint64_t output_bytes = 0;
    SlotStores stores = SlotStores::Cached;
  } timing;
  for (size_t i = 0; i < collectives.size(); ++i) {
    const CollectiveCall& c = collectives[i];
    const uint64_t output_bytes =
        has_output(c) ? c.count * datatype_size(c.type) * output_blocks(c.collective, c.comm->nranks) : 0;
    const bool stream_output = streams_output(c);
    const SlotStoresChoice stores = slot_stores_for(c, output_bytes, stream_output);
    // The communicator's last task, rebound when it fits (no allocation).
    std::unique_ptr<Task> task = std::move(c.comm->spare_task);
    BRAID_TRY(make_task(c, schedules[i], c.comm->scratch.data(), &task, 0, {stream_output, stores.stores}));
    const Task* on_slots = task.get();
    // A schedule file is what the user asked to run: no fast path replaces it.
    if (straggler < 0 && !tracked && !is_file_schedule(schedules[i].get()))
      BRAID_TRY(maybe_direct(c, stream_output, &task));
    // (a direct task may not use the slots at all: its time says nothing of them)
    if (stores.timed && collectives.size() == 1 && p2ps.empty() && task.get() == on_slots)
      timing = {c.comm->slot_stores.get(), c.collective, output_bytes, stores.stores};
    BRAID_INFO(kColl, "{}", task->describe());
    queues[queue_index(c.comm)].tasks.push_back(std::move(task));
  }

  std::map<ncclComm*, std::vector<P2POp>> batches;
  for (const P2PCall& p : p2ps)
    batches[p.comm].push_back(P2POp{p.is_send, p.peer, static_cast<char*>(p.buffer), p.count * datatype_size(p.type),
                                    datatype_size(p.type)});
  for (auto& [comm, ops] : batches) {
    std::unique_ptr<Task> task;
    std::string label = fmt::format("send/recv batch of {} ops, rank {}/{}", ops.size(), comm->rank, comm->nranks);
    BRAID_TRY(make_p2p_task(std::move(ops), comm->transport.get(), kP2PChannel, comm->tile_bytes, label, &task));
    queues[queue_index(comm)].tasks.push_back(std::move(task));
  }
  if (tracked) {
    // Its own queue, so it runs concurrently with the AllReduce.
    ncclComm* comm = collectives[0].comm;
    CollectiveCall stamps;
    stamps.comm = comm;
    stamps.collective = Collective::AllGather;
    stamps.sendbuff = tracked->stamp_send();
    stamps.recvbuff = tracked->stamp_recv();
    stamps.count = 1;
    stamps.type = ncclInt64;
    std::shared_ptr<const Schedule> schedule;
    BRAID_TRY(comm->plans->schedule_for(Collective::AllGather, comm->nranks, -1, sizeof(int64_t), &schedule));
    std::unique_ptr<Task> task;
    BRAID_TRY(make_task(stamps, schedule, nullptr, &task, kStragglerStampChannel));  // 8 B a rank: never streamed
    queues.emplace_back();
    queues.back().abort = &comm->stop;
    queues.back().tasks.push_back(std::move(task));
  }
  const auto started = std::chrono::steady_clock::now();
  Status s = run_task_queues(queues);
  if (s.is_ok() && timing.chooser) {
    const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - started;
    timing.chooser->record(timing.collective, timing.output_bytes, timing.stores, us.count());
  }
  if (s.is_ok() && tracked) tracked->call_finished();
  for (size_t i = 0; i < comms.size(); ++i)
    if (!queues[i].tasks.empty())
      recycle_task(std::move(queues[i].tasks.front()), &comms[i]->spare_task, &comms[i]->spare_direct_task);
  return s;
}

namespace {

// Every communicator the group touches, once each.
std::vector<ncclComm*> comms_of(const GroupState& work) {
  std::vector<ncclComm*> comms;
  auto add = [&](ncclComm* c) {
    if (std::find(comms.begin(), comms.end(), c) == comms.end()) comms.push_back(c);
  };
  for (const auto& i : work.inits) add(i.comm);
  for (const auto& c : work.collectives) add(c.comm);
  for (const auto& p : work.p2ps) add(p.comm);
  return comms;
}

// Records a failed group's error on a communicator it touched.
void note_failure(ncclComm* comm, Status* s) {
  record_error(comm, *s);
  // A transfer that failed midway leaves connections in an unknown state:
  // the communicator is unusable from here (NCCL's async error).  A
  // revoked communicator is stopped on purpose: it reports quiescence.
  bool broken = s->code() == ncclRemoteError || s->code() == ncclSystemError || s->code() == ncclInternalError;
  if (comm->revoked) *s = BRAID_ERROR(ncclInvalidUsage, "communicator was revoked while this group ran");
  else if (broken) comm->async_error = s->code();
}

// A lone small collective on a blocking host communicator whose ranks share
// this host runs on a board, without a plan, a task or the executor:
// one-shot (oneshot.h), or eager for the rooted ones (eager.h).  Every rank
// decides alike (the same call, the same agreed limits).
bool board_eligible(const CollectiveCall& c) {
  const ncclComm* comm = c.comm;
  if (!(comm->oneshot_collectives >> int(c.collective) & 1) || c.has_premul || comm->device || comm->check_args ||
      comm->nonblocking())
    return false;
  const uint64_t bytes = eager_serves(c.collective)
                             ? EagerBoard::payload_bytes(c.collective, c.count, c.type, comm->nranks)
                             : OneShotBoard::payload_bytes(c.collective, c.count, c.type, comm->nranks);
  return bytes <= comm->oneshot_max_bytes;
}

BoardSetup board_setup(const ncclComm* comm, const char* suffix, const char* what) {
  BoardSetup setup;
  setup.name = fmt::format("/braid-{:016x}-{}", comm->comm_hash, suffix);
  setup.what = what;
  setup.rank = comm->rank;
  setup.nranks = comm->nranks;
  for (const PeerInfo& p : comm->peers) setup.pids.push_back(p.pid);
  setup.timeout = std::chrono::seconds(env_int("BRAID_TIMEOUT"));
  setup.aborting = &comm->stop;
  return setup;
}

Status run_on_board(const CollectiveCall& c) {
  ncclComm* comm = c.comm;
  const bool avg = c.op == ncclAvg;  // the boards fold with Sum, then divide
  const BoardCall call{.collective = c.collective,
                       .input = c.sendbuff,
                       .output = c.recvbuff,
                       .count = c.count,
                       .type = c.type,
                       .op = avg ? ncclSum : c.op,
                       .divisor = avg ? comm->nranks : 0,
                       .root = c.root};
  Status s = [&]() -> Status {
    if (eager_serves(c.collective)) {
      if (!comm->eager)
        BRAID_TRY(EagerBoard::open(board_setup(comm, "eager", "eager rooted collectives"), comm->oneshot_max_bytes,
                                   &comm->eager));
      BRAID_INFO(kColl, "{}(eager) count={} {} root {} rank {}/{}", to_string(c.collective), c.count,
                 datatype_name(c.type), c.root, comm->rank, comm->nranks);
      return comm->eager->run(++comm->eager_calls, call, &comm->stop);
    }
    if (!comm->oneshot)
      BRAID_TRY(OneShotBoard::open(board_setup(comm, "oneshot", "one-shot collectives"), comm->oneshot_max_bytes,
                                   &comm->oneshot));
    BRAID_INFO(kColl, "{}(oneshot) count={} {} rank {}/{}", to_string(c.collective), c.count, datatype_name(c.type),
               comm->rank, comm->nranks);
    return comm->oneshot->run(++comm->oneshot_calls, call, &comm->stop);
  }();
  if (!s.is_ok()) note_failure(comm, &s);
  return s;
}

// Runs a whole group and records its outcome on each communicator.
Status execute(GroupState& work) {
  const std::vector<ncclComm*> comms = comms_of(work);  // before the work is moved out
  Status s = run_inits(work.inits);
  if (!s.is_ok())
    for (const auto& init : work.inits) init.comm->async_error = s.code();
  if (s.is_ok()) s = run_work(std::move(work.collectives), work.p2ps);
  if (!s.is_ok())
    for (ncclComm* comm : comms) note_failure(comm, &s);
  return s;
}

Status end_outermost() {
  GroupState work = std::move(group);
  group = GroupState{};
  std::vector<ncclComm*> comms = comms_of(work);
  // Hold every communicator so Abort/Destroy from another thread waits for us.
  for (size_t i = 0; i < comms.size(); ++i) {
    if (!comm_acquire(comms[i])) {
      for (size_t j = 0; j < i; ++j) comm_release(comms[j]);
      return BRAID_ERROR(ncclInvalidArgument, "a communicator used in this group was destroyed before ncclGroupEnd");
    }
  }
  auto release_all = [comms] {
    for (ncclComm* c : comms) comm_release(c);
  };
  // Work on a communicator runs in call order: finish its background job first.
  for (ncclComm* c : comms) {
    Status s = comm_wait_job(c);
    if (!s.is_ok()) {
      release_all();
      return s;
    }
  }
  bool async = false;
  for (ncclComm* c : comms) async |= c->nonblocking();
  for (const auto& i : work.inits) async |= i.has_config && i.config.blocking == 0;
  if (!async) {
    Status s = execute(work);
    release_all();
    return s;
  }
  // Non-blocking: the group runs on a worker; callers poll ncclCommGetAsyncError.
  auto job = std::make_shared<AsyncJob>();
  for (ncclComm* c : comms) {
    std::lock_guard<std::mutex> lock(c->job_mutex);
    c->job = job;
  }
  std::thread(with_caller_env([work = std::move(work), job, release_all]() mutable {
    Status s;
    try {
      s = execute(work);
    } catch (const std::exception& e) {
      s = BRAID_ERROR(ncclInternalError, "unexpected exception in a background group: {}", e.what());
    }
    if (!s.is_ok()) BRAID_WARN("background group failed: {}", s.to_string());
    job->finish(s.code());
    release_all();
  })).detach();
  return Status::error(ncclInProgress, "group runs in the background (non-blocking communicator)");
}

}  // namespace

void group_start() { ++group.depth; }

bool group_active() { return group.depth > 0; }

Status group_end() {
  if (group.depth == 0) return BRAID_ERROR(ncclInvalidUsage, "ncclGroupEnd called without ncclGroupStart");
  if (--group.depth > 0) return Status::ok();
  return end_outermost();
}

Status group_simulate_end(ncclSimInfo_t* sim) {
  if (group.depth == 0) return BRAID_ERROR(ncclInvalidUsage, "ncclGroupSimulateEnd called without ncclGroupStart");
  if (--group.depth > 0) return Status::ok();
  GroupState work = std::move(group);
  group = GroupState{};
  BRAID_TRY(run_inits(work.inits));
  for (ncclComm* c : comms_of(work))
    if (!comm_is_live(c)) return BRAID_ERROR(ncclInvalidArgument, "a communicator of this group was destroyed");
  double us = 0;
  BRAID_TRY(estimate_group_us(work.collectives, work.p2ps, &us));
  sim->estimatedTime = float(us);
  return Status::ok();
}

Status enqueue(const CollectiveCall& call) {
  if (call.count == 0) return Status::ok();  // NCCL: nothing to do
  if (!group_active() && board_eligible(call)) return run_on_board(call);
  group_start();
  group.collectives.push_back(call);
  return group_end();
}

Status enqueue(const P2PCall& call) {
  if (call.count == 0) return Status::ok();  // both sides skip it, as NCCL does
  group_start();
  group.p2ps.push_back(call);
  return group_end();
}

Status enqueue(const InitCall& call) {
  group_start();
  group.inits.push_back(call);
  return group_end();
}

}  // namespace braid

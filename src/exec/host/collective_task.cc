// Interprets one rank's records of a Schedule (src/ops/plan_records.h) on
// host memory, step by step as src/ops/op_step.h defines it: the same
// spans, step lengths, dependency rule and op switch the CUDA kernel runs.
//
// The call's buffers are walked in tiles: tile j of chunk k is elements
// [begin_k + j*t, begin_k + (j+1)*t) clipped to the chunk, with t chosen so a
// tile fits in one transport slot.  Every lane runs the whole op list once
// per tile, so each op moves one message per tile: one fragment, or for an
// op moving several chunks to or from a peer, a frame of one fragment per
// chunk (op_step.h; t then shrinks so that the largest frame fits a slot).
// The schedule's deadlock freedom (verified with Schedule::slots messages
// per connection, which every connection here gets) carries over to any
// message size.  Dependencies are per tile.
// A call may run as several slices, each its own lanes on its own channels
// over a disjoint part of every buffer block (the kernel's blockIdx.y); the
// host backend runs one, or between hosts over TCP (or a net on several
// NICs) several (HostPaths::slices_for), each slice's connections their own
// TCP streams (or NICs).
//
// What is the host's own: how bytes are stored (HostMemory below: streamed
// outputs and send slots), and one fusion, a Copy followed by a Send of the
// same chunk in one pass over the input (copy_and_send).
//
// One-sided ops (schedule.h; only where every rank reaches every peer's
// buffers, HostPathSettings::peer_access): a Signal's message carries where
// this rank's buffers of the call are, and the peer's Wait keeps it; the
// schedule's verified rule (a rank touches a peer's buffers only after a
// Wait for that peer) makes it known in time.  Puts and Gets then copy with
// memcpy where this rank can load and store the peer's buffer (threads of
// one process; another process's shareable memory, mapped once), and with
// CMA (process_vm_readv/writev) otherwise: src/exec/host/peer_reach.h.  A
// schedule whose messages are all signals needs no fragments: a call runs
// as one tile.
#include "src/exec/host/collective_task.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "src/base/byte_ranges.h"
#include "src/base/host_identity.h"
#include "src/exec/host/peer_reach.h"
#include "src/ops/datatype.h"
#include "src/ops/host_kernels.h"
#include "src/ops/op_step.h"
#include "src/plan/host_tuning.h"
#include "src/transport/cross_memory.h"

namespace braid {
namespace {

// Whether [a, a + bytes) and [b, b + bytes) do not overlap.
bool disjoint(const void* a, const void* b, uint64_t bytes) { return !ranges_overlap(a, bytes, b, bytes); }

// op_step's memory policy on the host.  Copies into a large user buffer
// bypass the cache where the call streams its output; scratch is read again
// soon and stays cached, and so do the send slots unless the call streams
// them too (src/plan/slot_stores.h).
struct HostMemory {
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;
  uint32_t element_bytes = 1;
  bool stream_output = false;
  bool stream_slots = false;

  uint32_t esize() const { return element_bytes; }
  bool stream(const StepSpan& dst) const { return stream_output && dst.user; }

  void copy(const StepSpan* dst, char* slot, const char* src, uint64_t bytes) const {
    if (!dst) {  // a Send: one memcpy when cached
      copy_unfenced(slot, src, bytes, stream_slots);
      if (stream_slots) store_fence();
      return;
    }
    copy_to(dst->ptr, slot, src, bytes, stream(*dst), slot && stream_slots);
  }

  // A reduction streams its output where the call streams a user buffer,
  // out of place.  Nothing may read the streamed values back (they are no
  // longer in cache), so one that also sends them computes into the send
  // slot and copies from there, or stores both from registers.  In place
  // the output lines were just read and are cached: writing through costs
  // nothing more (perf/results/compare_20261125j.txt).
  void reduce(const StepSpan* dst, char* slot, const char* in, const StepSpan& src, uint64_t n) const {
    if (!dst) {  // RecvReduceSend
      if (stream_slots) streamed({slot}, in, src.ptr, n);
      else braid::reduce(slot, in, src.ptr, n, type, op);
      return;
    }
    const bool stream_dst = stream(*dst) && disjoint(dst->ptr, src.ptr, n * element_bytes);
    if (!stream_dst) reduce_to(dst->ptr, slot, in, src.ptr, n, type, op, slot && stream_slots);
    else if (!slot) streamed({dst->ptr}, in, src.ptr, n);
    else if (stream_slots) streamed({dst->ptr, slot}, in, src.ptr, n);
    else reduce_to(slot, dst->ptr, in, src.ptr, n, type, op, true);  // into the cached slot, then out
  }

  void local_copy(const StepSpan& dst, const StepSpan& src, uint64_t bytes) const {
    if (disjoint(dst.ptr, src.ptr, bytes)) copy_to(dst.ptr, nullptr, src.ptr, bytes, stream(dst), false);
    else if (src.ptr != dst.ptr) std::memmove(dst.ptr, src.ptr, bytes);
  }

  void local_reduce(const StepSpan& dst, const StepSpan& src, uint64_t n) const {
    braid::reduce(dst.ptr, dst.ptr, src.ptr, n, type, op);
  }

  // in (op) src into every destination, from registers, with streaming
  // stores, fenced.
  void streamed(std::initializer_list<void*> dsts, const void* in, const void* src, uint64_t n) const {
    const void* srcs[2] = {in, src};
    reduce_many(dsts.begin(), int(dsts.size()), srcs, 2, n, type, op, 0, true);
    store_fence();
  }
};

struct LaneRun {
  const LaneRecord* lane = nullptr;
  uint32_t slice = 0;
  uint64_t tiles = 1;     // of this lane's slice
  uint64_t capacity = 0;  // slice_capacity() of this lane's slice
  // Per op, nullptr where the op does not send / receive; both point into
  // the task's pipe arrays (one allocation per task, not two per lane).
  SendPipe** send_pipes = nullptr;
  RecvPipe** recv_pipes = nullptr;
  uint32_t op = 0;
  uint32_t chunk = 0;  // chunk within the current op
  uint64_t tile = 0;
  uint64_t completed = 0;  // ops completed over all tiles
  bool done = false;
  const void* recv_data = nullptr;
  size_t recv_bytes = 0;
  void* send_slot = nullptr;
};

class CollectiveTask final : public Task {
 public:
  // Same schedule, rank, slices, channels and transport: the pipes (and the
  // storage for lane state) of this task can serve `a` as they are.
  bool can_serve(const CollectiveArgs& a) const {
    return a.schedule == a_.schedule && a.records == a_.records && a.rank == a_.rank && a.slices == a_.slices &&
           a.channel_base == a_.channel_base && a.transport == a_.transport;
  }

  // Looks up one pipe per (slice, sending or receiving op), once per task.
  Status connect() {
    const RankRecords& rec = *a_.records;
    const size_t ops = rec.ops.size();
    send_pipes_.assign(ops * a_.slices, nullptr);
    recv_pipes_.assign(ops * a_.slices, nullptr);
    for (uint32_t s = 0; s < a_.slices; ++s)
      for (size_t i = 0; i < ops; ++i) {
        const OpRecord& op = rec.ops[i];
        if (op.send_conn >= 0) BRAID_TRY(pipe(s, rec.connections[op.send_conn], &send_pipes_[s * ops + i], nullptr));
        if (op.recv_conn >= 0) BRAID_TRY(pipe(s, rec.connections[op.recv_conn], nullptr, &recv_pipes_[s * ops + i]));
      }
    for (SendPipe* p : send_pipes_)
      if (p && std::find(send_connections_.begin(), send_connections_.end(), p) == send_connections_.end())
        send_connections_.push_back(p);
    return Status::ok();
  }

  // Before every call: the lanes run on this call's pipes, and the pipes
  // cycle through as many slots as a call keeping all of them busy should,
  // and at least as many as the schedule was verified with.
  void start() {
    const size_t ops = a_.records->ops.size();
    for (LaneRun& run : lanes_) {
      run.send_pipes = send_pipes_.data() + run.slice * ops + run.lane->op_begin;
      run.recv_pipes = recv_pipes_.data() + run.slice * ops + run.lane->op_begin;
    }
    const int slots =
        std::max(a_.records->slots, slots_per_connection(ring_slots(), int(send_connections_.size())));
    for (SendPipe* pipe : send_connections_) pipe->use_slots(slots);
  }

  // A frame of the schedule's largest chunk count must fit a slot.
  Status check_frames() const {
    if (tile_bytes_ == 0)
      return BRAID_ERROR(ncclInvalidUsage, "schedule {}: a message of {} chunks does not fit a {}-byte slot",
                         a_.schedule->name, a_.records->max_frame, frame_slot_bytes());
    if (a_.records->signals && a_.transport->slot_bytes() < sizeof(HostSignal))
      return BRAID_ERROR(ncclInvalidUsage, "schedule {}: a signal ({} bytes) does not fit a {}-byte slot",
                         a_.schedule->name, sizeof(HostSignal), a_.transport->slot_bytes());
    return Status::ok();
  }

  // The most one fragment of this call holds: a tile of its largest chunk,
  // or a frame of the largest chunk count (run_frame: laid out a whole tile
  // apart), or a Signal.  What a send acquires: shared memory backs that
  // much of a slot, so a call of small chunks must not ask for whole tiles
  // (8 ranks' rings outgrew docker's 64 MB /dev/shm).
  uint64_t fragment_bound() const {
    const uint32_t chunks = a_.records->max_frame;
    const uint64_t tile = buffers_.tile_elems * buffers_.esize;
    uint64_t largest = 0;  // elements of the call's largest chunk
    for (uint32_t s = 0; s < a_.slices; ++s) largest = std::max(largest, slice_capacity(buffers_, s, a_.slices));
    const uint64_t bound =
        chunks > 1 ? frame_header_bytes(chunks) + chunks * tile : std::min(tile, largest * buffers_.esize);
    return std::max<uint64_t>(bound, sizeof(HostSignal));
  }

  uint64_t frame_slot_bytes() const { return a_.frame_bytes ? a_.frame_bytes : a_.transport->slot_bytes(); }
  bool wide() const { return a_.narrow_tile_bytes > 0 && tile_bytes_ > a_.narrow_tile_bytes; }
  // The slots a send connection may cycle through: wide fragments the
  // memory the narrow ones would.
  int ring_slots() const {
    const int all = a_.transport->slots();
    return wide() ? int(uint64_t(all) * a_.narrow_tile_bytes / tile_bytes_) : all;
  }

  // Takes the call's buffers and sizes and rewinds every lane (a reused task
  // allocates nothing here); start() must follow.
  void bind(CollectiveArgs a) {
    a_ = std::move(a);
    const uint32_t esize = uint32_t(datatype_size(a_.type));
    buffers_.input = static_cast<const char*>(a_.input);
    buffers_.output = static_cast<char*>(a_.output);
    buffers_.scratch = static_cast<char*>(a_.scratch);
    buffers_.input_shape = a_.input_shape;
    buffers_.output_shape = a_.output_shape;
    buffers_.scratch_stride = uint64_t(a_.schedule->ranks.at(a_.rank).scratch_chunks) * a_.scratch_capacity;
    tile_bytes_ = framed_tile_bytes(a_.tile_bytes, frame_slot_bytes(), a_.records->max_frame, esize);
    buffers_.tile_elems = std::max<uint64_t>(1, tile_bytes_ / esize);
    if (!a_.records->chunk_messages)
      buffers_.tile_elems = std::max(buffers_.tile_elems, whole_call_tile_elems(buffers_, a_.scratch_capacity));
    if (a_.records->one_sided) {
      peers_.assign(a_.schedule->ranks.size(), PeerReach{});
      one_sided_calls().fetch_add(1, std::memory_order_relaxed);
    }
    buffers_.esize = esize;
    send_bound_ = fragment_bound();
    // What its Signals carry (only schedules with signals: three allocation lookups).
    if (a_.records->signals) {
      const uint64_t bytes[3] = {a_.input_shape.elems() * esize, a_.output_shape.elems() * esize,
                                 scratch_elems(*a_.schedule, a_.rank, a_.scratch_capacity, a_.slices) * esize};
      mine_ = host_signal_of(buffers_, bytes, uint64_t(this_pid()), this_process());
    }
    memory_ = HostMemory{a_.type, a_.op, esize, a_.stream_output, a_.stream_send_slots};
    if (a_.stream_output) streamed_output_calls().fetch_add(1, std::memory_order_relaxed);
    if (wide()) wide_fragment_calls().fetch_add(1, std::memory_order_relaxed);
    if (a_.stream_send_slots) streamed_slot_calls().fetch_add(1, std::memory_order_relaxed);
    const RankRecords& rec = *a_.records;
    lanes_.resize(rec.lanes.size() * a_.slices);
    active_ = 0;
    finished_ = false;
    for (uint32_t s = 0; s < a_.slices; ++s) {
      const uint64_t capacity = slice_capacity(buffers_, s, a_.slices);
      for (size_t l = 0; l < rec.lanes.size(); ++l) {
        LaneRun& run = lanes_[s * rec.lanes.size() + l];
        run = LaneRun{};
        run.lane = &rec.lanes[l];
        run.slice = s;
        run.capacity = capacity;
        run.tiles = slice_tiles(capacity, buffers_.tile_elems);
        run.done = run.lane->op_count == 0;
        if (!run.done) ++active_;
      }
    }
  }

  std::string describe() const override {
    if (!a_.label.empty()) return a_.label;
    return fmt::format("{}({}) count={} {} rank {}/{}{}{}{}{}", to_string(a_.collective), a_.schedule->name,
                       a_.count, datatype_name(a_.type), a_.rank, a_.nranks, a_.stream_output ? ", streamed output" : "",
                       a_.stream_send_slots ? ", streamed send slots" : "", wide() ? ", wide fragments" : "",
                       a_.slices > 1 ? fmt::format(", {} slices", a_.slices) : "");
  }
  Doorbell* doorbell() const override { return a_.transport->doorbell(); }

  Status poll(bool* progressed, bool* done) override {
    for (LaneRun& run : lanes_) {
      while (!run.done) {
        bool moved = false;
        BRAID_TRY(advance(run, &moved));
        if (!moved) break;
        *progressed = true;
      }
    }
    if (active_ == 0 && !finished_) {
      finished_ = true;
      if (a_.divide_output_by > 0 && a_.output)
        divide_by(a_.output, a_.output_shape.elems(), a_.type, a_.divide_output_by);
    }
    *done = finished_;
    return Status::ok();
  }

 private:
  Status pipe(uint32_t slice, const ConnectionRecord& c, SendPipe** send, RecvPipe** recv) const {
    const int channel = a_.channel_base + int(slice * a_.records->channels + c.channel);
    return send ? a_.transport->send_pipe(c.peer, channel, send) : a_.transport->recv_pipe(c.peer, channel, recv);
  }

  const OpRecord& op_of(const LaneRun& run, uint32_t i) const { return a_.records->ops[run.lane->op_begin + i]; }

  StepSpan span(const LaneRun& run, uint8_t buffer, uint32_t index, uint64_t tile) const {
    return step_span(buffers_, run.capacity, run.slice, a_.slices, buffer, index, tile);
  }

  // The lanes of one slice are the `lanes` consecutive runs starting at its first.
  bool deps_met(const LaneRun& run, const OpRecord& op, uint64_t tile) const {
    const LaneRun* slice_lanes = &lanes_[size_t(run.slice) * a_.records->lanes.size()];
    for (uint32_t d = 0; d < op.dep_count; ++d) {
      const DepRecord& dep = a_.records->deps[op.dep_begin + d];
      const LaneRun& other = slice_lanes[dep.lane];
      if (other.completed < dep_completions(tile, other.lane->op_count, dep.op)) return false;
    }
    return true;
  }

  Status step_error(int code, uint64_t user_len) const {
    switch (code) {
      case kStepNullBuffer:
        return BRAID_ERROR(ncclInvalidArgument, "schedule {} touches a buffer that rank {} did not pass (NULL)",
                           a_.schedule->name, a_.rank);
      case kStepLengthsDisagree:
        return BRAID_ERROR(ncclInternalError, "schedule {}: chunk lengths disagree in one step", a_.schedule->name);
      default:
        return BRAID_ERROR(ncclInternalError, "schedule {}: fragment of {} elements for a chunk of {}",
                           a_.schedule->name, recv_elems_, user_len);
    }
  }

  Status advance(LaneRun& run, bool* moved) {
    const OpRecord& op = op_of(run, run.op);
    const OpType type = OpType(op.type);
    if (run.chunk == 0 && !run.recv_data && !run.send_slot && !deps_met(run, op, run.tile)) return Status::ok();
    if (type == OpType::Copy && run.chunk == 0) {
      BRAID_TRY(copy_and_send(run, moved));
      if (*moved) return Status::ok();
    }
    if ((type == OpType::GetReduce || type == OpType::GetReduceCopy) && run.chunk == 0) {
      BRAID_TRY(fused_get_reduce(run, moved));
      if (*moved) return Status::ok();
    }
    const bool receives = op.recv_conn >= 0, sends = op.send_conn >= 0;
    if (receives && !run.recv_data) {
      BRAID_TRY(run.recv_pipes[run.op]->try_acquire(&run.recv_data, &run.recv_bytes));
      if (!run.recv_data) return Status::ok();
      if (run.recv_bytes % buffers_.esize)
        return BRAID_ERROR(ncclInternalError, "fragment of {} bytes is not a whole number of {}-byte elements",
                           run.recv_bytes, buffers_.esize);
    }
    if (sends && !run.send_slot) {
      BRAID_TRY(run.send_pipes[run.op]->try_acquire(&run.send_slot,
                                                     type == OpType::Signal ? sizeof(HostSignal) : send_bound_));
      if (!run.send_slot) return Status::ok();
    }
    const bool framed = op_framed(op);
    uint64_t sent_bytes = 0;
    if (type == OpType::Signal) {
      std::memcpy(run.send_slot, &mine_, sizeof mine_);
      sent_bytes = sizeof mine_;
    } else if (type == OpType::Wait) {
      BRAID_TRY(take_peer_buffers(op, run.recv_data, run.recv_bytes));
    } else if (op_one_sided(type)) {
      BRAID_TRY(run_one_sided(run, op));
    } else if (framed) {
      BRAID_TRY(run_frame(run, op, &sent_bytes));
    } else {
      uint64_t n = 0;
      BRAID_TRY(run_chunk(run, op, run.chunk, static_cast<const char*>(run.recv_data), run.recv_bytes,
                          static_cast<char*>(run.send_slot), &n));
      sent_bytes = n * buffers_.esize;
    }
    if (sends) {
      BRAID_TRY(run.send_pipes[run.op]->commit(sent_bytes));
      run.send_slot = nullptr;
    }
    if (receives) {
      BRAID_TRY(run.recv_pipes[run.op]->release());
      run.recv_data = nullptr;
    }
    *moved = true;
    run.chunk = framed || op_one_sided(type) ? op.count : run.chunk + 1;
    if (run.chunk < op.count) return Status::ok();
    finish_op(run);
    return Status::ok();
  }

  // Chunk `chunk` (op-relative) of an op in the current tile: `in` is its
  // received fragment of `in_bytes`, `slot` takes what it sends.  *n:
  // elements moved.
  Status run_chunk(const LaneRun& run, const OpRecord& op, uint32_t chunk, const char* in, uint64_t in_bytes,
                   char* slot, uint64_t* n) {
    const OpType type = OpType(op.type);
    recv_elems_ = in_bytes / buffers_.esize;
    const StepSpan src = op_reads_src(type) ? span(run, op.src_buffer, op.src_index + chunk, run.tile) : StepSpan{};
    const StepSpan dst = op_writes_dst(type) ? span(run, op.dst_buffer, op.dst_index + chunk, run.tile) : StepSpan{};
    StepSpan operands[2];
    const int count = step_operands(type, src, dst, operands);
    if (int code = step_length(operands, count, op.recv_conn >= 0, recv_elems_, n); code != kStepOk)
      return step_error(code, dst.user ? dst.elems : src.elems);
    op_step(type, memory_, src, dst, in, slot, *n);
    return Status::ok();
  }

  // An op's chunks of this tile as one frame (op_step.h): each chunk's
  // fragment at its place after the header, the header written last.
  // *sent_bytes: the frame's length up to its last chunk's end.
  Status run_frame(const LaneRun& run, const OpRecord& op, uint64_t* sent_bytes) {
    const uint32_t chunks = op.count;
    const uint64_t stride = buffers_.tile_elems * buffers_.esize, header = frame_header_bytes(chunks);
    const auto* in_header = static_cast<const uint64_t*>(run.recv_data);
    auto* out_header = static_cast<uint64_t*>(run.send_slot);
    if (in_header && (run.recv_bytes < header || in_header[0] != chunks))
      return BRAID_ERROR(ncclInternalError, "schedule {}: a message of {} chunks for an op of {}", a_.schedule->name,
                         run.recv_bytes < header ? 0 : in_header[0], chunks);
    *sent_bytes = header;
    for (uint32_t k = 0; k < chunks; ++k) {
      const char* in = nullptr;
      uint64_t in_bytes = 0;
      if (in_header) {
        in_bytes = in_header[1 + k];
        if (!frame_chunk_fits(chunks, k, stride, in_bytes, run.recv_bytes, buffers_.esize))
          return BRAID_ERROR(ncclInternalError, "schedule {}: chunk {} of a message is {} bytes, not within its {}",
                             a_.schedule->name, k, in_bytes, stride);
        in = static_cast<const char*>(run.recv_data) + frame_offset(chunks, k, stride);
      }
      char* slot = out_header ? static_cast<char*>(run.send_slot) + frame_offset(chunks, k, stride) : nullptr;
      uint64_t n = 0;
      BRAID_TRY(run_chunk(run, op, k, in, in_bytes, slot, &n));
      if (out_header) {
        out_header[1 + k] = n * buffers_.esize;
        *sent_bytes = frame_offset(chunks, k, stride) + n * buffers_.esize;
      }
    }
    if (out_header) out_header[0] = chunks;
    return Status::ok();
  }

  // A Wait's message: where the signalling peer's buffers are.
  Status take_peer_buffers(const OpRecord& op, const void* data, size_t bytes) {
    if (bytes != sizeof(HostSignal))
      return BRAID_ERROR(ncclInternalError, "schedule {}: a signal from rank {} of {} bytes, not {}",
                         a_.schedule->name, op.peer, bytes, sizeof(HostSignal));
    if (peers_.empty()) return Status::ok();
    HostSignal signal;
    std::memcpy(&signal, data, sizeof signal);
    peers_.at(size_t(op.peer)) = reach_peer(signal, mine_.buffers, buffers_, a_.peer_memory);
    return Status::ok();
  }

  // A Put, Get, GetReduce or GetReduceCopy: every chunk of the op in this
  // tile, between this rank's buffers and peer op.peer's.
  Status run_one_sided(const LaneRun& run, const OpRecord& op) {
    const OpType type = OpType(op.type);
    const PeerReach& d = peers_.at(size_t(op.peer));
    if (!d.known())
      return BRAID_ERROR(ncclInternalError, "schedule {}: rank {} touches rank {}'s buffers before its signal",
                         a_.schedule->name, a_.rank, op.peer);
    const bool put = op_puts(type);
    const bool direct = d.direct[uint8_t(put ? op.dst_buffer : op.src_buffer)];
    const pid_t pid = pid_t(d.peer.pid);
    if (!direct) one_sided_cma_ops().fetch_add(1, std::memory_order_relaxed);
    const bool copy = type == OpType::GetReduceCopy;
    for (uint32_t k = 0; k < op.count; ++k) {
      StepSpan mine, peer, own;
      one_sided_spans(op, k, buffers_, d.at, run.capacity, run.slice, a_.slices, run.tile, &mine, &peer,
                      copy ? &own : nullptr);
      const StepSpan operands[3] = {mine, peer, own};
      uint64_t n = 0;
      if (int code = step_length(operands, copy ? 3 : 2, false, 0, &n); code != kStepOk)
        return step_error(code, mine.elems);
      const uint64_t bytes = n * buffers_.esize;
      if (bytes == 0) continue;
      if (put) {
        if (direct) std::memcpy(peer.ptr, mine.ptr, bytes);
        else BRAID_TRY(cma_write(pid, uint64_t(uintptr_t(peer.ptr)), mine.ptr, bytes));
        continue;
      }
      // GetReduce: dst = dst (+) the peer's; GetReduceCopy: dst = the peer's (+) its own src.
      if (direct) {
        if (type == OpType::Get) std::memcpy(mine.ptr, peer.ptr, bytes);
        else if (copy) braid::reduce(mine.ptr, peer.ptr, own.ptr, n, a_.type, a_.op);
        else braid::reduce(mine.ptr, mine.ptr, peer.ptr, n, a_.type, a_.op);
      } else if (type == OpType::Get) {
        BRAID_TRY(cma_read(pid, mine.ptr, uint64_t(uintptr_t(peer.ptr)), bytes));
      } else {
        // Another process's bytes come through staging that stays in cache,
        // a piece at a time, each reduced before the next is read.
        const uint64_t piece = kStagingBytes / buffers_.esize * buffers_.esize;
        if (staging_.size() < piece) staging_.resize(piece);
        for (uint64_t at = 0; at < bytes; at += piece) {
          const uint64_t len = std::min(piece, bytes - at), elems = len / buffers_.esize;
          BRAID_TRY(cma_read(pid, staging_.data(), uint64_t(uintptr_t(peer.ptr + at)), len));
          if (copy) braid::reduce(mine.ptr + at, staging_.data(), own.ptr + at, elems, a_.type, a_.op);
          else braid::reduce(mine.ptr + at, mine.ptr + at, staging_.data(), elems, a_.type, a_.op);
        }
      }
    }
    return Status::ok();
  }

  // A run of GetReduces into one chunk (op_step.h, plan_fold_run) from
  // peers this rank loads from directly, as many as are ready, in one pass
  // (reduce_many).  *moved: they are done (fewer than two ready: nothing).
  Status fused_get_reduce(LaneRun& run, bool* moved) {
    FoldRun<kMaxFusedSources> fold;
    plan_fold_run(
        run.op, run.lane->op_count, [&](uint32_t i) -> const OpRecord& { return op_of(run, i); },
        [&](uint32_t, const OpRecord& op, StepBuffers* theirs) {
          const PeerReach& d = peers_.at(size_t(op.peer));
          if (!deps_met(run, op, run.tile) || !d.direct[uint8_t(op.src_buffer)]) return false;  // CMA: one by one
          *theirs = d.at;
          return true;
        },
        buffers_, run.capacity, run.slice, a_.slices, run.tile, &fold);
    if (fold.ops < 2) return Status::ok();
    if (fold.n > 0) {
      void* const dsts[1] = {fold.dst};
      const void* srcs[kMaxFusedSources];
      std::copy(fold.srcs, fold.srcs + fold.nsrc, srcs);
      reduce_many(dsts, 1, srcs, fold.nsrc, fold.n, a_.type, a_.op, 0, false);
    }
    for (uint32_t k = 0; k < fold.ops; ++k) finish_op(run);
    *moved = true;
    return Status::ok();
  }

  // The lane's current op is done for this tile: on to the next.
  void finish_op(LaneRun& run) {
    run.chunk = 0;
    ++run.completed;
    if (++run.op < run.lane->op_count) return;
    run.op = 0;
    if (++run.tile == run.tiles) {
      run.done = true;
      --active_;
    }
  }

  // A Copy followed by a Send of the same chunk (an AllGather or AlltoAll
  // keeping its own block and sending it on) in one pass over the input,
  // block by block (copy_to): the input is read once for both, not twice.
  // *moved: both ops done; otherwise the Copy runs alone (in place, or no
  // slot free yet).
  Status copy_and_send(LaneRun& run, bool* moved) {
    if (run.op + 1 >= run.lane->op_count) return Status::ok();
    const OpRecord& copy = op_of(run, run.op);
    const OpRecord& send = op_of(run, run.op + 1);
    if (OpType(send.type) != OpType::Send || copy.count != 1 || send.count != 1 ||
        send.src_buffer != copy.src_buffer || send.src_index != copy.src_index || !deps_met(run, send, run.tile))
      return Status::ok();
    const StepSpan src = span(run, copy.src_buffer, copy.src_index, run.tile);
    const StepSpan dst = span(run, copy.dst_buffer, copy.dst_index, run.tile);
    const uint64_t bytes = src.elems * buffers_.esize;
    if (!src.ptr || !dst.ptr || src.elems == 0 || dst.elems != src.elems || !disjoint(dst.ptr, src.ptr, bytes))
      return Status::ok();
    void* slot = nullptr;
    BRAID_TRY(run.send_pipes[run.op + 1]->try_acquire(&slot, bytes));
    if (!slot) return Status::ok();
    copy_to(dst.ptr, slot, src.ptr, bytes, memory_.stream(dst), memory_.stream_slots);
    BRAID_TRY(run.send_pipes[run.op + 1]->commit(bytes));
    finish_op(run);
    finish_op(run);
    *moved = true;
    return Status::ok();
  }

  CollectiveArgs a_;
  uint64_t tile_bytes_ = 0;  // a_.tile_bytes, or less where frames must fit a slot
  uint64_t send_bound_ = 0;  // fragment_bound()
  StepBuffers buffers_;
  HostMemory memory_;
  uint64_t recv_elems_ = 0;
  std::vector<SendPipe*> send_pipes_;  // [slice * ops + op]
  std::vector<RecvPipe*> recv_pipes_;
  std::vector<SendPipe*> send_connections_;  // send_pipes_ without nulls and repeats
  std::vector<LaneRun> lanes_;               // [slice * lanes + lane]
  HostSignal mine_;                          // what this rank's Signals carry
  std::vector<PeerReach> peers_;             // per rank, from its Signals (one-sided schedules)
  std::vector<char> staging_;                // a GetReduce's bytes read from another process
  static constexpr int kMaxFusedSources = 64;  // fused_get_reduce's sources, at most
  static constexpr uint64_t kStagingBytes = 256 * 1024;  // run_one_sided's pieces read from another process
  size_t active_ = 0;
  bool finished_ = false;
};

}  // namespace

std::atomic<uint64_t>& streamed_slot_calls() {
  static std::atomic<uint64_t> calls{0};
  return calls;
}
std::atomic<uint64_t>& streamed_output_calls() {
  static std::atomic<uint64_t> calls{0};
  return calls;
}

std::atomic<uint64_t>& wide_fragment_calls() {
  static std::atomic<uint64_t> calls{0};
  return calls;
}

std::atomic<uint64_t>& one_sided_calls() {
  static std::atomic<uint64_t> calls{0};
  return calls;
}

std::atomic<uint64_t>& one_sided_cma_ops() {
  static std::atomic<uint64_t> ops{0};
  return ops;
}

Status make_collective_task(CollectiveArgs args, std::unique_ptr<Task>* out) {
  if (!args.schedule || args.rank < 0 || args.rank >= int(args.schedule->ranks.size()) || !args.records)
    return BRAID_ERROR(ncclInternalError, "collective task without a schedule and records for rank {}", args.rank);
  if (datatype_size(args.type) == 0) return BRAID_ERROR(ncclInvalidArgument, "invalid datatype {}", int(args.type));
  if (args.slices < 1) return BRAID_ERROR(ncclInternalError, "collective task of {} slices", args.slices);
  if (auto* reusable = dynamic_cast<CollectiveTask*>(out->get()); reusable && reusable->can_serve(args)) {
    reusable->bind(std::move(args));
    BRAID_TRY(reusable->check_frames());
    reusable->start();
    return Status::ok();
  }
  auto task = std::make_unique<CollectiveTask>();
  task->bind(std::move(args));
  BRAID_TRY(task->check_frames());
  BRAID_TRY(task->connect());
  task->start();
  *out = std::move(task);
  return Status::ok();
}

}  // namespace braid

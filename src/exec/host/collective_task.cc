// Interprets one rank's lanes of a Schedule on host memory.
//
// The call's buffers are walked in tiles: tile j of chunk k is elements
// [begin_k + j*t, begin_k + (j+1)*t) clipped to the chunk, with t chosen so a
// tile fits in one transport slot.  Every lane runs the whole op list once
// per tile, so each op moves one fragment per chunk per tile: one message,
// or for an op moving several chunks to or from a peer, one framed message
// holding all of them (run_frame; t then shrinks so that the largest frame
// fits a slot).  The schedule's deadlock freedom (verified with
// Schedule::slots messages per connection, which every connection here
// gets) carries over to any message size.  Dependencies are per tile.
//
// Lengths: user-buffer chunks have exact lengths; scratch chunks are
// full-capacity slots.  A fragment received from scratch may be longer than
// the logical chunk it carries; only its valid prefix ever reaches a user
// buffer (user operand lengths are authoritative, see resolve_length).
#include "src/exec/host/collective_task.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "src/core/byte_ranges.h"
#include "src/core/datatype.h"
#include "src/plan/host_tuning.h"

namespace braid {
namespace {

// Whether [a, a + bytes) and [b, b + bytes) do not overlap.
bool disjoint(const void* a, const void* b, uint64_t bytes) { return !ranges_overlap(a, bytes, b, bytes); }

struct Span {
  char* ptr = nullptr;
  uint64_t elems = 0;
  bool user = false;  // part of the caller's buffer (exact length)
};

struct LaneRun {
  const Lane* lane = nullptr;
  // Per op, nullptr where the op does not send / receive; both point into
  // the task's one `pipes_` array (one allocation per task, not two per lane).
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

// Bytes before a framed message's first chunk: its chunk count and each
// chunk's length (uint64_t each), padded to a cache line.
constexpr uint64_t frame_header_bytes(uint32_t chunks) { return (8 * (uint64_t(chunks) + 1) + 63) / 64 * 64; }

// The most chunks one framed message carries anywhere in the schedule:
// every rank must cut its chunks into the same tiles.
uint32_t largest_frame(const Schedule& s) {
  uint32_t most = 1;
  for (const RankProgram& p : s.ranks)
    for (const Lane& lane : p.lanes)
      for (const Op& op : lane.ops)
        if (op_sends(op.type) || op_receives(op.type)) most = std::max(most, op.count);
  return most;
}

class CollectiveTask final : public Task {
 public:

  // Same schedule, rank, channels and transport: the pipes (and the
  // storage for lane state) of this task can serve `a` as they are.
  bool can_serve(const CollectiveArgs& a) const {
    return a.schedule == a_.schedule && a.rank == a_.rank && a.channel_base == a_.channel_base &&
           a.transport == a_.transport;
  }

  // Looks up one pipe per sending / receiving op (once per task).
  Status connect() {
    const RankProgram& prog = a_.schedule->ranks.at(a_.rank);
    size_t total_ops = 0;
    for (const Lane& lane : prog.lanes) total_ops += lane.ops.size();
    send_pipes_.assign(total_ops, nullptr);
    recv_pipes_.assign(total_ops, nullptr);
    size_t first_op = 0;
    for (const Lane& lane : prog.lanes) {
      int channel = a_.channel_base + lane.channel;
      for (size_t i = 0; i < lane.ops.size(); ++i) {
        const Op& op = lane.ops[i];
        if (op_sends(op.type)) BRAID_TRY(a_.transport->send_pipe(op.send_peer, channel, &send_pipes_[first_op + i]));
        if (op_receives(op.type)) BRAID_TRY(a_.transport->recv_pipe(op.recv_peer, channel, &recv_pipes_[first_op + i]));
      }
      first_op += lane.ops.size();
    }
    for (SendPipe* pipe : send_pipes_)
      if (pipe && std::find(send_connections_.begin(), send_connections_.end(), pipe) == send_connections_.end())
        send_connections_.push_back(pipe);
    return Status::ok();
  }

  // Before every call: the lanes run on this call's pipes, and the pipes
  // cycle through as many slots as a call keeping all of them busy should.
  void start() {
    point_lanes_at_pipes();
    const int slots = std::max(a_.schedule->slots,  // what its deadlock freedom was verified with
                               slots_per_connection(ring_slots(), int(send_connections_.size())));
    for (SendPipe* pipe : send_connections_) pipe->use_slots(slots);
  }

  // A fragment's bytes: the call's, or less where framed messages of
  // max_frame_ chunks must fit a slot.  Every rank computes the same from
  // the schedule and the agreed slot size.
  uint64_t framed_tile_bytes() const {
    if (max_frame_ <= 1) return a_.tile_bytes;
    const uint64_t slot = a_.frame_bytes ? a_.frame_bytes : a_.transport->slot_bytes();
    const uint64_t room = (slot - std::min(slot, frame_header_bytes(max_frame_))) / max_frame_;
    const uint64_t bytes = std::min(a_.tile_bytes, room >= 64 ? room / 64 * 64 : room);
    return std::max<uint64_t>(bytes, esize_);  // check_frames() refuses a slot too small for one element each
  }

  // A frame of max_frame_ fragments must fit a slot (transports' slots hold
  // kilobytes; a header and a few elements always fit them).
  Status check_frames() const {
    if (max_frame_ <= 1) return Status::ok();
    const uint64_t slot = a_.frame_bytes ? a_.frame_bytes : a_.transport->slot_bytes();
    if (frame_header_bytes(max_frame_) + max_frame_ * tile_elems_ * esize_ > slot)
      return BRAID_ERROR(ncclInvalidUsage, "schedule {}: a message of {} chunks does not fit a {}-byte slot",
                         a_.schedule->name, max_frame_, slot);
    return Status::ok();
  }

  bool wide() const { return a_.narrow_tile_bytes > 0 && framed_tile_bytes() > a_.narrow_tile_bytes; }
  // The slots a send connection may cycle through: wide fragments the
  // memory the narrow ones would.
  int ring_slots() const {
    const int all = a_.transport->slots();
    return wide() ? int(uint64_t(all) * a_.narrow_tile_bytes / a_.tile_bytes) : all;
  }

  void point_lanes_at_pipes() {
    size_t first_op = 0;
    for (LaneRun& run : lanes_) {
      run.send_pipes = send_pipes_.data() + first_op;
      run.recv_pipes = recv_pipes_.data() + first_op;
      first_op += run.lane->ops.size();
    }
  }

  // Takes the call's buffers and sizes and rewinds every lane (a reused task
  // allocates nothing here); start() must follow.
  void bind(CollectiveArgs a) {
    a_ = std::move(a);
    esize_ = datatype_size(a_.type);
    if (a_.schedule.get() != framed_schedule_) {
      framed_schedule_ = a_.schedule.get();
      max_frame_ = largest_frame(*a_.schedule);
    }
    tile_elems_ = std::max<uint64_t>(1, framed_tile_bytes() / esize_);
    uint64_t max_chunk = std::max({a_.input_shape.chunk_capacity(), a_.output_shape.chunk_capacity(),
                                   a_.scratch_capacity});
    tiles_ = std::max<uint64_t>(1, (max_chunk + tile_elems_ - 1) / tile_elems_);
    if (a_.stream_output) streamed_output_calls().fetch_add(1, std::memory_order_relaxed);
    if (wide()) wide_fragment_calls().fetch_add(1, std::memory_order_relaxed);
    stream_slots_ = a_.stream_send_slots;
    if (stream_slots_) streamed_slot_calls().fetch_add(1, std::memory_order_relaxed);
    const RankProgram& prog = a_.schedule->ranks.at(a_.rank);
    lanes_.resize(prog.lanes.size());
    active_ = 0;
    finished_ = false;
    for (size_t l = 0; l < prog.lanes.size(); ++l) {
      LaneRun& run = lanes_[l];
      run = LaneRun{};
      run.lane = &prog.lanes[l];
      run.done = run.lane->ops.empty();
      if (!run.done) ++active_;
    }
  }

  std::string describe() const override {
    if (!a_.label.empty()) return a_.label;
    return fmt::format("{}({}) count={} {} rank {}/{}{}{}{}", to_string(a_.collective), a_.schedule->name, a_.count,
                       datatype_name(a_.type), a_.rank, a_.nranks, a_.stream_output ? ", streamed output" : "",
                       stream_slots_ ? ", streamed send slots" : "", wide() ? ", wide fragments" : "");
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
  Span span(ChunkRef ref, uint32_t offset, uint64_t tile) const {
    uint32_t index = ref.index + offset;
    uint64_t lo, hi;
    char* base;
    bool user = ref.buffer != BufferKind::Scratch;
    if (user) {
      const BufferShape& shape = ref.buffer == BufferKind::Input ? a_.input_shape : a_.output_shape;
      ElemRange r = shape.chunk(index);
      lo = r.begin;
      hi = r.end;
      base = ref.buffer == BufferKind::Input ? const_cast<char*>(static_cast<const char*>(a_.input))
                                             : static_cast<char*>(a_.output);
    } else {
      lo = uint64_t(index) * a_.scratch_capacity;
      hi = lo + a_.scratch_capacity;
      base = static_cast<char*>(a_.scratch);
    }
    uint64_t b = std::min(lo + tile * tile_elems_, hi), e = std::min(b + tile_elems_, hi);
    return Span{base ? base + b * esize_ : nullptr, e - b, user};
  }

  bool deps_met(const Op& op, uint64_t tile) const {
    for (const Dep& d : op.deps) {
      const LaneRun& other = lanes_[d.lane];
      if (other.completed < tile * other.lane->ops.size() + d.op + 1) return false;
    }
    return true;
  }

  // Elements an op step moves: user operands are exact and must agree; a
  // received fragment must cover them; scratch-only steps take the shortest.
  Status resolve_length(std::initializer_list<Span> operands, bool received, uint64_t* n) const {
    uint64_t len = received ? recv_elems_ : UINT64_MAX;
    bool have_user = false;
    uint64_t user_len = 0;
    for (const Span& s : operands) {
      if (s.elems > 0 && !s.ptr)
        return BRAID_ERROR(ncclInvalidArgument, "schedule {} touches a buffer that rank {} did not pass (NULL)",
                           a_.schedule->name, a_.rank);
      if (s.user) {
        if (have_user && s.elems != user_len)
          return BRAID_ERROR(ncclInternalError, "schedule {}: chunk lengths disagree ({} vs {} elements)",
                             a_.schedule->name, user_len, s.elems);
        have_user = true;
        user_len = s.elems;
      }
      len = std::min(len, s.elems);
    }
    if (have_user) {
      if (received && recv_elems_ < user_len)
        return BRAID_ERROR(ncclInternalError, "schedule {}: fragment of {} elements for a chunk of {}",
                           a_.schedule->name, recv_elems_, user_len);
      len = user_len;
    }
    *n = len == UINT64_MAX ? 0 : len;
    return Status::ok();
  }

  Status advance(LaneRun& run, bool* moved) {
    const Op& op = run.lane->ops[run.op];
    if (run.chunk == 0 && !run.recv_data && !run.send_slot && !deps_met(op, run.tile)) return Status::ok();
    if (op.type == OpType::Copy && run.chunk == 0) {
      BRAID_TRY(copy_and_send(run, moved));
      if (*moved) return Status::ok();
    }
    bool receives = op_receives(op.type), sends = op_sends(op.type);
    if (receives && !run.recv_data) {
      BRAID_TRY(run.recv_pipes[run.op]->try_acquire(&run.recv_data, &run.recv_bytes));
      if (!run.recv_data) return Status::ok();
      if (run.recv_bytes % esize_)
        return BRAID_ERROR(ncclInternalError, "fragment of {} bytes is not a whole number of {}-byte elements",
                           run.recv_bytes, esize_);
    }
    if (sends && !run.send_slot) {
      BRAID_TRY(run.send_pipes[run.op]->try_acquire(&run.send_slot));
      if (!run.send_slot) return Status::ok();
    }
    const bool framed = op.count > 1 && (receives || sends);
    uint64_t sent_bytes = 0;
    if (framed) {
      BRAID_TRY(run_frame(op, run, &sent_bytes));
    } else {
      recv_elems_ = run.recv_bytes / esize_;
      uint64_t sent = 0;
      BRAID_TRY(execute(op, run.chunk, run.tile, static_cast<const char*>(run.recv_data),
                        static_cast<char*>(run.send_slot), &sent));
      sent_bytes = sent * esize_;
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
    run.chunk = framed ? op.count : run.chunk + 1;
    if (run.chunk < op.count) return Status::ok();
    finish_op(run);
    return Status::ok();
  }

  // A framed op (one moving several chunks to or from a peer): its chunks'
  // fragments of this tile travel in one message, each at a fixed stride
  // after a header of their lengths, as MSCCL sends a step of cnt chunks.
  // So a connection holds as many of these messages as the verifier
  // assumed (Schedule::slots), however many chunks they carry.
  Status run_frame(const Op& op, const LaneRun& run, uint64_t* sent_bytes) {
    const uint64_t header = frame_header_bytes(op.count), stride = tile_elems_ * esize_;
    const auto* in_header = static_cast<const uint64_t*>(run.recv_data);
    auto* out_header = static_cast<uint64_t*>(run.send_slot);
    if (in_header && (run.recv_bytes < header || in_header[0] != op.count))
      return BRAID_ERROR(ncclInternalError, "schedule {}: a message of {} chunks for an op of {}", a_.schedule->name,
                         run.recv_bytes < header ? 0 : in_header[0], op.count);
    *sent_bytes = header;
    for (uint32_t k = 0; k < op.count; ++k) {
      const char* in = nullptr;
      if (in_header) {
        const uint64_t bytes = in_header[1 + k];
        if (bytes > stride || header + k * stride + bytes > run.recv_bytes || bytes % esize_)
          return BRAID_ERROR(ncclInternalError, "schedule {}: chunk {} of a message is {} bytes, not within its {}",
                             a_.schedule->name, k, bytes, stride);
        in = static_cast<const char*>(run.recv_data) + header + k * stride;
        recv_elems_ = bytes / esize_;
      }
      char* slot = out_header ? static_cast<char*>(run.send_slot) + header + k * stride : nullptr;
      uint64_t sent = 0;
      BRAID_TRY(execute(op, k, run.tile, in, slot, &sent));
      if (out_header) {
        out_header[1 + k] = sent * esize_;
        *sent_bytes = header + k * stride + sent * esize_;
      }
    }
    if (out_header) out_header[0] = op.count;
    return Status::ok();
  }

  // The lane's current op is done for this tile: on to the next.
  void finish_op(LaneRun& run) {
    run.chunk = 0;
    ++run.completed;
    if (++run.op < run.lane->ops.size()) return;
    run.op = 0;
    if (++run.tile == tiles_) {
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
    const Op& copy = run.lane->ops[run.op];
    if (run.op + 1 >= run.lane->ops.size()) return Status::ok();
    const Op& send = run.lane->ops[run.op + 1];
    if (send.type != OpType::Send || copy.count != 1 || send.count != 1 || !(send.src == copy.src) ||
        !deps_met(send, run.tile))
      return Status::ok();
    const Span src = span(copy.src, 0, run.tile), dst = span(copy.dst, 0, run.tile);
    const uint64_t bytes = src.elems * esize_;
    if (!src.ptr || !dst.ptr || src.elems == 0 || dst.elems != src.elems || !disjoint(dst.ptr, src.ptr, bytes))
      return Status::ok();
    void* slot = nullptr;
    BRAID_TRY(run.send_pipes[run.op + 1]->try_acquire(&slot));
    if (!slot) return Status::ok();
    copy_to(dst.ptr, slot, src.ptr, bytes, stream(dst), stream_slots_);
    BRAID_TRY(run.send_pipes[run.op + 1]->commit(bytes));
    finish_op(run);
    finish_op(run);
    *moved = true;
    return Status::ok();
  }

  // Copies into a large user buffer bypass the cache (see copy_to); scratch
  // is read again soon and stays cached, and so do the send slots unless
  // the caller chose streamed stores for them (stream_slots_,
  // src/plan/slot_stores.h).
  bool stream(const Span& dst) const { return a_.stream_output && dst.user; }

  // Whether a reduction streams its output: a user buffer the call streams
  // (src/plan/output_stores.h), out of place.  Nothing may read the
  // streamed values back (they are no longer in cache), so a reduction that
  // also sends them computes into the send slot and copies from there, or
  // stores both from registers (reduce_streamed).
  // In place, the output lines were just read and are cached: writing
  // through costs nothing more.  2-rank AllReduce 64 MB on the 2-core VM,
  // alternating runs: 6.63-6.92 ms against 7.04-7.18 before; ReduceScatter
  // 64 MB 4.27-4.54 against 4.71-4.85 (perf/results/compare_20261125j.txt;
  // a5143a2 had dropped an earlier form that streamed in place too).
  bool stream_reduced(const Span& dst, const Span& src, uint64_t n) const {
    return stream(dst) && disjoint(dst.ptr, src.ptr, n * esize_);
  }

  // in (op) src into every destination, from registers, with streaming
  // stores, fenced.
  void reduce_streamed(std::initializer_list<void*> dsts, const void* in, const void* src, uint64_t n) const {
    const void* srcs[2] = {in, src};
    reduce_many(dsts.begin(), int(dsts.size()), srcs, 2, n, a_.type, a_.op, 0, true);
    store_fence();
  }

  // Chunk `chunk` of an op in tile `tile`: `in` holds its received
  // fragment (recv_elems_ elements), `slot` takes what it sends.  *sent:
  // elements placed in the slot.
  Status execute(const Op& op, uint32_t chunk, uint64_t tile, const char* in, char* slot, uint64_t* sent) {
    Span src = op_reads_src(op.type) ? span(op.src, chunk, tile) : Span{};
    Span dst = op_writes_dst(op.type) ? span(op.dst, chunk, tile) : Span{};
    uint64_t n = 0;
    switch (op.type) {
      case OpType::Send:
        BRAID_TRY(resolve_length({src}, false, &n));
        copy_unfenced(slot, src.ptr, n * esize_, stream_slots_);  // one memcpy when cached
        if (stream_slots_) store_fence();
        break;
      case OpType::Recv:
        BRAID_TRY(resolve_length({dst}, true, &n));
        copy_to(dst.ptr, nullptr, in, n * esize_, stream(dst), false);
        break;
      case OpType::RecvCopySend:
        BRAID_TRY(resolve_length({dst}, true, &n));
        copy_to(dst.ptr, slot, in, n * esize_, stream(dst), stream_slots_);
        break;
      case OpType::RecvReduceSend:
        BRAID_TRY(resolve_length({src}, true, &n));
        if (stream_slots_) {
          const void* srcs[2] = {in, src.ptr};
          void* dsts[1] = {slot};
          reduce_many(dsts, 1, srcs, 2, n, a_.type, a_.op, 0, true);
          store_fence();
        } else {
          reduce(slot, in, src.ptr, n, a_.type, a_.op);
        }
        break;
      case OpType::RecvReduceCopy:
        BRAID_TRY(resolve_length({src, dst}, true, &n));
        if (stream_reduced(dst, src, n)) reduce_streamed({dst.ptr}, in, src.ptr, n);
        else reduce_to(dst.ptr, nullptr, in, src.ptr, n, a_.type, a_.op, false);
        break;
      case OpType::RecvReduceCopySend:
        BRAID_TRY(resolve_length({src, dst}, true, &n));
        if (!stream_reduced(dst, src, n)) {
          reduce_to(dst.ptr, slot, in, src.ptr, n, a_.type, a_.op, stream_slots_);
        } else if (stream_slots_) {
          reduce_streamed({dst.ptr, slot}, in, src.ptr, n);
        } else {  // into the cached slot, then from there to the output
          reduce_to(slot, dst.ptr, in, src.ptr, n, a_.type, a_.op, true);
        }
        break;
      case OpType::Copy: {
        BRAID_TRY(resolve_length({src, dst}, false, &n));
        const size_t bytes = n * esize_;
        if (disjoint(dst.ptr, src.ptr, bytes)) copy_to(dst.ptr, nullptr, src.ptr, bytes, stream(dst), false);
        else if (src.ptr != dst.ptr) std::memmove(dst.ptr, src.ptr, bytes);
        break;
      }
      case OpType::Reduce:
        BRAID_TRY(resolve_length({src, dst}, false, &n));
        reduce(dst.ptr, dst.ptr, src.ptr, n, a_.type, a_.op);
        break;
      case OpType::Nop:
        break;
    }
    *sent = n;
    return Status::ok();
  }

  CollectiveArgs a_;
  const Schedule* framed_schedule_ = nullptr;  // the schedule max_frame_ was found for
  uint32_t max_frame_ = 1;                     // most chunks in one framed message, on any rank
  size_t esize_ = 0;
  uint64_t tile_elems_ = 0;
  uint64_t tiles_ = 0;
  uint64_t recv_elems_ = 0;
  bool stream_slots_ = false;
  std::vector<SendPipe*> send_pipes_;
  std::vector<RecvPipe*> recv_pipes_;
  std::vector<SendPipe*> send_connections_;  // send_pipes_ without nulls and repeats
  std::vector<LaneRun> lanes_;
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

Status make_collective_task(CollectiveArgs args, std::unique_ptr<Task>* out) {
  if (!args.schedule || args.rank < 0 || args.rank >= int(args.schedule->ranks.size()))
    return BRAID_ERROR(ncclInternalError, "collective task without a schedule for rank {}", args.rank);
  if (datatype_size(args.type) == 0) return BRAID_ERROR(ncclInvalidArgument, "invalid datatype {}", int(args.type));
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

// The op step: what one fragment step of one op does to which bytes, written
// once for both executors (BRAID_HD).  The host executor
// (src/exec/host/collective_task.cc) and the CUDA kernel
// (src/exec/cuda/kernels.cu) walk a rank's records (plan_records.h) alike:
//
//   for each slice (independent: its own part of every buffer block, its own
//   connections), for each tile (a slot's worth of every chunk), every lane
//   runs its ops in order; an op waits for its dependencies (ops of other
//   lanes, in the same tile), then moves one fragment per chunk it covers.
//
// What differs between them is how bytes move (the host's loops with their
// store modes; a thread block's vector loads) and how waiting is done, so
// op_step takes a Memory policy:
//
//   copy(dst, slot, src, bytes)        dst (may be null) and slot (may be
//                                      null) = src
//   reduce(dst, slot, in, src, n)      dst and slot = in (+) src
//   local_copy(dst, src, bytes)        Copy: dst = src (they may overlap)
//   local_reduce(dst, src, n)          Reduce: dst = dst (+) src
//
// Everything else here is arithmetic: where a chunk's fragment lies in a
// slice and tile, how many elements a step moves, when a dependency is met.
#pragma once

#include <cstdint>

#include "braid/chunking.h"
#include "braid/hd.h"
#include "braid/schedule.h"
#include "src/ops/plan_records.h"

namespace braid {

// The part of a buffer one step touches.
struct StepSpan {
  char* ptr = nullptr;
  uint64_t elems = 0;
  bool user = false;  // part of the caller's buffer: its length is exact
};

// A call's buffers as one launch (device) or task (host) cuts them.
struct StepBuffers {
  const char* input = nullptr;  // nullptr where this rank passes none
  char* output = nullptr;
  char* scratch = nullptr;
  BufferShape input_shape, output_shape;  // of the whole call
  uint64_t scratch_stride = 0;  // scratch elements each slice owns
  uint64_t tile_elems = 1;      // elements of a fragment
  uint32_t esize = 1;
};

// Slice s of S takes [lo, lo + len) of every buffer block of `block_elems`.
BRAID_HD void slice_of(uint64_t block_elems, uint32_t slice, uint32_t slices, uint64_t* lo, uint64_t* len) {
  *lo = block_elems * slice / slices;
  *len = block_elems * (slice + 1) / slices - *lo;
}

// A chunk's capacity inside one slice (chunking.h's rule on the slice).
BRAID_HD uint64_t slice_chunk_capacity(const BufferShape& shape, uint32_t slice, uint32_t slices) {
  uint64_t lo, len;
  slice_of(shape.block_elems, slice, slices, &lo, &len);
  return BufferShape{shape.blocks, len, shape.chunks}.chunk_capacity();
}

// The largest chunk of the slice, which scratch chunks are sized to, and
// the tiles the slice is walked in (at least one, so that empty calls still
// meet their peers' messages).
BRAID_HD uint64_t slice_capacity(const StepBuffers& b, uint32_t slice, uint32_t slices) {
  const uint64_t in = slice_chunk_capacity(b.input_shape, slice, slices);
  const uint64_t out = slice_chunk_capacity(b.output_shape, slice, slices);
  return in > out ? in : out;
}
BRAID_HD uint64_t slice_tiles(uint64_t capacity, uint64_t tile_elems) {
  const uint64_t tiles = (capacity + tile_elems - 1) / tile_elems;
  return tiles > 0 ? tiles : 1;
}

// Tile `tile` of chunk `index` of a buffer, within slice s of S.
// `capacity`: slice_capacity() of that slice.
BRAID_HD StepSpan step_span(const StepBuffers& b, uint64_t capacity, uint32_t slice, uint32_t slices,
                            uint8_t buffer, uint32_t index, uint64_t tile) {
  uint64_t lo, hi;
  char* base;
  if (buffer == uint8_t(BufferKind::Scratch)) {
    lo = slice * b.scratch_stride + uint64_t(index) * capacity;
    hi = lo + capacity;
    base = b.scratch;
  } else {
    const BufferShape& shape = buffer == uint8_t(BufferKind::Input) ? b.input_shape : b.output_shape;
    uint64_t slice_lo, slice_len;
    slice_of(shape.block_elems, slice, slices, &slice_lo, &slice_len);
    const ElemRange r = BufferShape{shape.blocks, slice_len, shape.chunks}.chunk(index);
    const uint64_t block = index / shape.chunks_per_block();
    lo = block * shape.block_elems + slice_lo + (r.begin - block * slice_len);
    hi = lo + r.size();
    base = buffer == uint8_t(BufferKind::Input) ? const_cast<char*>(b.input) : b.output;
  }
  uint64_t first = lo + tile * b.tile_elems;
  if (first > hi) first = hi;
  const uint64_t last = first + b.tile_elems < hi ? first + b.tile_elems : hi;
  return StepSpan{base ? base + first * b.esize : nullptr, last - first, buffer != uint8_t(BufferKind::Scratch)};
}

// The spans whose lengths decide a step (step_length), in a fixed order.
BRAID_HD int step_operands(OpType type, const StepSpan& src, const StepSpan& dst, StepSpan out[2]) {
  int n = 0;
  if (op_reads_src(type) && type != OpType::Copy && type != OpType::Reduce) out[n++] = src;
  if (op_writes_dst(type)) out[n++] = dst;
  if (type == OpType::Copy || type == OpType::Reduce) out[n++] = src;
  return n;
}

enum StepError : int {
  kStepOk = 0,
  kStepNullBuffer = 1,       // the schedule touches a buffer this rank passed as NULL
  kStepLengthsDisagree = 2,  // two user operands of one step differ in length: a bad plan
  kStepShortFragment = 3,    // a received fragment is shorter than the chunk it fills
};

// Elements one step moves: user operands are exact and must agree; a
// received fragment (recv_elems) must cover them; a step on scratch only
// takes the shortest (a fragment received from scratch may be longer than
// the logical chunk it carries; only its valid prefix reaches a user buffer).
BRAID_HD int step_length(const StepSpan* operands, int count, bool received, uint64_t recv_elems, uint64_t* n) {
  uint64_t len = received ? recv_elems : ~0ull;
  bool have_user = false;
  uint64_t user_len = 0;
  for (int i = 0; i < count; ++i) {
    const StepSpan& s = operands[i];
    if (s.elems > 0 && !s.ptr) return kStepNullBuffer;
    if (s.user) {
      if (have_user && s.elems != user_len) return kStepLengthsDisagree;
      have_user = true;
      user_len = s.elems;
    }
    if (s.elems < len) len = s.elems;
  }
  if (have_user) {
    if (received && recv_elems < user_len) return kStepShortFragment;
    len = user_len;
  }
  *n = len == ~0ull ? 0 : len;
  return kStepOk;
}

// Frames.  An op moving count > 1 chunks to or from a peer (MSCCL's step of
// cnt chunks) sends them, per tile, as one message: a frame, a header (the
// chunk count, then each chunk's fragment length in bytes, 8 bytes each,
// padded to a 64-byte line) and chunk k's fragment at header + k * stride,
// one tile apart.  So a connection holds as many messages as the verifier
// assumed (Schedule::slots), whatever their chunk counts; in exchange, a
// schedule with frames cuts its tiles smaller, so that its largest frame
// fits a slot.
BRAID_HD bool op_framed(const OpRecord& op) { return op.count > 1 && (op.send_conn >= 0 || op.recv_conn >= 0); }
BRAID_HD uint64_t frame_header_bytes(uint32_t chunks) { return (8 * (uint64_t(chunks) + 1) + 63) / 64 * 64; }
// The fragment bytes of a call whose largest frame has `max_frame` chunks,
// into slots of `slot_bytes`: `tile_bytes`, or less (whole lines) so that
// such a frame fits; 0 when not one element each fits.  Every rank computes
// the same from the schedule and the slot size all agreed on.
BRAID_HD uint64_t framed_tile_bytes(uint64_t tile_bytes, uint64_t slot_bytes, uint32_t max_frame, uint32_t esize) {
  if (max_frame <= 1) return tile_bytes;
  const uint64_t header = frame_header_bytes(max_frame);
  const uint64_t room = slot_bytes > header ? (slot_bytes - header) / max_frame : 0;
  uint64_t bytes = room >= 64 ? room / 64 * 64 : room / esize * esize;
  if (bytes > tile_bytes) bytes = tile_bytes;
  return bytes;
}
// Where chunk k of a frame lies, and whether a received frame's chunk k
// (its header says `len` bytes) is well formed: within its stride, inside
// the message, whole elements.
BRAID_HD uint64_t frame_offset(uint32_t chunks, uint32_t k, uint64_t stride) {
  return frame_header_bytes(chunks) + k * stride;
}
BRAID_HD bool frame_chunk_fits(uint32_t chunks, uint32_t k, uint64_t stride, uint64_t len, uint64_t message_bytes,
                               uint32_t esize) {
  return len <= stride && frame_offset(chunks, k, stride) + len <= message_bytes && len % esize == 0;
}

// One-sided ops (schedule.h).  A Signal's message is the sender's
// PeerBuffers: its process and where its buffers of this call are; a Wait
// keeps the peer's.  The peer's StepBuffers are then this rank's with its
// pointers and scratch stride (every rank cuts a call's buffers alike, from
// the same count, shapes and slices).
struct PeerBuffers {
  uint64_t pid = 0;      // 0: not known yet this call
  uint64_t process = 0;  // with the pid, equal <=> one address space (this_process())
  uint64_t input = 0, output = 0, scratch = 0;
  uint64_t scratch_stride = 0;
};
static_assert(sizeof(PeerBuffers) == 48, "signals carry PeerBuffers as six 64-bit words");
BRAID_HD PeerBuffers peer_buffers_of(const StepBuffers& b, uint64_t pid, uint64_t process) {
  return PeerBuffers{pid, process, uint64_t(uintptr_t(b.input)), uint64_t(uintptr_t(b.output)),
                     uint64_t(uintptr_t(b.scratch)), b.scratch_stride};
}
BRAID_HD StepBuffers peer_step_buffers(StepBuffers b, const PeerBuffers& p) {
  b.input = reinterpret_cast<const char*>(uintptr_t(p.input));
  b.output = reinterpret_cast<char*>(uintptr_t(p.output));
  b.scratch = reinterpret_cast<char*>(uintptr_t(p.scratch));
  b.scratch_stride = p.scratch_stride;
  return b;
}
// Chunk k of a one-sided op in a tile: *mine is this rank's span (a put's
// src, a get's dst), *theirs the peer's, and *my_src (when asked for) this
// rank's own src: a GetReduceCopy's right operand.
BRAID_HD void one_sided_spans(const OpRecord& op, uint32_t k, const StepBuffers& mine, const StepBuffers& theirs,
                              uint64_t capacity, uint32_t slice, uint32_t slices, uint64_t tile, StepSpan* my_span,
                              StepSpan* their_span, StepSpan* my_src = nullptr) {
  const bool put = OpType(op.type) == OpType::Put;
  *my_span = put ? step_span(mine, capacity, slice, slices, op.src_buffer, op.src_index + k, tile)
                 : step_span(mine, capacity, slice, slices, op.dst_buffer, op.dst_index + k, tile);
  *their_span = put ? step_span(theirs, capacity, slice, slices, op.dst_buffer, op.dst_index + k, tile)
                    : step_span(theirs, capacity, slice, slices, op.src_buffer, op.src_index + k, tile);
  if (my_src) *my_src = step_span(mine, capacity, slice, slices, op.src_buffer, op.src_index + k, tile);
}
// A schedule whose messages carry no chunks (one-sided: signals only)
// needs no fragments: a tile this long covers every chunk of the call.
BRAID_HD uint64_t whole_call_tile_elems(const StepBuffers& b, uint64_t scratch_capacity) {
  uint64_t t = b.input_shape.elems() > b.output_shape.elems() ? b.input_shape.elems() : b.output_shape.elems();
  t = t > scratch_capacity ? t : scratch_capacity;
  return t > 0 ? t : 1;
}

// A dependency on op `op` of a lane of `lane_ops` ops is met in tile `tile`
// once that lane has completed this many ops (over all tiles so far).
BRAID_HD uint64_t dep_completions(uint64_t tile, uint32_t lane_ops, uint32_t op) {
  return tile * lane_ops + op + 1;
}

// A run of GetReduces into one chunk (a two-shot's or a reduce-scatter's
// fold), started by a GetReduceCopy or a GetReduce, that both executors
// fold in one pass (src/ops/vector_fold.h, reduce_many): every source read
// once and the chunk written once, not read and written again per peer.
// The fold's order is the ops' order, so the bits are those of the ops one
// by one: srcs = the chunk itself (or, after a GetReduceCopy, the peer's
// chunk and this rank's own), then each later peer's.
// (No initialisers: a kernel keeps one in __shared__ memory; plan_fold_run
// sets every field it reads.)
template <int kMaxSources>
struct FoldRun {
  uint32_t ops;  // fewer than 2: no run (the op runs alone)
  int nsrc;
  char* dst;
  const char* srcs[kMaxSources];
  uint64_t n;  // elements
};

// The run from op `first` of a lane (op_at(j): its op j, j < end), in tile
// `tile` of this slice.  reach(j, op, &theirs) says whether op j may join
// (its dependencies are met; the executor reaches its peer's buffers
// directly) and which they are.  A later op whose chunk is not as long
// ends the run too.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable  // the kernel's reach is device code only
#endif
template <int kMaxSources, typename OpAt, typename Reach>
BRAID_HD void plan_fold_run(uint32_t first, uint32_t end, const OpAt& op_at, const Reach& reach,
                            const StepBuffers& mine, uint64_t capacity, uint32_t slice, uint32_t slices, uint64_t tile,
                            FoldRun<kMaxSources>* run) {
  const OpRecord head = op_at(first);
  const bool copy = OpType(head.type) == OpType::GetReduceCopy;
  int nsrc = copy ? 0 : 1;  // srcs[0]: the chunk itself, unless a GetReduceCopy starts the run
  uint32_t ops = 0;
  run->dst = nullptr;
  run->n = 0;
  for (uint32_t j = first; j < end && nsrc + 2 <= kMaxSources; ++j) {
    const OpRecord op = op_at(j);
    const bool starts = copy && j == first;  // the GetReduceCopy, its own chunk a second source
    if (OpType(op.type) != (starts ? OpType::GetReduceCopy : OpType::GetReduce) || op.count != 1 ||
        op.send_conn >= 0 || op.recv_conn >= 0 || op.dst_buffer != head.dst_buffer || op.dst_index != head.dst_index)
      break;
    StepBuffers theirs;
    if (!reach(j, op, &theirs)) break;
    StepSpan my_span, their_span, own;
    one_sided_spans(op, 0, mine, theirs, capacity, slice, slices, tile, &my_span, &their_span,
                    starts ? &own : nullptr);
    const StepSpan operands[3] = {my_span, their_span, own};
    uint64_t n = 0;
    if (step_length(operands, starts ? 3 : 2, false, 0, &n) != kStepOk || (ops > 0 && n != run->n)) break;
    run->dst = my_span.ptr;
    run->n = n;
    run->srcs[nsrc++] = their_span.ptr;
    if (starts) run->srcs[nsrc++] = own.ptr;
    ++ops;
  }
  if (!copy) run->srcs[0] = run->dst;
  run->nsrc = nsrc;
  run->ops = ops;
}

// One chunk of one op in the current tile: `in` is the received fragment,
// `slot` the one being sent, `n` the elements (step_length).  (The kernel's
// policy is device code only: nvcc's host/device check is off here.)
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Memory>
BRAID_HD void op_step(OpType type, Memory& m, const StepSpan& src, const StepSpan& dst, const char* in, char* slot,
                      uint64_t n) {
  const uint64_t bytes = n * m.esize();
  switch (type) {
    case OpType::Send: m.copy(nullptr, slot, src.ptr, bytes); break;
    case OpType::Recv: m.copy(&dst, nullptr, in, bytes); break;
    case OpType::RecvCopySend: m.copy(&dst, slot, in, bytes); break;
    case OpType::RecvReduceSend: m.reduce(nullptr, slot, in, src, n); break;
    case OpType::RecvReduceCopy: m.reduce(&dst, nullptr, in, src, n); break;
    case OpType::RecvReduceCopySend: m.reduce(&dst, slot, in, src, n); break;
    case OpType::Copy: m.local_copy(dst, src, bytes); break;
    case OpType::Reduce: m.local_reduce(dst, src, n); break;
    case OpType::Nop: break;
    // The executors run these themselves: peers' buffers, and messages
    // without chunks.
    case OpType::Put:
    case OpType::Get:
    case OpType::GetReduce:
    case OpType::GetReduceCopy:
    case OpType::Signal:
    case OpType::Wait: break;
  }
}

}  // namespace braid

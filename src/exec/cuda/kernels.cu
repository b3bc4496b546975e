// The CUDA executor: interprets a DevicePlan (see device_plan.h), one thread
// block per (lane, slice), on the caller's stream.  A large call is cut into
// slices, each a disjoint part of every buffer block with its own
// connections, so that several SMs move one lane's data (NCCL's channels).
//
// Each block walks its lane exactly as the host executor does
// (src/exec/host/collective_task.cc): the same records, and the same
// BRAID_HD op step (src/ops/op_step.h: spans in a slice and tile, step
// lengths, dependencies, the op switch) over the same element semantics
// (src/ops/reduce_ops.h), so the host tests exercise what the kernel
// computes, slices included.
//
// A fragment step: thread 0 waits for its FIFO slots (receive: the sender
// posted one; send: the receiver freed one), the whole block moves/reduces
// the bytes, then thread 0 publishes (tail for a send, head for a receive)
// after a system-scope fence.  Cross-lane dependencies wait on per-lane
// completion counters.  Every wait gives up after timeout_ns or when the
// communicator is aborted, recording why in host-mapped memory: a dead peer
// never hangs the GPU.
#include <cuda_runtime.h>

#include <algorithm>

#include "braid/schedule.h"
#include "src/exec/cuda/device_plan.h"
#include "src/exec/cuda/launch.h"
#include "src/ops/vector_fold.h"
#include "src/plan/duration_stamp.h"

namespace braid::cuda {
namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t load_volatile(const uint64_t* p) { return *(const volatile uint64_t*)p; }
__device__ __forceinline__ uint32_t load_volatile(const uint32_t* p) { return *(const volatile uint32_t*)p; }
__device__ __forceinline__ void store_volatile(uint64_t* p, uint64_t v) { *(volatile uint64_t*)p = v; }

// Spins (thread 0 only) until ready() holds; false on timeout, or when
// wait_stop says (`peer_exited`: see exited_word), with the reason recorded.
template <typename Ready>
__device__ bool spin_until(Ready ready, int* error, const int* abort_flag, const int* peer_exited,
                           uint64_t timeout_ns) {
  if (ready()) return true;
  uint64_t start = now_ns();
  for (uint32_t i = 1;; ++i) {
    if (ready()) return true;
    if ((i & 1023) == 0) {
      if (const int stop = wait_stop(abort_flag, peer_exited); stop != kDevOk) {
        atomicCAS(error, kDevOk, stop);
        return false;
      }
      if (*(volatile int*)error != kDevOk) return false;  // another block already failed
      if (now_ns() - start > timeout_ns) {
        atomicCAS(error, kDevOk, kDevTimeout);
        return false;
      }
    }
  }
}

__device__ void fail(int* error, int code) { atomicCAS(error, kDevOk, code); }

// After a failed spin_until: the first wait to time out says where it was
// (error[kFlagWait...], see DevFlag); others, and aborts, record nothing.
__device__ void record_timeout(int* error, int kind, uint32_t op, uint64_t tile, uint64_t seen, uint64_t want) {
  if (*(volatile int*)error != kDevTimeout || atomicCAS(error + kFlagWaitTaken, 0, 1) != 0) return;
  volatile int* f = error;
  f[kFlagWaitKind] = kind;
  f[kFlagWaitBlockX] = int(blockIdx.x);
  f[kFlagWaitBlockY] = int(blockIdx.y);
  f[kFlagWaitOp] = int(op);
  f[kFlagWaitTile] = int(tile);
  f[kFlagWaitSeen] = int(seen);
  f[kFlagWaitWant] = int(want);
  __threadfence_system();
  f[kFlagWaitTaken] = 2;  // after the fence: the host reads the fields only once it sees this
}

// Byte copy by the whole block, 16 bytes at a time (four loads in flight per
// thread) when alignment allows.  dst2 (may be null) receives the same bytes.
__device__ void block_copy(char* dst, char* dst2, const char* src, uint64_t bytes) {
  uintptr_t align = uintptr_t(dst) | uintptr_t(src) | (dst2 ? uintptr_t(dst2) : 0);
  uint64_t done = 0;
  if ((align & 15) == 0) {
    const uint64_t n = bytes / 16, step = blockDim.x;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    uint4* d2 = reinterpret_cast<uint4*>(dst2);
    uint64_t i = threadIdx.x;
    for (; i + 3 * step < n; i += 4 * step) {
      uint4 v0 = s[i], v1 = s[i + step], v2 = s[i + 2 * step], v3 = s[i + 3 * step];
      d[i] = v0, d[i + step] = v1, d[i + 2 * step] = v2, d[i + 3 * step] = v3;
      if (d2) d2[i] = v0, d2[i + step] = v1, d2[i + 2 * step] = v2, d2[i + 3 * step] = v3;
    }
    for (; i < n; i += step) {
      uint4 v = s[i];
      d[i] = v;
      if (d2) d2[i] = v;
    }
    done = n * 16;
  } else if ((align & 3) == 0) {
    uint64_t n = bytes / 4;
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    uint32_t* d2 = reinterpret_cast<uint32_t*>(dst2);
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) {
      uint32_t v = s[i];
      d[i] = v;
      if (d2) d2[i] = v;
    }
    done = n * 4;
  }
  for (uint64_t i = done + threadIdx.x; i < bytes; i += blockDim.x) {
    char v = src[i];
    dst[i] = v;
    if (dst2) dst2[i] = v;
  }
}

// dst (and dst2 if not null) = srcs[0] (op) srcs[1] (op) ... over n
// elements, by the whole block (vector_fold.h: four 16-byte loads of each
// source in flight per thread where alignment allows).  Not inlined: every
// reduction of the kernels comes here, so its loops are compiled once, not
// at each call; and a function per storage type, so that each gets its
// registers to itself (one function for all of them spilled).
template <typename S>
__device__ __noinline__ void block_fold_typed(ReduceKind kind, char* dst, char* dst2, const char* const* srcs,
                                              int nsrc, uint64_t n) {
  with_reduce_kind(kind, [&](auto k) {
    fold_sources<decltype(k)::value, S>(dst, dst2, srcs, nsrc, n, threadIdx.x, blockDim.x);
  });
}
__device__ void block_fold(ncclDataType_t type, ReduceKind kind, char* dst, char* dst2, const char* const* srcs,
                           int nsrc, uint64_t n) {
  with_storage_type(type, [&](auto storage) {
    block_fold_typed<decltype(storage)>(kind, dst, dst2, srcs, nsrc, n);
  });
}

// dst (and dst2 if not null) = a (op) b over n elements.
__device__ void block_reduce(ncclDataType_t type, ReduceKind kind, char* dst, char* dst2, const char* a,
                             const char* b, uint64_t n) {
  const char* const srcs[2] = {a, b};
  block_fold(type, kind, dst, dst2, srcs, 2, n);
}

// PeerBuffers word by word past L1: a Wait of another block wrote them in
// this launch (ordered by the dependency the verifier requires).
__device__ PeerBuffers load_peer(const PeerBuffers* p) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  return PeerBuffers{load_volatile(w),     load_volatile(w + 1), load_volatile(w + 2),
                     load_volatile(w + 3), load_volatile(w + 4), load_volatile(w + 5)};
}
__device__ void store_peer(PeerBuffers* at, const PeerBuffers& v) {
  uint64_t* w = reinterpret_cast<uint64_t*>(at);
  store_volatile(w, v.pid), store_volatile(w + 1, v.process), store_volatile(w + 2, v.input);
  store_volatile(w + 3, v.output), store_volatile(w + 4, v.scratch), store_volatile(w + 5, v.scratch_stride);
}

// A Put, Get, GetReduce or GetReduceCopy of chunk c in this tile, by the
// whole block, between this rank's buffers and the peer's `d` (what its
// Wait kept, loaded once by thread 0 for the block).  Returns a DevError.
__device__ int one_sided_step(const CollectiveLaunch& L, const OpRecord& op, const PeerBuffers& d, uint32_t c,
                              uint64_t capacity, uint32_t slice, uint32_t slices, uint64_t tile) {
  if (d.pid == 0) return kDevBadPlan;  // touched before the peer's signal: not a verified schedule
  const bool copy = OpType(op.type) == OpType::GetReduceCopy;
  StepSpan mine, theirs, own;
  one_sided_spans(op, c, L.buffers, peer_step_buffers(L.buffers, d), capacity, slice, slices, tile, &mine, &theirs,
                  copy ? &own : nullptr);
  const StepSpan operands[3] = {mine, theirs, own};
  uint64_t n = 0;
  if (step_length(operands, copy ? 3 : 2, false, 0, &n) != kStepOk) return kDevBadPlan;
  const uint64_t bytes = n * L.buffers.esize;
  switch (OpType(op.type)) {
    case OpType::Put: block_copy(theirs.ptr, nullptr, mine.ptr, bytes); break;
    case OpType::Get: block_copy(mine.ptr, nullptr, theirs.ptr, bytes); break;
    case OpType::GetReduceCopy: block_reduce(L.type, L.kind, mine.ptr, nullptr, theirs.ptr, own.ptr, n); break;
    default: block_reduce(L.type, L.kind, mine.ptr, nullptr, mine.ptr, theirs.ptr, n); break;
  }
  return kDevOk;
}

// A run of GetReduces into one chunk (a two-shot's or a reduce-scatter's
// fold) is one pass (op_step.h, plan_fold_run).
constexpr int kMaxFoldSources = 32;
using FoldPlan = FoldRun<kMaxFoldSources>;

// Whether every dependency of `op` in this tile is met now (no waiting).
__device__ bool deps_met_now(const CollectiveLaunch& L, const OpRecord& op, uint64_t tile, const uint32_t* lane_done) {
  for (uint32_t d = 0; d < op.dep_count; ++d) {
    const DepRecord dep = L.deps[op.dep_begin + d];
    if (load_volatile(&lane_done[dep.lane]) < uint32_t(dep_completions(tile, L.lanes[dep.lane].op_count, dep.op)))
      return false;
  }
  return true;
}

// Thread 0: the run from op `first`, whose dependencies were waited for.
// A later op joins only if its own are met already (waiting for them here
// could wait for what op `first`'s completion unblocks) and its peer's
// buffers are known.
__device__ void plan_fold(const CollectiveLaunch& L, const LaneRecord& lane, uint32_t first, uint64_t tile,
                          uint32_t slice, uint32_t slices, uint64_t capacity, const uint32_t* lane_done,
                          FoldPlan* plan) {
  plan_fold_run(
      first, lane.op_count, [&](uint32_t j) { return L.ops[lane.op_begin + j]; },
      [&](uint32_t j, const OpRecord& op, StepBuffers* theirs) {
        if (j > first && !deps_met_now(L, op, tile, lane_done)) return false;
        __threadfence();  // acquire: the Wait that kept this peer's buffers completed
        const PeerBuffers d = load_peer(&L.peers[uint64_t(slice) * L.nranks + uint32_t(op.peer)]);
        if (d.pid == 0) return false;  // op by op, it is reported
        *theirs = peer_step_buffers(L.buffers, d);
        return true;
      },
      L.buffers, capacity, slice, slices, tile, plan);
}

// op_step's memory policy in a thread block (src/ops/op_step.h): the whole
// block moves or reduces the bytes, 16 at a time where alignment allows.
struct BlockMemory {
  ncclDataType_t type;
  ReduceKind kind;
  uint32_t element_bytes;

  __device__ uint32_t esize() const { return element_bytes; }
  __device__ void copy(const StepSpan* dst, char* slot, const char* src, uint64_t bytes) const {
    if (dst) block_copy(dst->ptr, slot, src, bytes);
    else block_copy(slot, nullptr, src, bytes);
  }
  __device__ void reduce(const StepSpan* dst, char* slot, const char* in, const StepSpan& src, uint64_t n) const {
    block_reduce(type, kind, dst ? dst->ptr : slot, dst ? slot : nullptr, in, src.ptr, n);
  }
  __device__ void local_copy(const StepSpan& dst, const StepSpan& src, uint64_t bytes) const {
    if (src.ptr != dst.ptr) block_copy(dst.ptr, nullptr, src.ptr, bytes);
  }
  __device__ void local_reduce(const StepSpan& dst, const StepSpan& src, uint64_t n) const {
    block_reduce(type, kind, dst.ptr, nullptr, dst.ptr, src.ptr, n);
  }
};

// One block per (lane, slice): the walk op_step.h describes, thread 0
// waiting for slots, counters and dependencies, the whole block moving bytes.
__global__ void __launch_bounds__(kThreads) collective_kernel(CollectiveLaunch L) {
  const LaneRecord lane = L.lanes[blockIdx.x];
  const uint32_t slice = blockIdx.y, slices = gridDim.y;
  const DevFifo* fifos = L.fifos + uint64_t(slice) * L.fifos_per_slice;
  uint32_t* lane_done = L.lane_done + uint64_t(slice) * gridDim.x;
  // Tiles and scratch chunks are sized for this slice, the same way on
  // every rank (all compute them from the call's count and the slice count).
  const uint64_t capacity = slice_capacity(L.buffers, slice, slices);
  const uint64_t tiles = slice_tiles(capacity, L.buffers.tile_elems);
  const BlockMemory memory{L.type, L.kind, L.buffers.esize};
  __shared__ bool s_failed;
  __shared__ const char* s_in;
  __shared__ char* s_slot;
  __shared__ uint64_t s_recv_bytes, s_head, s_tail;
  // A one-sided op's peer, as its Wait kept it (raw words: a __shared__
  // variable cannot have PeerBuffers' initialisers).
  __shared__ uint64_t s_peer_words[sizeof(PeerBuffers) / sizeof(uint64_t)];
  PeerBuffers* const s_peer = reinterpret_cast<PeerBuffers*>(s_peer_words);
  __shared__ FoldPlan s_fold;
  if (threadIdx.x == 0) s_failed = false;
  // Before any thread gets near s_failed: the compiler may load it ahead of
  // a `threadIdx.x == 0 &&` test (compute-sanitizer's racecheck saw that).
  __syncthreads();
  uint32_t completed = 0;
  for (uint64_t tile = 0; tile < tiles; ++tile) {
    for (uint32_t i = 0; i < lane.op_count; ++i) {
      const OpRecord op = L.ops[lane.op_begin + i];
      const OpType type = OpType(op.type);
      const bool receives = op.recv_conn >= 0, sends = op.send_conn >= 0;
      const DevFifo* rf = receives ? &fifos[op.recv_conn] : nullptr;
      const DevFifo* sf = sends ? &fifos[op.send_conn] : nullptr;
      if (threadIdx.x == 0) {
        for (uint32_t d = 0; d < op.dep_count && !s_failed; ++d) {
          const DepRecord dep = L.deps[op.dep_begin + d];
          const uint32_t need = uint32_t(dep_completions(tile, L.lanes[dep.lane].op_count, dep.op));
          const uint32_t* counter = &lane_done[dep.lane];
          if (!spin_until([&] { return load_volatile(counter) >= need; }, L.error, L.abort_flag, nullptr,
                          L.timeout_ns)) {
            record_timeout(L.error, kWaitDep, i, tile, load_volatile(counter), need);
            s_failed = true;
          }
        }
      }
      if ((type == OpType::GetReduce || type == OpType::GetReduceCopy) && op.count == 1) {
        if (threadIdx.x == 0) {
          s_fold.ops = 0;  // s_failed: none
          if (!s_failed) plan_fold(L, lane, i, tile, slice, slices, capacity, lane_done, &s_fold);
        }
        __syncthreads();
        if (s_failed) return;
        const uint32_t fold_ops = s_fold.ops;  // thread 0 rewrites it at the next op
        if (fold_ops > 1) {
          __threadfence();  // acquire, as below
          block_fold(L.type, L.kind, s_fold.dst, nullptr, s_fold.srcs, s_fold.nsrc, s_fold.n);
          __threadfence_system();
          __syncthreads();
          if (threadIdx.x == 0) {
            __threadfence();
            completed += fold_ops;
            *(volatile uint32_t*)&lane_done[blockIdx.x] = completed;
          }
          i += fold_ops - 1;
          continue;
        }
      }
      // One message per chunk, or one frame holding all of them (op_step.h).
      const bool framed = op_framed(op);
      const uint32_t messages = framed ? 1 : op.count, per_message = framed ? op.count : 1;
      const uint64_t stride = L.buffers.tile_elems * L.buffers.esize;
      for (uint32_t m = 0; m < messages; ++m) {
        if (threadIdx.x == 0 && !s_failed) {
          if (receives) {
            uint64_t h = load_volatile(rf->head);
            if (!spin_until([&] { return load_volatile(rf->tail) > h; }, L.error, L.abort_flag,
                            exited_word(L.exited, rf->peer), L.timeout_ns)) {
              record_timeout(L.error, kWaitData, i, tile, load_volatile(rf->tail), h + 1);
              s_failed = true;
            } else {
              uint64_t slot = h % L.nslots;
              s_head = h;
              s_in = rf->slots + slot * L.slot_bytes;
              s_recv_bytes = load_volatile(&rf->lengths[slot]);
            }
          }
          if (sends && !s_failed) {
            uint64_t t = load_volatile(sf->tail);
            if (!spin_until([&] { return t - load_volatile(sf->head) < L.nslots; }, L.error, L.abort_flag,
                            exited_word(L.exited, sf->peer), L.timeout_ns)) {
              record_timeout(L.error, kWaitSlot, i, tile, load_volatile(sf->head), t - L.nslots + 1);
              s_failed = true;
            } else {
              s_tail = t;
              s_slot = sf->slots + (t % L.nslots) * L.slot_bytes;
            }
          }
          if (op_one_sided(type) && !s_failed)  // one value for the whole block
            *s_peer = load_peer(&L.peers[uint64_t(slice) * L.nranks + uint32_t(op.peer)]);
          if (framed && receives && !s_failed &&
              (s_recv_bytes < frame_header_bytes(op.count) || load_volatile((const uint64_t*)s_in) != op.count)) {
            fail(L.error, kDevMismatch);
            s_failed = true;
          }
        }
        __syncthreads();
        if (s_failed) return;
        // Acquire: what the peer (or another lane) wrote before moving the
        // counter thread 0 saw must not come from a stale L1 line.
        __threadfence();

        uint64_t message_bytes = framed ? frame_header_bytes(op.count) : 0;
        for (uint32_t k = 0; k < per_message; ++k) {
          const uint32_t c = framed ? k : m;
          const char* in = s_in;
          char* slot = s_slot;
          uint64_t recv_bytes = s_recv_bytes;
          if (framed) {
            const uint64_t at = frame_offset(op.count, k, stride);
            if (receives) {
              recv_bytes = load_volatile((const uint64_t*)s_in + 1 + k);
              if (!frame_chunk_fits(op.count, k, stride, recv_bytes, s_recv_bytes, L.buffers.esize)) {
                if (threadIdx.x == 0) fail(L.error, kDevMismatch);
                return;
              }
              in = s_in + at;
            }
            if (sends) slot = s_slot + at;
          }
          if (op_one_sided(type)) {
            if (const int code = one_sided_step(L, op, *s_peer, c, capacity, slice, slices, tile); code != kDevOk) {
              if (threadIdx.x == 0) fail(L.error, code);
              return;
            }
            continue;
          }
          if (type == OpType::Signal || type == OpType::Wait) {  // a message of PeerBuffers
            if (type == OpType::Wait && recv_bytes != sizeof(PeerBuffers)) {  // every thread sees the same length
              if (threadIdx.x == 0) fail(L.error, kDevMismatch);
              return;
            }
            if (threadIdx.x == 0 && type == OpType::Signal) store_peer(reinterpret_cast<PeerBuffers*>(slot), L.self);
            if (threadIdx.x == 0 && type == OpType::Wait && L.peers)
              store_peer(&L.peers[uint64_t(slice) * L.nranks + uint32_t(op.peer)],
                         load_peer(reinterpret_cast<const PeerBuffers*>(in)));
            message_bytes = sizeof(PeerBuffers);
            continue;
          }
          const StepSpan src = op_reads_src(type)
                                   ? step_span(L.buffers, capacity, slice, slices, op.src_buffer, op.src_index + c, tile)
                                   : StepSpan{};
          const StepSpan dst = op_writes_dst(type)
                                   ? step_span(L.buffers, capacity, slice, slices, op.dst_buffer, op.dst_index + c, tile)
                                   : StepSpan{};
          StepSpan operands[2];
          const int count = step_operands(type, src, dst, operands);
          uint64_t n = 0;
          const int code = step_length(operands, count, receives, recv_bytes / L.buffers.esize, &n);
          if (code != kStepOk) {
            if (threadIdx.x == 0) fail(L.error, code == kStepShortFragment ? kDevMismatch : kDevBadPlan);
            return;
          }
          op_step(type, memory, src, dst, in, slot, n);
          const uint64_t bytes = n * L.buffers.esize;
          if (framed) {
            if (sends && threadIdx.x == 0) store_volatile((uint64_t*)s_slot + 1 + k, bytes);
            message_bytes = frame_offset(op.count, k, stride) + bytes;
          } else {
            message_bytes = bytes;
          }
        }
        if (framed && sends && threadIdx.x == 0) store_volatile((uint64_t*)s_slot, uint64_t(op.count));
        // Our writes (peer slot, local buffers) must be visible before the
        // peer or another lane sees the counters move.
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
          if (sends) {
            store_volatile(&sf->lengths[s_tail % L.nslots], message_bytes);
            __threadfence_system();
            store_volatile(sf->tail, s_tail + 1);
          }
          if (receives) store_volatile(rf->head, s_head + 1);
        }
      }
      if (threadIdx.x == 0) {
        __threadfence();
        *(volatile uint32_t*)&lane_done[blockIdx.x] = ++completed;
      }
    }
  }
}

// Grouped send/recv: one block per (peer, direction).  A message travels as
// slot-sized fragments; every fragment also carries the message's total
// size, so a receiver expecting a different count fails instead of
// truncating or reading someone else's bytes.
__global__ void __launch_bounds__(kThreads) p2p_kernel(P2PLaunch L) {
  const DevP2PBlock block = L.blocks[blockIdx.x];
  __shared__ bool s_failed;
  __shared__ char* s_ptr;
  __shared__ uint64_t s_len, s_pos;
  if (threadIdx.x == 0) s_failed = false;
  for (uint32_t i = 0; i < block.op_count; ++i) {
    const DevP2POp op = L.ops[block.op_begin + i];
    const DevFifo& f = L.fifos[op.fifo];
    uint64_t offset = 0;
    do {
      if (threadIdx.x == 0) {
        if (op.is_send) {
          uint64_t t = load_volatile(f.tail);
          if (!spin_until([&] { return t - load_volatile(f.head) < L.nslots; }, L.error, L.abort_flag,
                          exited_word(L.exited, f.peer), L.timeout_ns)) {
            record_timeout(L.error, kWaitSlot, i, offset, load_volatile(f.head), t - L.nslots + 1);
            s_failed = true;
          }
          s_pos = t;
          s_ptr = f.slots + (t % L.nslots) * L.slot_bytes;
          s_len = min(L.slot_bytes, op.bytes - offset);
        } else {
          uint64_t h = load_volatile(f.head);
          if (!spin_until([&] { return load_volatile(f.tail) > h; }, L.error, L.abort_flag,
                          exited_word(L.exited, f.peer), L.timeout_ns)) {
            record_timeout(L.error, kWaitData, i, offset, load_volatile(f.tail), h + 1);
            s_failed = true;
          } else {
            uint64_t slot = h % L.nslots;
            s_pos = h;
            s_ptr = f.slots + slot * L.slot_bytes;
            s_len = load_volatile(&f.lengths[slot]);
            uint64_t total = load_volatile(&f.totals[slot]);
            if (total != op.bytes || s_len > op.bytes - offset) {
              fail(L.error, kDevMismatch);
              s_failed = true;
            }
          }
        }
      }
      __syncthreads();
      if (s_failed) return;
      __threadfence();  // acquire, as in collective_kernel
      if (op.is_send) block_copy(s_ptr, nullptr, op.buffer + offset, s_len);
      else block_copy(op.buffer + offset, nullptr, s_ptr, s_len);
      __threadfence_system();
      __syncthreads();
      if (threadIdx.x == 0) {
        if (op.is_send) {
          store_volatile(&f.lengths[s_pos % L.nslots], s_len);
          store_volatile(&f.totals[s_pos % L.nslots], op.bytes);
          __threadfence_system();
          store_volatile(f.tail, s_pos + 1);
        } else {
          store_volatile(f.head, s_pos + 1);
        }
      }
      offset += s_len;
      __syncthreads();  // s_len is rewritten by the next fragment's thread 0
    } while (offset < op.bytes);
  }
}

// The LL protocol's memory policy (src/ops/ll_oneshot.h): a line is one
// 16-byte volatile store or load, so both flag-carrying halves move at once
// and the reader's poll never sees a stale L1 copy.  Waits give up as
// spin_until's do: timeout, abort, the exit of the peer waited for, or
// another thread's failure.
struct DeviceLLMemory {
  int* error;
  const int* abort_flag;
  const int* exited;
  uint64_t timeout_ns;
  uint64_t start = 0;  // when the wait for the current line began (0: not yet timed)
  uint32_t spins = 0;
  int waited_peer = -1;
  uint64_t waited_word = 0;

  __device__ void store(LLLine* at, LLLine v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(at), "r"(v.data0), "r"(v.flag0),
                 "r"(v.data1), "r"(v.flag1)
                 : "memory");
  }
  __device__ LLLine load(const LLLine* at) {
    LLLine v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.data0), "=r"(v.flag0), "=r"(v.data1), "=r"(v.flag1)
                 : "l"(at)
                 : "memory");
    return v;
  }
  // The timeout counts from the start of the wait for this line: a thread
  // that got its last line is making progress.
  __device__ bool keep_waiting(int peer, uint64_t word, uint32_t seen, uint32_t want) {
    if (peer != waited_peer || word != waited_word) {
      waited_peer = peer;
      waited_word = word;
      start = 0;
    }
    if ((++spins & 1023) != 0) return true;
    if (start == 0) start = now_ns();
    if (const int stop = wait_stop(abort_flag, exited_word(exited, peer)); stop != kDevOk) {
      atomicCAS(error, kDevOk, stop);
      return false;
    }
    if (*(volatile int*)error != kDevOk) return false;
    if (now_ns() - start > timeout_ns) {
      atomicCAS(error, kDevOk, kDevTimeout);
      record_timeout(error, kWaitLL, uint32_t(peer), word, seen, want);
      return false;
    }
    return true;
  }
};

__global__ void __launch_bounds__(kThreads) ll_kernel(LLLaunch L) {
  const uint64_t seq = load_volatile(L.seq) + 1;  // written back below, after every thread read it
  DeviceLLMemory mem{L.error, L.abort_flag, L.exited, L.timeout_ns};
  ll_oneshot(L.args, seq, threadIdx.x, blockDim.x, mem);  // a failure is in L.error already
  __syncthreads();
  if (threadIdx.x == 0) store_volatile(L.seq, seq);
}

template <typename S>
__global__ void divide_kernel(S* data, uint64_t n, int divisor) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    data[i] = divide_elem(data[i], divisor);
}

template <typename S>
__global__ void scale_kernel(S* out, const S* in, uint64_t n, const S* scalar_device, uint64_t scalar_bits) {
  S k;
  if (scalar_device) k = *scalar_device;
  else memcpy(&k, &scalar_bits, sizeof(S));
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    out[i] = reduce_elem<ReduceKind::Prod>(in[i], k);
}

// One-sided calls (cuda_rma.h).  A signal is launched behind its payload's
// copy on the stream, so the copy has completed when it is stored.  Each
// counter has one writer, the sender, which keeps its own count: a store,
// not an atomic, reaches the peer (no atomics across PCIe needed).
__global__ void rma_signal_kernel(uint64_t* sent, uint64_t* counter) {
  const uint64_t count = *sent + 1;
  *sent = count;
  __threadfence_system();
  store_volatile(counter, count);
}

// A wait: its one thread takes the counters in order.  What this rank consumed
// lives in device memory, so a graph's replays each wait for new signals.
// The closing fence orders the payloads the signals announced before the
// work that follows on the stream.
__global__ void rma_wait_kernel(RmaWaitLaunch L) {
  for (uint32_t i = 0; i < L.n; ++i) {
    const RmaWait& w = L.waits[i];
    const uint64_t* arrived = L.arrived + w.index;
    const uint64_t want = L.consumed[w.index] + w.count;
    if (!spin_until([&] { return load_volatile(arrived) >= want; }, L.error, L.abort_flag, L.exited + w.peer,
                    L.timeout_ns)) {
      record_timeout(L.error, kWaitSignal, uint32_t(w.peer), w.pair, load_volatile(arrived), want);
      return;
    }
    L.consumed[w.index] = want;
  }
  __threadfence_system();
}

// BRAID_STRAGGLER=auto's stamps around a tracked call (src/plan/duration_stamp.h):
// one thread each, so they fit beside the peers' waiting launches.
__global__ void stamp_arrival_kernel(DurationEntry* entry) { stamp_arrival(entry, now_ns()); }
__global__ void stamp_completion_kernel(DurationEntry* entry, uint64_t call) {
  stamp_completion(entry, call, now_ns());
}

}  // namespace

cudaError_t preload_kernels() {
  // CUDA loads modules lazily by default, and a first launch that loads one
  // may wait for the device to go idle: with ranks of one process spinning
  // on each other, that is a deadlock.  Load everything up front.
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, collective_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, p2p_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, ll_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, stamp_arrival_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, stamp_completion_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, rma_signal_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, rma_wait_kernel);
  for (ncclDataType_t type = ncclInt8; e == cudaSuccess && type < ncclNumTypes; type = ncclDataType_t(type + 1))
    with_storage_type(type, [&](auto storage) {
      e = cudaFuncGetAttributes(&attr, divide_kernel<decltype(storage)>);
      if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, scale_kernel<decltype(storage)>);
    });
  return e;
}

cudaError_t resident_collective_blocks(int device, int* blocks) {
  int per_sm = 0, sms = 0;
  cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, collective_kernel, kThreads, 0);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  *blocks = per_sm * sms;
  return e;
}

cudaError_t launch_collective(const CollectiveLaunch& launch, uint32_t lanes, uint32_t slices, cudaStream_t stream) {
  collective_kernel<<<dim3(lanes, slices), kThreads, 0, stream>>>(launch);
  return cudaGetLastError();
}

cudaError_t launch_ll(const LLLaunch& launch, cudaStream_t stream) {
  ll_kernel<<<1, kThreads, 0, stream>>>(launch);
  return cudaGetLastError();
}

cudaError_t launch_stamp_arrival(DurationEntry* entry, cudaStream_t stream) {
  stamp_arrival_kernel<<<1, 1, 0, stream>>>(entry);
  return cudaGetLastError();
}

cudaError_t launch_stamp_completion(DurationEntry* entry, uint64_t call, cudaStream_t stream) {
  stamp_completion_kernel<<<1, 1, 0, stream>>>(entry, call);
  return cudaGetLastError();
}

cudaError_t launch_p2p(const P2PLaunch& launch, uint32_t blocks, cudaStream_t stream) {
  p2p_kernel<<<blocks, kThreads, 0, stream>>>(launch);
  return cudaGetLastError();
}

cudaError_t launch_rma_signal(uint64_t* sent, uint64_t* counter, cudaStream_t stream) {
  rma_signal_kernel<<<1, 1, 0, stream>>>(sent, counter);
  return cudaGetLastError();
}

cudaError_t launch_rma_wait(const RmaWaitLaunch& launch, cudaStream_t stream) {
  rma_wait_kernel<<<1, 1, 0, stream>>>(launch);
  return cudaGetLastError();
}

cudaError_t launch_divide(void* data, uint64_t count, ncclDataType_t type, int divisor, cudaStream_t stream) {
  uint32_t blocks = uint32_t(std::min<uint64_t>(1024, (count + 255) / 256));
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    divide_kernel<S><<<blocks, 256, 0, stream>>>(static_cast<S*>(data), count, divisor);
  });
  return cudaGetLastError();
}

cudaError_t launch_scale(void* out, const void* in, uint64_t count, ncclDataType_t type, const void* scalar_device,
                         uint64_t scalar_bits, cudaStream_t stream) {
  uint32_t blocks = uint32_t(std::max<uint64_t>(1, std::min<uint64_t>(1024, (count + 255) / 256)));
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    scale_kernel<S><<<blocks, 256, 0, stream>>>(static_cast<S*>(out), static_cast<const S*>(in), count,
                                                static_cast<const S*>(scalar_device), scalar_bits);
  });
  return cudaGetLastError();
}

}  // namespace braid::cuda

// braid's MoE device library (issue 40): dispatch and combine primitives a
// user's kernel calls, on NCCL's device API.  Header-only; include it from
// CUDA code built against NCCL's nccl_device headers (2.28 or later), with
// braid's include/ on the path.
//
// The protocol is include/braid/moe/protocol.h, written once for the host
// and the device: rows go out as plain puts with no signal; every agent
// (here: a cooperative group the caller picks, a CTA, a warp, a warp span)
// arrives on a per-destination counter; the last arriver is the leader and
// does one ordering point, then the destination's signal words, each
// carrying a row count and the call's epoch.  The layout
// (include/braid/moe/layout.h) is symmetric, so a sender computes every
// remote offset itself; signals are never reset, epochs move on instead.
//
// What this header adds for a device:
//   LsaMemory<Coop>   the memory model over an ncclWindow_t whose peers are
//                     in this rank's LSA team (NVLink, or ranks sharing a
//                     GPU): a put is a cooperative copy through
//                     ncclGetPeerPointer, the fence a system-scope fence,
//                     a signal word a system-scope release store, an
//                     arrival an acq_rel fetch-add whose result the whole
//                     group sees.  It counts what it moved (counters.h).
//   Timeout           a bounded wait's clock (%globaltimer), which also
//                     stops when a shared stop word is raised.
//   copy_coop         the group's vectorised copy the puts use.
// With those the primitives are plan.h's plan_routes_coop (planning by one
// group, with the sequential planner's slots, so host and device outputs
// match row for row), protocol.h's put_row / put_rows / arrive / commit /
// test / wait / signal_tile / test_tile, LsaMemory's flush, and calls.h's
// dispatch_agent / combine_agent.  put, flush, fence, signal_words and
// arrive are called by every thread of the group, load and pause by any.
//
// A usage sketch, inside a persistent kernel (one CTA per agent):
//   braid::moe::LsaMemory<ncclCoopCta> mm(ncclCoopCta(), window, 0, rank);
//   braid::moe::dispatch_agent(mm, shape, layout, call, rows, blockIdx.x, gridDim.x);
//   ... then test()/wait() on this rank's dispatch_signals half.
// src/moe/cuda/moe_kernels.cu is this library's own host-launched user;
// tests/gpu/moe_persistent.cu a persistent kernel with FlashMoE's roles.
#pragma once

#include <cuda/atomic>
#include <nccl_device.h>
#include <stdint.h>

#include "braid/moe/calls.h"
#include "braid/moe/counters.h"
#include "braid/moe/layout.h"
#include "braid/moe/plan.h"
#include "braid/moe/protocol.h"
#include "braid/moe/signal.h"

namespace braid::moe {

// Thread 0's value, for every thread of the group.
template <int N>
__device__ __forceinline__ uint32_t coop_broadcast(ncclCoopTile<N> coop, uint32_t v) {
  return __shfl_sync(coop.laneMask(), v, 0, N);
}
__device__ __forceinline__ uint32_t coop_broadcast(ncclCoopLanes coop, uint32_t v) {
  return __shfl_sync(coop.lmask, v, __ffs(coop.lmask) - 1);
}
__device__ __forceinline__ uint32_t coop_broadcast(ncclCoopCta coop, uint32_t v) {
  __shared__ uint32_t slot;
  coop.sync();
  if (coop.thread_rank() == 0) slot = v;
  coop.sync();
  return slot;
}
__device__ __forceinline__ uint32_t coop_broadcast(ncclCoopWarpSpan coop, uint32_t v) {
  __shared__ uint32_t slots[16];  // one per span id (NCCL: ids are 0..15)
  coop.sync();
  if (coop.thread_rank() == 0) slots[coop.id] = v;
  coop.sync();
  return slots[coop.id];
}

// The group copies `bytes` from `src` to `dst`, 16 bytes at a time where
// both are 16-byte aligned, bytes after.  No ordering (a put).  Each
// thread issues up to four 16-byte loads before it stores them: a load
// from another rank's memory takes long enough that one in flight per
// thread leaves the copy waiting.
template <class Coop>
__device__ __forceinline__ void copy_coop(Coop coop, void* dst, const void* src, size_t bytes) {
  constexpr int kInFlight = 4;
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const size_t n16 = bytes / 16, step = coop.size();
    uint4* d = static_cast<uint4*>(dst);
    const uint4* s = static_cast<const uint4*>(src);
    for (size_t i = coop.thread_rank(); i < n16; i += kInFlight * step) {
      uint4 v[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j)
        if (i + j * step < n16) v[j] = s[i + j * step];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j)
        if (i + j * step < n16) d[i + j * step] = v[j];
    }
    done = n16 * 16;
  }
  for (size_t i = done + coop.thread_rank(); i < bytes; i += coop.size())
    static_cast<char*>(dst)[i] = static_cast<const char*>(src)[i];
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// protocol.h's memory model for peers in this rank's LSA team, with the
// protocol's region at `offset` of every rank's `window`.  Thread 0 does
// the ordering, the signal stores and the counting.
template <class Coop>
class LsaMemory {
 public:
  __device__ LsaMemory(Coop coop, ncclWindow_t window, size_t offset, int self)
      : coop_(coop), window_(window), offset_(offset), self_(self) {}

  __device__ char* window(int peer) const { return static_cast<char*>(ncclGetPeerPointer(window_, offset_, peer)); }
  __device__ void put(int peer, void* remote, const void* local, size_t bytes) {
    copy_coop(coop_, remote, local, bytes);
    if (coop_.thread_rank() == 0) counters_.put(peer == self_, bytes);
  }
  // Every thread's puts, and those the leader's arrival acquired, before
  // the signals that follow.
  __device__ void fence() {
    coop_.sync();
    if (coop_.thread_rank() == 0) {
      cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
      ++counters_.fences;
    }
    coop_.sync();
  }
  // One release fence, then plain (relaxed) atomic stores: each word is
  // still a release of what came before, without a system-scope barrier
  // per word (a call signals local experts x destinations words).
  __device__ void signal_words(int peer, uint64_t* remote, const uint64_t* words, int32_t n) {
    if (coop_.thread_rank() == 0) {
      cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
      for (int32_t i = 0; i < n; ++i)
        cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(remote[i]).store(words[i], cuda::memory_order_relaxed);
      counters_.signals(peer == self_, n);
    }
    coop_.sync();
  }
  __device__ uint64_t load(const uint64_t* word) {
    return cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*const_cast<uint64_t*>(word))
        .load(cuda::memory_order_acquire);
  }
  // The group's puts are done (sync), then thread 0's release-acquire
  // fetch-add; every thread gets the old value.
  __device__ uint32_t arrive(uint32_t* counter) {
    coop_.sync();
    uint32_t before = 0;
    if (coop_.thread_rank() == 0) {
      cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
      before = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*counter).fetch_add(1u,
                                                                                          cuda::memory_order_acq_rel);
    }
    return coop_broadcast(coop_, before);
  }
  // The group's puts so far are visible system-wide (to the signals and
  // stores that follow, and to the peers that see those).
  __device__ void flush() {
    coop_.sync();
    if (coop_.thread_rank() == 0) cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
    coop_.sync();
  }
  __device__ void pause() { __nanosleep(64); }

  __device__ const Counters& counters() const { return counters_; }  // thread 0's are the group's

 private:
  Coop coop_;
  ncclWindow_t window_;
  size_t offset_;
  int self_;
  Counters counters_;
};

// A bounded wait's `expired` (protocol.h wait): past `deadline_ns` on the
// %globaltimer clock, or `stop` raised (another agent of this call gave up,
// so this one stops waiting too).
struct Timeout {
  uint64_t deadline_ns;
  const int32_t* stop;  // may be null
  __device__ static Timeout after(uint64_t ns, const int32_t* stop) { return {globaltimer_ns() + ns, stop}; }
  __device__ bool operator()() const {
    if (stop && cuda::atomic_ref<int32_t, cuda::thread_scope_system>(*const_cast<int32_t*>(stop))
                        .load(cuda::memory_order_relaxed))
      return true;
    return globaltimer_ns() > deadline_ns;
  }
};

}  // namespace braid::moe

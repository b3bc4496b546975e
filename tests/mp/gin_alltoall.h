// The GIN AlltoAll of NCCL's example 02_gin_alltoall_pure, with the CPU in
// the kernel's place (gin_host_poster.h): every rank puts to every rank,
// itself included, with a signal increment and a counter, three rounds,
// then inline puts with signal adds; every byte and count checked.  For
// the GIN tests (test_device_gin.cc) and the rdma guests
// (tests/rdma/cross_host_ranks.cc, GIN over InfiniBand).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "gin_host_poster.h"
#include "harness.h"

namespace gin_host {

using mp::barrier_all;
using mp::Failures;

constexpr size_t kChunk = 4096 + 40;  // bytes each rank sends each rank: not a multiple of anything
constexpr int kRounds = 3;
// Every round, and the inline puts after them, land in bytes of their own:
// nothing is written where a rank already read.  (A rank's next round
// cannot start before every rank checked the last one, but that order runs
// through other processes, where ThreadSanitizer cannot see it.)
inline size_t dst_bytes(int n) { return size_t(kRounds) * n * kChunk + 8 * size_t(n); }

inline void gin_alltoall(int rank, int n, ncclComm_t comm, Failures& f) {
  char *src = nullptr, *dst = nullptr;
  MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&src), n * kChunk));
  MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&dst), dst_bytes(n) + 4096));
  if (!src || !dst) return;
  for (size_t i = 0; i < n * kChunk; ++i) src[i] = char(rank * 31 + i * 7);
  ncclWindow_t src_win = nullptr, dst_win = nullptr;
  MP_NCCL(f, ncclCommWindowRegister(comm, src, n * kChunk, &src_win, NCCL_WIN_COLL_SYMMETRIC));
  MP_NCCL(f, ncclCommWindowRegister(comm, dst + 4096, dst_bytes(n), &dst_win, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevCommRequirements reqs = {};
  reqs.ginSignalCount = kRounds + 1;  // one per round (a fast rank's next round must not count), one for putValue
  reqs.ginCounterCount = 1;
  ncclDevComm dev = {};
  MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
  if (!src_win || !dst_win || dev.ginContextCount != 1) return f.fail("no GIN context");
  if (dev.ginTypes[0] != NCCL_NET_DEVICE_GIN_PROXY || dev.ginSignalCount != kRounds + 1 || dev.ginCounterCount != 1 ||
      !dev.ginSignalShadows)
    f.fail("devComm GIN fields");
  auto* ctx = static_cast<ncclGinProxyGpuCtx_t*>(dev.ginHandles[0]);
  const char* depth = std::getenv("NCCL_GIN_PROXY_QUEUE_SIZE");
  if (ctx->nranks != n || ctx->queueSize != (depth ? uint32_t(std::atoi(depth)) : 256u))
    f.fail("ncclGinProxyGpuCtx_t: nranks or queueSize");
  const uint16_t sig = uint16_t(dev.ginSignalBase), counter = uint16_t(dev.ginCounterBase);
  const uint64_t dst_base = 4096ull * dst_win->ginOffset4K;  // the window's offset in its allocation
  // Three rounds, each with its own signal, which each put to the target
  // increments; the counter counts every put's local completion.
  for (int round = 1; round <= kRounds; ++round) {
    const size_t at = size_t(round - 1) * n * kChunk;  // this round's part of the window
    for (int k = 0; k < n; ++k) {
      const int peer = (rank + k) % n;
      const int op = ncclGinProxyOpPut | ncclGinProxyOpWithSignalInc | ncclGinProxyOpWithCounter;
      if (!post(ctx, peer,
                build_gfd(op, kChunk, 4096ull * src_win->ginOffset4K + peer * kChunk, handle(src_win),
                          dst_base + at + rank * kChunk, handle(dst_win), counter, uint16_t(sig + round - 1), 0)))
        return f.fail("post: no credit");
    }
    if (!wait_at_least(&ctx->signals[sig + round - 1], uint64_t(n))) return f.fail("a round's signal never reached");
    if (!wait_at_least(&ctx->counters[counter], uint64_t(round) * n)) return f.fail("counter never reached");
    for (int from = 0; from < n; ++from)
      for (size_t i = 0; i < kChunk; ++i)
        if (dst[4096 + at + from * kChunk + i] != char(from * 31 + (rank * kChunk + i) * 7)) {
          f.fail("round " + std::to_string(round) + ": bytes from rank " + std::to_string(from));
          break;
        }
  }
  // putValue: 8 inline bytes and a signal add naming the sender to every
  // rank, so a signal landing on the wrong rank shows in the sum.
  for (int peer = 0; peer < n; ++peer) {
    const int op = ncclGinProxyOpPut | ncclGinProxyOpWithInline | ncclGinProxyOpWithSignalAdd;
    if (!post(ctx, peer,
              build_gfd(op, 8, 0, 0, dst_base + kRounds * n * kChunk + 8 * rank, handle(dst_win), 0,
                        uint16_t(sig + kRounds), uint64_t(rank + 1) << 20, 0x0102030405060708ull * uint64_t(rank + 1))))
      return f.fail("post putValue");
  }
  const uint64_t all_senders = uint64_t(n) * (n + 1) / 2 << 20;
  if (!wait_at_least(&ctx->signals[sig + kRounds], all_senders)) return f.fail("putValue's signal never reached");
  if (__atomic_load_n(&ctx->signals[sig + kRounds], __ATOMIC_ACQUIRE) != all_senders)
    f.fail("putValue's signal overshot");
  for (int from = 0; from < n; ++from) {
    uint64_t v = 0;
    std::memcpy(&v, dst + 4096 + kRounds * n * kChunk + 8 * from, 8);
    if (v != 0x0102030405060708ull * uint64_t(from + 1)) f.fail("putValue from rank " + std::to_string(from));
  }
  ncclResult_t async = ncclSuccess;
  MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) f.fail("async error after good descriptors");
  barrier_all(comm, f);
  MP_NCCL(f, ncclDevCommDestroy(comm, &dev));
  MP_NCCL(f, ncclCommWindowDeregister(comm, src_win));
  MP_NCCL(f, ncclCommWindowDeregister(comm, dst_win));
  MP_NCCL(f, ncclMemFree(src));
  MP_NCCL(f, ncclMemFree(dst));
}


}  // namespace gin_host

// The device side of NCCL 2.28.9's GIN proxy backend, on the CPU: what a
// kernel built against NVIDIA's installed headers does to post a put
// (nccl_device/gin/proxy/gin_proxy.h: buildGfd, postGfd) and to wait on a
// signal or counter (waitSignal, readCounter), written with the headers'
// own descriptor type.  For clients of braid's device communicators that
// run on the host backend: the GIN tests (tests/mp/test_device_gin.cc) and
// gin_perf.  Needs <nccl_device/...> on the include path.
#pragma once

#include <nccl_device/core.h>
#include <nccl_device/gin/proxy/gin_proxy_device_host_common.h>
#include <nccl_device/impl/comm__types.h>
#include <nccl_device/impl/core__types.h>
#include <sched.h>

#include <chrono>
#include <cstdint>
#include <cstring>

namespace gin_host {

// What buildGfd writes for a put (or, with `inline_value`, a putValue).
inline ncclGinProxyGfd_t build_gfd(int op, uint64_t size, uint64_t src_off, uint64_t src_handle, uint64_t dst_off,
                                   uint64_t dst_handle, uint16_t counter, uint16_t signal, uint64_t signal_value,
                                   uint64_t inline_value = 0) {
  ncclGinProxyGfd_t g;
  std::memset(&g, 0xee, sizeof g);  // the device's build buffer is not cleared either
  g.qword[ncclGinProxyGfdHeader].header.flag = 1;
  g.qword[ncclGinProxyGfdHeader].header.op = op;
  g.qword[ncclGinProxyGfdHeader].header.size = size;
  if (op & ncclGinProxyOpWithInline) {
    g.qword[ncclGinProxyGfdInlineLow].inlineLow.flag = 1;
    g.qword[ncclGinProxyGfdInlineLow].inlineLow.inlineValLow = uint32_t(inline_value);
    g.qword[ncclGinProxyGfdInlineLow].inlineLow.inlineValLow2 = uint16_t(inline_value >> 32);
    g.qword[ncclGinProxyGfdInlineHigh].inlineHigh.flag = 1;
    g.qword[ncclGinProxyGfdInlineHigh].inlineHigh.inlineValHigh = uint16_t(inline_value >> 48);
  } else {
    g.qword[ncclGinProxyGfdSrcOff].srcOff.flag = 1;
    g.qword[ncclGinProxyGfdSrcOff].srcOff.srcOff = src_off;
    g.qword[ncclGinProxyGfdSrcHandle].srcHandle.flag = 1;
    g.qword[ncclGinProxyGfdSrcHandle].srcHandle.srcHandle = src_handle;
  }
  g.qword[ncclGinProxyGfdDstOff].dstOff.flag = 1;
  g.qword[ncclGinProxyGfdDstOff].dstOff.dstOff = dst_off;
  g.qword[ncclGinProxyGfdDstHandle].dstHandle.flag = 1;
  g.qword[ncclGinProxyGfdDstHandle].dstHandle.dstHandle = dst_handle;
  g.qword[ncclGinProxyGfdCompletion].completion.flag = 1;
  g.qword[ncclGinProxyGfdCompletion].completion.counterId = counter;
  g.qword[ncclGinProxyGfdCompletion].completion.signalId = signal;
  g.qword[ncclGinProxyGfdCompletion].completion.signalValLow = uint16_t(signal_value);
  g.qword[ncclGinProxyGfdSignalVal].signalVal.flag = 1;
  g.qword[ncclGinProxyGfdSignalVal].signalVal.signalValLow2 = uint16_t(signal_value >> 16);
  g.qword[ncclGinProxyGfdSignalVal].signalVal.signalValHigh = uint32_t(signal_value >> 32);
  g.qword[ncclGinProxyGfdReserved].flag.v = 1;
  return g;
}

// postGfd: a slot of target `pe`'s queue, once the proxy gave credit.
inline bool post(ncclGinProxyGpuCtx_t* ctx, int pe, const ncclGinProxyGfd_t& g) {
  const uint32_t idx = __atomic_fetch_add(&ctx->pis[pe], 1u, __ATOMIC_RELAXED);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ctx->queueSize <= idx - __atomic_load_n(&ctx->cis[pe], __ATOMIC_ACQUIRE))
    if (std::chrono::steady_clock::now() > until)
      return false;
    else
      sched_yield();
  uint64_t* slot =
      reinterpret_cast<uint64_t*>(&ctx->queues[size_t(pe) * ctx->queueSize + (idx & (ctx->queueSize - 1))]);
  uint64_t words[8];
  std::memcpy(words, &g, sizeof words);
  for (int w = 7; w >= 0; --w) __atomic_store_n(&slot[w], words[w], __ATOMIC_RELEASE);  // the header last
  return true;
}

// waitSignal / a counter read: until *word reaches `value`, bounded.
inline bool wait_at_least(const uint64_t* word, uint64_t value) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value)
    if (std::chrono::steady_clock::now() > until)
      return false;
    else
      sched_yield();
  return true;
}

inline uint64_t handle(ncclWindow_t w) { return reinterpret_cast<uint64_t>(w->ginWins[0]); }

}  // namespace gin_host

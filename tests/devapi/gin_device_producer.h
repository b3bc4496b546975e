// A CPU stand-in for the device side of NCCL 2.28.9's GIN proxy backend:
// posts descriptors exactly as postGfd (nccl_device/gin/proxy/gin_proxy.h)
// does, and flushes as its flush() does, on plain host memory.
//   post: idx = pis[pe]++ (relaxed); wait while idx - cis[pe] >= queueSize;
//         write the 64 bytes as four 16-byte pieces, in no fixed order (the
//         device's four __stwt stores carry no ordering among themselves;
//         the order here rotates so the proxy meets half-written slots);
//   flush: wait until pis[pe] <= cis[pe] (rolling) for every pe.
// The device's fence.release.sys before building a GFD is the release
// order of the stores here.  Waits are bounded: false means it timed out.
// No Catch2 inside: ranks that are threads or processes call it.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "src/devapi/gin_gfd.h"
#include "src/devapi/gin_proxy.h"

namespace devapi_test {

using braid::devapi::Gfd;
using braid::devapi::GinQueues;
using braid::devapi::kGfdQwords;

// Host memory for one context's queues, zeroed, as braid lays it out.
struct QueueMemory {
  QueueMemory(int nranks, uint32_t queue_size, uint32_t counters, uint32_t signals)
      : gfds(size_t(nranks) * queue_size * kGfdQwords), pis(nranks), cis(nranks), counter_words(counters) {
    q.nranks = nranks;
    q.queue_size = queue_size;
    q.gfds = gfds.data();
    q.pis = pis.data();
    q.cis = cis.data();
    q.counters = counter_words.data();
    q.counter_count = counters;
    q.signal_count = signals;
  }
  std::vector<uint64_t> gfds;
  std::vector<uint32_t> pis, cis;
  std::vector<uint64_t> counter_words;
  GinQueues q;
};

class DeviceProducer {
 public:
  explicit DeviceProducer(const GinQueues& q, std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : q_(q), timeout_(timeout) {}

  bool post(int pe, const Gfd& g) {
    uint64_t words[kGfdQwords];
    braid::devapi::encode_gfd(braid::devapi::GfdFormat::kV1, g, words);
    return post_raw(pe, words, kGfdQwords);
  }

  // Writes only the qwords below `qwords_written`: all 8 normally; fewer
  // leaves a torn descriptor, as a kernel that died mid-post would.
  bool post_raw(int pe, const uint64_t words[kGfdQwords], int qwords_written) {
    const uint32_t idx = __atomic_fetch_add(&q_.pis[pe], 1u, __ATOMIC_RELAXED);
    const auto until = std::chrono::steady_clock::now() + timeout_;
    while (q_.queue_size <= idx - __atomic_load_n(&q_.cis[pe], __ATOMIC_ACQUIRE)) {
      if (std::chrono::steady_clock::now() > until) return false;
      sched_yield();
    }
    uint64_t* slot = q_.gfds + (size_t(pe) * q_.queue_size + (idx & (q_.queue_size - 1))) * kGfdQwords;
    static const int kOrders[4][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}};
    const int* order = kOrders[idx % 4];
    for (int k = 0; k < 4; ++k) {
      const int piece = order[k];
      for (int w = 2 * piece; w < 2 * piece + 2; ++w)
        if (w < qwords_written) __atomic_store_n(&slot[w], words[w], __ATOMIC_RELEASE);
      if (k == 1 && idx % 8 == 0) std::this_thread::yield();  // let the proxy see half of it
    }
    return true;
  }

  bool flush() {
    const auto until = std::chrono::steady_clock::now() + timeout_;
    for (int pe = 0; pe < q_.nranks; ++pe) {
      for (;;) {
        const uint32_t p = __atomic_load_n(&q_.pis[pe], __ATOMIC_RELAXED);
        const uint32_t c = __atomic_load_n(&q_.cis[pe], __ATOMIC_ACQUIRE);
        if (int32_t(p - c) <= 0) break;
        if (std::chrono::steady_clock::now() > until) return false;
        sched_yield();
      }
    }
    return true;
  }

 private:
  GinQueues q_;
  std::chrono::milliseconds timeout_;
};

// A put of `bytes` from window `src` to window `dst`, as ncclGin::put posts it.
inline Gfd put_gfd(uint64_t src, uint64_t src_off, uint64_t dst, uint64_t dst_off, uint64_t bytes) {
  Gfd g;
  g.op = braid::devapi::kGfdPut;
  g.size = bytes;
  g.src_handle = src;
  g.src_off = src_off;
  g.dst_handle = dst;
  g.dst_off = dst_off;
  return g;
}

}  // namespace devapi_test

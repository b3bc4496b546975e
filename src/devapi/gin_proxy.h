// The GIN proxy: executes the descriptors a kernel posts to one GIN
// context of NCCL 2.28.9's proxy backend (ncclGinProxyGpuCtx_t).
//
// Per target rank pe the device claims slot pis[pe]++ (waiting while the
// queue is full against cis[pe]) and writes a 64-byte GFD there; there is no
// doorbell.  The proxy's thread visits the targets round-robin, at most one
// descriptor each per turn, and for the next slot of a target:
//   1. takes it once all 8 valid flags are set (the four 16-byte stores
//      land in any order); a slot still half-written torn_timeout after it
//      was first seen so is an error (the other targets go on meanwhile);
//   2. copies the descriptor, decodes and checks it, then performs the put
//      (and its signal add) on the target's GinLink, in issue order, which
//      is what makes a signal visible only after its own and every earlier
//      payload to that target;
//   3. zeroes the slot (the device reuses it as soon as cis passes it),
//      adds 1 to counters[counterId] if asked (local completion: the source
//      was consumed), then publishes cis[pe] + 1 with release order.
// A descriptor that fails any check stops the proxy before its slot is
// consumed, with the error in the GinFault: braid does not guess at a
// malformed request, and every bounded wait then reports it.  The running
// proxy then drains its queues (consumes descriptors without executing
// them) so a kernel still posting cannot hang; stop() aborts the links (no
// close frames), so the targets see this rank fail.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "src/devapi/gin_gfd.h"
#include "src/devapi/gin_link.h"

namespace braid::devapi {

// The host's view of one context's queues (the same memory the device's
// ncclGinProxyGpuCtx_t points at; on the host backend, plain host memory).
struct GinQueues {
  int nranks = 0;
  uint32_t queue_size = 0;     // a power of two
  uint64_t* gfds = nullptr;    // nranks x queue_size x 8 qwords
  uint32_t* pis = nullptr;     // producer indices (written by the device)
  uint32_t* cis = nullptr;     // consumer indices (written here)
  uint64_t* counters = nullptr;
  uint32_t counter_count = 0;
  uint32_t signal_count = 0;  // every rank's signal array has this many (symmetric)
};

struct GinProxyOptions {
  // How long a descriptor may stay half-written before the proxy gives up.
  std::chrono::milliseconds torn_timeout{5000};
  // Called while the queues are idle, at most every watch_interval: an
  // error (a target that died) faults the proxy as a bad descriptor does.
  std::function<Status()> watch;
  std::chrono::milliseconds watch_interval{100};
  // Pauses the idle proxy spins before it yields its core (base/deadline.h).
  // Where the threads that post outnumber the cores, a spinning proxy keeps
  // them from posting: 0 there.
  uint32_t idle_spins = 1000;
};

class GinProxy {
 public:
  // links[pe]: how to reach world rank pe (the rank itself included);
  // sources: this rank's windows, where puts read from.
  static Status create(const GinQueues& queues, std::vector<std::unique_ptr<GinLink>> links,
                       const GinWindowTable* sources, GinFault* fault, GinProxyOptions options,
                       std::unique_ptr<GinProxy>* out);
  ~GinProxy();  // stops the thread

  // Starts the executor thread.
  void start();
  // Processes at most one descriptor per target; *progressed if any.  For
  // callers that drive the proxy themselves instead of start().
  Status poll_once(bool* progressed);
  // Stops the thread (after what it is doing), then closes the links.
  Status stop();
  uint64_t executed() const { return executed_.load(std::memory_order_relaxed); }

 private:
  GinProxy(const GinQueues& q, std::vector<std::unique_ptr<GinLink>> links, const GinWindowTable* sources,
           GinFault* fault, GinProxyOptions options);
  void run();
  void drain();
  uint64_t* slot_of(int pe, uint32_t idx) const {
    return q_.gfds + (size_t(pe) * q_.queue_size + (idx & (q_.queue_size - 1))) * kGfdQwords;
  }
  Status poll_target(int pe, bool* progressed);
  Status execute(int pe, const Gfd& g);

  GinQueues q_;
  std::vector<std::unique_ptr<GinLink>> links_;
  const GinWindowTable* sources_;
  GinFault* fault_;
  GinProxyOptions options_;
  std::vector<uint32_t> next_;  // per target: the next slot index to consume
  // Per target: when its next slot was first seen half-written (zero: not).
  std::vector<std::chrono::steady_clock::time_point> torn_since_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> faulted_{false};  // a descriptor failed: stop() aborts the links
  std::atomic<uint64_t> executed_{0};
  std::thread thread_;
  bool closed_ = false;
};

}  // namespace braid::devapi

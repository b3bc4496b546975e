// The GIN proxy: executes the descriptors a kernel posts to the GIN
// contexts of NCCL's proxy backend (ncclGinProxyGpuCtx_t: 2.28.9's one
// context with 64-byte GFDs, or 2.30's array of contexts with 128-byte
// ones, src/devapi/gin_gfd.h).
//
// Per context and target rank pe the device claims slot pis[pe]++ (waiting
// while the queue is full against cis[pe]) and writes a GFD there; there is
// no doorbell.  The proxy's one thread visits every (context, target)
// round-robin, at most one descriptor each per turn, and for the next slot:
//   1. takes it once all its valid flags are set (the 16-byte stores land
//      in any order); a slot still half-written torn_timeout after it was
//      first seen so is an error (the other queues go on meanwhile);
//   2. copies the descriptor, decodes and checks it, then performs it on
//      the target's GinLink (a put and its signal add to the context's
//      signal word, a VA signal, a get into this rank's window), in issue
//      order, which is what makes a signal visible only after its own and
//      every earlier payload to that target.  Every context shares the
//      target's link, so every signal is "strong" (2.30's term).  A get is
//      consumed once it is asked for (for 2.30.3-2.30.4's kernels, once
//      its bytes landed); its bytes land later (the TCP link's
//      answers, which every turn lands as they arrive).  A flush is
//      consumed only once every get issued before it was first seen has
//      landed, on every link: the device's Wait posts one to make its gets'
//      bytes visible;
//   3. adds 1 to counters[counterId] if asked (local completion: the
//      source was consumed), zeroes the slot (the device reuses it as soon
//      as cis passes it), then publishes cis[pe] + 1 with release order.
// A descriptor that fails any check stops the proxy before its slot is
// consumed, with the error in the GinFault: braid does not guess at a
// malformed request, and every bounded wait then reports it.  The proxy
// then drains its queues (consumes descriptors without executing them) so
// a kernel still posting cannot hang; stop() aborts the links (no close
// frames), so the targets see this rank fail.
//
// A proxy is driven by its own thread (start()), or by a GinProgress
// thread that drives several (every devComm of a communicator, as NCCL
// runs one GIN progress thread per communicator), or by hand (step()).
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
  GfdFormat format = GfdFormat::kV1;
  int nranks = 0;
  uint32_t queue_size = 0;     // a power of two
  uint64_t* gfds = nullptr;    // nranks x queue_size descriptors
  uint32_t* pis = nullptr;     // producer indices (written by the device)
  uint32_t* cis = nullptr;     // consumer indices (written here)
  uint64_t* counters = nullptr;
  uint32_t counter_count = 0;
  uint32_t signal_count = 0;  // signals of this context (the same on every rank)
  uint32_t signal_base = 0;   // where they start in every rank's signal array
  // A get is consumed only once its bytes landed, for kernels whose flush
  // waits only for consumption, posting no flush descriptor: 2.30.3-2.30.4's
  // flush(), and 2.31's flush with a timeout.
  bool gets_consumed_landed = false;
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
  // One proxy for every context in `contexts` (of one format and world).
  // links[pe]: how to reach world rank pe (the rank itself included);
  // sources: this rank's windows, where puts read from and gets write to.
  static Status create(std::vector<GinQueues> contexts, std::vector<std::unique_ptr<GinLink>> links,
                       const GinWindowTable* sources, GinFault* fault, GinProxyOptions options,
                       std::unique_ptr<GinProxy>* out);
  ~GinProxy();  // stops the thread

  // Starts a thread of its own that steps it.
  void start();
  // One turn: at most one descriptor per queue, the watch when idle, and
  // after a fault a drain; true if a descriptor was consumed.  From one
  // thread at a time, never beside start()'s.
  bool step();
  // The turn without the fault handling: an error is returned (and the
  // proxy marked faulted), for tests that look at it.
  Status poll_once(bool* progressed);
  // Stops the thread (after what it is doing), then closes the links.
  Status stop();
  uint64_t executed() const { return executed_.load(std::memory_order_relaxed); }

 private:
  GinProxy(std::vector<GinQueues> contexts, std::vector<std::unique_ptr<GinLink>> links,
           const GinWindowTable* sources, GinFault* fault, GinProxyOptions options);
  void run();
  void drain_once(bool* progressed);
  // Queue i is context i / nranks' queue to target i % nranks.
  uint64_t* slot_of(size_t i, uint32_t idx) const {
    const GinQueues& q = contexts_[i / size_t(nranks_)];
    return q.gfds + (size_t(i % size_t(nranks_)) * q.queue_size + (idx & (q.queue_size - 1))) * gfd_qwords(format_);
  }
  // Queue i's next slot's words, loaded with acquire order, into `words`.
  const uint64_t* read_slot(size_t i, uint64_t* words) const;
  void consume(size_t i);
  uint32_t* cis_of(size_t i) const { return &contexts_[i / size_t(nranks_)].cis[i % size_t(nranks_)]; }
  Status poll_queue(size_t i, bool* progressed);
  Status execute(const GinQueues& q, int pe, const Gfd& g);
  // Lands what has arrived for the links' gets in flight.
  Status land_gets(bool* progressed);
  // Whether queue i's flush may be consumed: every get issued on any link
  // before it was first seen has landed.
  bool flush_done(size_t i);

  std::vector<GinQueues> contexts_;
  GfdFormat format_;  // every context's
  int nranks_;
  std::vector<std::unique_ptr<GinLink>> links_;
  const GinWindowTable* sources_;
  GinFault* fault_;
  GinProxyOptions options_;
  std::vector<uint32_t> next_;  // per queue: the next slot index to consume
  // Per queue: when its next slot was first seen half-written (zero: not).
  std::vector<std::chrono::steady_clock::time_point> torn_since_;
  // Per queue whose next descriptor is a flush: each link's gets issued
  // when it was first seen (empty: none waiting).
  std::vector<std::vector<uint64_t>> flush_upto_;
  // Per queue: the get (its link's ticket) whose landing its consumption
  // waits for (GinQueues::gets_consumed_landed), or 0.
  std::vector<uint64_t> landing_;
  std::chrono::steady_clock::time_point next_watch_{};
  std::atomic<bool> stop_{false};
  std::atomic<bool> faulted_{false};  // a descriptor failed: stop() aborts the links
  std::atomic<uint64_t> executed_{0};
  std::thread thread_;
  bool closed_ = false;
};

}  // namespace braid::devapi

// The GIN proxy's loop.  Memory order: the device publishes a GFD by its
// stores alone, so the flags are read with acquire loads, the rest after
// them; the slot is cleared and the counter bumped before the release store
// of cis, so a device that sees the new cis sees a clean slot and the count.
#include "src/devapi/gin_proxy.h"

#include <bit>
#include <exception>

#include "src/base/deadline.h"

namespace braid::devapi {

Status GinProxy::create(const GinQueues& q, std::vector<std::unique_ptr<GinLink>> links, const GinWindowTable* sources,
                        GinFault* fault, GinProxyOptions options, std::unique_ptr<GinProxy>* out) {
  if (q.nranks <= 0) return BRAID_ERROR(ncclInvalidArgument, "GIN proxy for {} ranks", q.nranks);
  if (!std::has_single_bit(q.queue_size))
    return BRAID_ERROR(ncclInvalidArgument, "GIN queue size {} is not a power of two", q.queue_size);
  if (!q.gfds || !q.pis || !q.cis) return BRAID_ERROR(ncclInvalidArgument, "GIN queues without memory");
  if (q.counter_count && !q.counters) return BRAID_ERROR(ncclInvalidArgument, "GIN counters without memory");
  if (int(links.size()) != q.nranks)
    return BRAID_ERROR(ncclInvalidArgument, "GIN proxy has {} links for {} ranks", links.size(), q.nranks);
  for (int pe = 0; pe < q.nranks; ++pe)
    if (!links[pe]) return BRAID_ERROR(ncclInvalidArgument, "GIN proxy has no link to rank {}", pe);
  if (!sources || !fault) return BRAID_ERROR(ncclInvalidArgument, "GIN proxy without source windows or fault");
  out->reset(new GinProxy(q, std::move(links), sources, fault, options));
  return Status::ok();
}

GinProxy::GinProxy(const GinQueues& q, std::vector<std::unique_ptr<GinLink>> links, const GinWindowTable* sources,
                   GinFault* fault, GinProxyOptions options)
    : q_(q), links_(std::move(links)), sources_(sources), fault_(fault), options_(options), next_(q.nranks), torn_since_(q.nranks) {
  // Resume where the consumer indices stand (zero for a fresh context).
  for (int pe = 0; pe < q.nranks; ++pe) next_[pe] = __atomic_load_n(&q.cis[pe], __ATOMIC_ACQUIRE);
}

GinProxy::~GinProxy() { (void)stop(); }

void GinProxy::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

Status GinProxy::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  if (closed_) return Status::ok();
  closed_ = true;
  Status first;
  for (auto& link : links_) {
    // A proxy that faulted ends its links as failed, so the targets report
    // it at once rather than when their waits time out.
    Status s = Status::ok();
    if (faulted_.load(std::memory_order_acquire)) link->abort();
    else s = link->close();
    if (first.is_ok()) first = s;
  }
  return first;
}

void GinProxy::run() {
  Waiter waiter(options_.idle_spins);
  auto next_watch = std::chrono::steady_clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    bool progressed = false;
    Status s;
    try {
      s = poll_once(&progressed);
      if (s.is_ok() && !progressed && options_.watch && std::chrono::steady_clock::now() >= next_watch) {
        s = options_.watch();
        next_watch = std::chrono::steady_clock::now() + options_.watch_interval;
      }
    } catch (const std::exception& e) {  // allocation failures in messages: never std::terminate
      faulted_.store(true, std::memory_order_release);
      s = BRAID_ERROR(ncclInternalError, "GIN proxy: {}", e.what());
    }
    if (!s.is_ok()) {
      faulted_.store(true, std::memory_order_release);
      fault_->set(std::move(s).context("GIN proxy"));
      drain();
      return;
    }
    if (progressed)
      waiter.reset();
    else
      waiter.pause();
  }
}

// After a fault: consume every complete descriptor without executing it,
// until stop().  NCCL 2.28's device code has no abort flag; a kernel waiting
// for a free slot or for its puts to be consumed (flush) would otherwise
// spin forever.  Nothing moves and no counter counts: the fault, reported
// to every bounded wait on the host, is the outcome.
void GinProxy::drain() {
  Waiter waiter;
  while (!stop_.load(std::memory_order_acquire)) {
    bool progressed = false;
    for (int pe = 0; pe < q_.nranks; ++pe) {
      const uint32_t idx = next_[pe];
      uint64_t* slot = slot_of(pe, idx);
      uint64_t q[kGfdQwords];
      for (int i = 0; i < kGfdQwords; ++i) q[i] = __atomic_load_n(&slot[i], __ATOMIC_ACQUIRE);
      if (!gfd_complete(q)) continue;
      for (int i = 0; i < kGfdQwords; ++i) __atomic_store_n(&slot[i], uint64_t(0), __ATOMIC_RELAXED);
      next_[pe] = idx + 1;
      __atomic_store_n(&q_.cis[pe], idx + 1, __ATOMIC_RELEASE);
      progressed = true;
    }
    if (progressed)
      waiter.reset();
    else
      waiter.pause();
  }
}

Status GinProxy::poll_once(bool* progressed) {
  *progressed = false;
  for (int pe = 0; pe < q_.nranks; ++pe) {
    Status s = poll_target(pe, progressed);
    if (!s.is_ok()) {
      faulted_.store(true, std::memory_order_release);
      return s;
    }
  }
  return Status::ok();
}

Status GinProxy::poll_target(int pe, bool* progressed) {
  const uint32_t idx = next_[pe];
  uint64_t* slot = slot_of(pe, idx);
  if (!(__atomic_load_n(&slot[0], __ATOMIC_ACQUIRE) & 1)) return Status::ok();
  uint64_t q[kGfdQwords];
  for (int i = 0; i < kGfdQwords; ++i) q[i] = __atomic_load_n(&slot[i], __ATOMIC_ACQUIRE);
  if (!gfd_complete(q)) {
    // Half-written: the other targets go on meanwhile; this one is looked at
    // again next turn, until torn_timeout from when it was first seen so.
    const auto now = std::chrono::steady_clock::now();
    if (torn_since_[pe] == std::chrono::steady_clock::time_point{}) torn_since_[pe] = now;
    if (now - torn_since_[pe] < options_.torn_timeout) return Status::ok();
    return BRAID_ERROR(ncclSystemError,
                       "GIN descriptor {} to rank {} stayed half-written (flags {:08b}) past {} ms: the kernel that "
                       "posted it died or the queue memory is corrupt",
                       idx, pe, [&] {
                         unsigned f = 0;
                         for (int i = 0; i < kGfdQwords; ++i) f |= unsigned(q[i] & 1) << i;
                         return f;
                       }(), options_.torn_timeout.count());
  }
  torn_since_[pe] = {};
  Gfd g;
  Status s = decode_gfd(q, &g);
  if (!s.is_ok()) return std::move(s).context(fmt::format("descriptor {} to rank {}", idx, pe));
  BRAID_TRY(execute(pe, g));
  for (int i = 0; i < kGfdQwords; ++i) __atomic_store_n(&slot[i], uint64_t(0), __ATOMIC_RELAXED);
  if (g.has_counter()) __atomic_fetch_add(&q_.counters[g.counter_id], uint64_t(1), __ATOMIC_RELAXED);
  next_[pe] = idx + 1;
  __atomic_store_n(&q_.cis[pe], idx + 1, __ATOMIC_RELEASE);
  executed_.fetch_add(1, std::memory_order_relaxed);
  *progressed = true;
  return Status::ok();
}

Status GinProxy::execute(int pe, const Gfd& g) {
  if (g.has_counter() && g.counter_id >= q_.counter_count)
    return BRAID_ERROR(ncclInvalidArgument, "GIN counter {} out of range [0, {}) in a put to rank {}", g.counter_id,
                       q_.counter_count, pe);
  // Checked here, before any byte moves: the target may be a process that
  // would only find out after the payload landed.
  if (g.has_signal() && g.signal_id >= q_.signal_count)
    return BRAID_ERROR(ncclInvalidArgument, "GIN signal {} out of range [0, {}) in a put to rank {}", g.signal_id,
                       q_.signal_count, pe);
  const void* src = &g.inline_value;  // little-endian: the value's low `size` bytes first
  if (g.size && !g.has_inline()) {
    char* p = nullptr;
    BRAID_TRY(sources_->resolve(g.src_handle, g.src_off, g.size, &p));
    src = p;
  }
  if (g.size == 0 && !g.has_signal()) return Status::ok();  // an empty put: only its counter (if any) counts
  GinSignalAdd signal{g.signal_id, g.signal_add()};
  Status s = links_[pe]->put(g.dst_handle, g.dst_off, src, g.size, g.has_signal() ? &signal : nullptr);
  if (!s.is_ok()) return std::move(s).context(fmt::format("GIN put of {} bytes to rank {}", g.size, pe));
  return Status::ok();
}

}  // namespace braid::devapi

// The GIN proxy's loop.  Memory order: the device publishes a GFD by its
// stores alone, so the flags are read with acquire loads, the rest after
// them; the slot is cleared and the counter bumped before the release store
// of cis, so a device that sees the new cis sees a clean slot and the count.
#include "src/devapi/gin_proxy.h"

#include <bit>
#include <exception>

#include "src/base/deadline.h"
#include "src/base/log.h"
#include "src/base/thread_name.h"

namespace braid::devapi {

Status GinProxy::create(std::vector<GinQueues> contexts, std::vector<std::unique_ptr<GinLink>> links,
                        const GinWindowTable* sources, GinFault* fault, GinProxyOptions options,
                        std::unique_ptr<GinProxy>* out) {
  if (contexts.empty()) return BRAID_ERROR(ncclInvalidArgument, "GIN proxy for no context");
  const int nranks = contexts[0].nranks;
  if (nranks <= 0) return BRAID_ERROR(ncclInvalidArgument, "GIN proxy for {} ranks", nranks);
  for (const GinQueues& q : contexts) {
    if (q.nranks != nranks || q.format != contexts[0].format)
      return BRAID_ERROR(ncclInvalidArgument, "GIN proxy contexts of different worlds or formats");
    if (!std::has_single_bit(q.queue_size))
      return BRAID_ERROR(ncclInvalidArgument, "GIN queue size {} is not a power of two", q.queue_size);
    if (!q.gfds || !q.pis || !q.cis) return BRAID_ERROR(ncclInvalidArgument, "GIN queues without memory");
    if (q.counter_count && !q.counters) return BRAID_ERROR(ncclInvalidArgument, "GIN counters without memory");
  }
  if (int(links.size()) != nranks)
    return BRAID_ERROR(ncclInvalidArgument, "GIN proxy has {} links for {} ranks", links.size(), nranks);
  for (int pe = 0; pe < nranks; ++pe)
    if (!links[pe]) return BRAID_ERROR(ncclInvalidArgument, "GIN proxy has no link to rank {}", pe);
  if (!sources || !fault) return BRAID_ERROR(ncclInvalidArgument, "GIN proxy without source windows or fault");
  out->reset(new GinProxy(std::move(contexts), std::move(links), sources, fault, options));
  return Status::ok();
}

GinProxy::GinProxy(std::vector<GinQueues> contexts, std::vector<std::unique_ptr<GinLink>> links,
                   const GinWindowTable* sources, GinFault* fault, GinProxyOptions options)
    : contexts_(std::move(contexts)),
      format_(contexts_[0].format),
      nranks_(contexts_[0].nranks),
      links_(std::move(links)),
      sources_(sources),
      fault_(fault),
      options_(options),
      next_(contexts_.size() * size_t(nranks_)),
      torn_since_(next_.size()),
      flush_upto_(next_.size()),
      landing_(next_.size()) {
  // Resume where the consumer indices stand (zero for a fresh context).
  for (size_t i = 0; i < next_.size(); ++i) next_[i] = __atomic_load_n(cis_of(i), __ATOMIC_ACQUIRE);
}

GinProxy::~GinProxy() { (void)stop(); }

void GinProxy::start() {
  if (!thread_.joinable()) thread_ = named_thread("braid gin proxy", [this] { run(); });
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
  while (!stop_.load(std::memory_order_acquire)) {
    if (step())
      waiter.reset();
    else
      waiter.pause();
  }
}

bool GinProxy::step() {
  bool progressed = false;
  if (faulted_.load(std::memory_order_acquire)) {
    drain_once(&progressed);
    return progressed;
  }
  Status s;
  try {
    s = poll_once(&progressed);
    if (s.is_ok() && !progressed && options_.watch && std::chrono::steady_clock::now() >= next_watch_) {
      s = options_.watch();
      next_watch_ = std::chrono::steady_clock::now() + options_.watch_interval;
    }
  } catch (const std::exception& e) {  // allocation failures in messages: never std::terminate
    s = BRAID_ERROR(ncclInternalError, "GIN proxy: {}", e.what());
  }
  if (!s.is_ok()) {
    faulted_.store(true, std::memory_order_release);
    fault_->set(std::move(s).context("GIN proxy"));
  }
  return progressed;
}

// After a fault: consume every complete descriptor without executing it,
// until stop().  NCCL 2.28's device code has no abort flag; a kernel waiting
// for a free slot or for its puts to be consumed (flush) would otherwise
// spin forever.  Nothing moves and no counter counts: the fault, reported
// to every bounded wait on the host, is the outcome.
void GinProxy::drain_once(bool* progressed) {
  for (size_t i = 0; i < next_.size(); ++i) {
    uint64_t words[kGfdMaxQwords];
    if (!gfd_complete(format_, read_slot(i, words))) continue;
    consume(i);
    *progressed = true;
  }
}

const uint64_t* GinProxy::read_slot(size_t i, uint64_t* words) const {
  const uint64_t* slot = slot_of(i, next_[i]);
  for (int w = 0; w < gfd_qwords(format_); ++w) words[w] = __atomic_load_n(&slot[w], __ATOMIC_ACQUIRE);
  return words;
}

// Clears queue i's next slot (the device reuses it as soon as cis passes
// it), then publishes cis + 1 with release order: a device that sees the
// new cis sees a clean slot and every counter bumped before.
void GinProxy::consume(size_t i) {
  const uint32_t idx = next_[i];
  uint64_t* slot = slot_of(i, idx);
  for (int w = 0; w < gfd_qwords(format_); ++w) __atomic_store_n(&slot[w], uint64_t(0), __ATOMIC_RELAXED);
  next_[i] = idx + 1;
  __atomic_store_n(cis_of(i), idx + 1, __ATOMIC_RELEASE);
}

Status GinProxy::poll_once(bool* progressed) {
  *progressed = false;
  Status s = land_gets(progressed);
  for (size_t i = 0; s.is_ok() && i < next_.size(); ++i) s = poll_queue(i, progressed);
  if (!s.is_ok()) faulted_.store(true, std::memory_order_release);
  return s;
}

Status GinProxy::land_gets(bool* progressed) {
  for (auto& link : links_) {
    const uint64_t landed = link->gets_landed();
    if (landed == link->gets_issued()) continue;
    BRAID_TRY(link->progress());
    *progressed |= link->gets_landed() != landed;
  }
  return Status::ok();
}

bool GinProxy::flush_done(size_t i) {
  std::vector<uint64_t>& upto = flush_upto_[i];
  if (upto.empty())
    for (const auto& link : links_) upto.push_back(link->gets_issued());
  for (size_t t = 0; t < links_.size(); ++t)
    if (links_[t]->gets_landed() < upto[t]) return false;
  upto.clear();
  return true;
}

Status GinProxy::poll_queue(size_t i, bool* progressed) {
  const size_t context = i / size_t(nranks_);
  const GinQueues& q = contexts_[context];
  const int pe = int(i % size_t(nranks_));
  const int qwords = gfd_qwords(format_);
  const uint32_t idx = next_[i];
  if (landing_[i]) {  // a get done, its slot consumed once its bytes landed
    if (links_[size_t(pe)]->gets_landed() < landing_[i]) return Status::ok();
    landing_[i] = 0;
    consume(i);
    *progressed = true;
    return Status::ok();
  }
  if (!(__atomic_load_n(slot_of(i, idx), __ATOMIC_ACQUIRE) & 1)) return Status::ok();
  uint64_t words[kGfdMaxQwords];
  if (!gfd_complete(format_, read_slot(i, words))) {
    // Half-written: the other queues go on meanwhile; this one is looked at
    // again next turn, until torn_timeout from when it was first seen so.
    const auto now = std::chrono::steady_clock::now();
    if (torn_since_[i] == std::chrono::steady_clock::time_point{}) torn_since_[i] = now;
    if (now - torn_since_[i] < options_.torn_timeout) return Status::ok();
    return BRAID_ERROR(ncclSystemError,
                       "GIN descriptor {} of context {} to rank {} stayed half-written (flags {:0{}b}) past {} ms: the "
                       "kernel that posted it died or the queue memory is corrupt",
                       idx, context, pe, [&] {
                         unsigned f = 0;
                         for (int w = 0; w < qwords; ++w) f |= unsigned(words[w] & 1) << w;
                         return f;
                       }(), qwords, options_.torn_timeout.count());
  }
  torn_since_[i] = {};
  Gfd g;
  Status s = decode_gfd(format_, words, &g);
  if (s.is_ok() && g.is_flush() && !flush_done(i)) return Status::ok();  // looked at again next turn
  if (s.is_ok()) s = execute(q, pe, g);
  if (!s.is_ok()) return std::move(s).context(fmt::format("descriptor {} of context {} to rank {}", idx, context, pe));
  BRAID_TRACE(kNet,
              "GIN proxy: context {} to rank {}: descriptor {} (op {:#x}, {} bytes, signal {} +{}, counter {}) done",
              context, pe, idx, g.op, g.size, g.has_signal() ? int64_t(g.signal_id) : -1, g.signal_add(),
              g.has_counter() ? int64_t(g.counter_id) : -1);
  executed_.fetch_add(1, std::memory_order_relaxed);
  *progressed = true;
  const GinLink& link = *links_[size_t(pe)];
  if (g.is_get() && q.gets_consumed_landed && link.gets_landed() < link.gets_issued()) {
    landing_[i] = link.gets_issued();
    return Status::ok();
  }
  // Local completion (the source was consumed): a release, so that the
  // proxy's reads of the source happen before a waiter on the counter
  // reuses it (a full barrier on x86 either way; not on Arm hosts).
  if (g.has_counter()) __atomic_fetch_add(&q.counters[g.counter_id], uint64_t(1), __ATOMIC_RELEASE);
  consume(i);
  return Status::ok();
}

Status GinProxy::execute(const GinQueues& q, int pe, const Gfd& g) {
  if (g.has_counter() && g.counter_id >= q.counter_count)
    return BRAID_ERROR(ncclInvalidArgument, "GIN counter {} out of range [0, {})", g.counter_id, q.counter_count);
  // Checked here, before any byte moves: the target may be a process that
  // would only find out after the payload landed.
  if (g.has_signal() && !g.is_va_signal() && g.signal_id >= q.signal_count)
    return BRAID_ERROR(ncclInvalidArgument, "GIN signal {} out of range [0, {})", g.signal_id, q.signal_count);
  if (g.is_flush()) return Status::ok();  // poll_queue saw every earlier get land
  if (g.is_va_signal()) return links_[pe]->add_at(g.va_signal_handle, g.va_signal_off, g.signal_add());
  if (g.is_get()) {
    if (!g.size) return Status::ok();
    char* dst = nullptr;
    BRAID_TRY(sources_->resolve(g.dst_handle, g.dst_off, g.size, &dst));
    return links_[pe]->get(g.src_handle, g.src_off, dst, g.size);
  }
  const void* src = &g.inline_value;  // little-endian: the value's low `size` bytes first
  if (g.size && !g.has_inline()) {
    char* p = nullptr;
    BRAID_TRY(sources_->resolve(g.src_handle, g.src_off, g.size, &p));
    src = p;
  }
  if (g.size == 0 && !g.has_signal()) return Status::ok();  // an empty put: only its counter (if any) counts
  GinSignalAdd signal{q.signal_base + g.signal_id, g.signal_add()};
  Status s = links_[pe]->put(g.dst_handle, g.dst_off, src, g.size, g.has_signal() ? &signal : nullptr);
  if (!s.is_ok()) return std::move(s).context(fmt::format("GIN put of {} bytes", g.size));
  return Status::ok();
}

}  // namespace braid::devapi

#include "src/exec/host/rma.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "src/base/deadline.h"
#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/thread_name.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/policy_transport.h"
#include "src/transport/transport.h"

namespace braid {
namespace {

constexpr int kChannel = 0;  // the RMA transport carries nothing else
constexpr uint64_t kSalt = 0x726d615f73616c74ULL;  // its segments' names differ from the communicator's
constexpr int kFragmentsPerTurn = 16;  // per peer, before the receiver looks at the next one
constexpr uint32_t kBriskPolls = 20000;  // yields after the last message (~5 ms, as base/deadline.h's Waiter)
constexpr std::chrono::microseconds kBriskWait{1000};  // how long a waiter yields before it sleeps

std::chrono::milliseconds timeout() { return std::chrono::milliseconds(env_int("BRAID_TIMEOUT") * 1000); }

}  // namespace

RmaEngine::RmaEngine(const BackendContext& ctx, std::unique_ptr<Transport> transport)
    : ctx_(ctx), rank_(ctx.comm.rank), nranks_(ctx.comm.nranks), rma_contexts_(std::max(1, ctx.rma_contexts)),
      rma_signals_(std::max(1, ctx.rma_signals)), transport_(std::move(transport)), incoming_(size_t(nranks_)),
      departed_(std::make_unique<std::atomic<uint8_t>[]>(size_t(nranks_))),
      consumed_(size_t(rma_contexts_) * size_t(rma_signals_) * size_t(nranks_), 0) {
  const size_t counters = consumed_.size();
  arrived_ = std::make_unique<std::atomic<uint64_t>[]>(counters);
  for (size_t i = 0; i < counters; ++i) arrived_[i].store(0, std::memory_order_relaxed);
  for (int p = 0; p < nranks_; ++p) departed_[size_t(p)].store(0, std::memory_order_relaxed);
}

Status RmaEngine::start(const BackendContext& ctx, std::unique_ptr<RmaEngine>* out) {
  const TransportContext& comm = ctx.comm;
  const int me = comm.rank;
  // The same paths as the communicator's own transport (runtime/init.cc),
  // apart from it: its own names (salted hash) and sockets.
  TransportContext t = comm;
  t.comm_hash = comm.comm_hash ^ kSalt;
  std::unique_ptr<SocketListener> listener;
  std::string address;
  if (policy_may_use_sockets(t.policy)) BRAID_TRY(socket_listen(ctx.bootstrap->address(), &listener, &address));
  std::vector<PeerInfo> addresses(comm.nranks);
  std::snprintf(addresses[me].socket_addr, sizeof(addresses[me].socket_addr), "%s", address.c_str());
  BRAID_TRY(std::move(ctx.bootstrap->allgather(addresses.data(), sizeof(PeerInfo))).context("RMA setup"));
  for (int r = 0; r < comm.nranks; ++r)
    std::memcpy(t.peers[r].socket_addr, addresses[r].socket_addr, sizeof(t.peers[r].socket_addr));
  std::unique_ptr<Transport> router;
  BRAID_TRY(std::move(make_policy_transport(t, ctx.bootstrap, std::move(listener), &router)).context("RMA setup"));
  std::unique_ptr<RmaEngine> engine(new RmaEngine(ctx, std::move(router)));
  BRAID_TRY(engine->connect());
  engine->receiver_ = named_thread("braid rma", with_caller_env([e = engine.get()] { e->receive_loop(); }));
  BRAID_INFO(kInit, "comm {:#x} rank {}/{}: one-sided RMA over {} ({} contexts x {} signals)", comm.comm_hash, me,
             comm.nranks, engine->transport_->name(), engine->rma_contexts_, engine->rma_signals_);
  *out = std::move(engine);
  return Status::ok();
}

// Makes every connection before the receiver thread exists: the transports
// set up their shared state (the doorbell segment) on a pipe's first use,
// and that must not happen on two threads at once.
Status RmaEngine::connect() {
  send_.assign(nranks_, nullptr);
  recv_.assign(nranks_, nullptr);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    BRAID_TRY(transport_->send_pipe(p, kChannel, &send_[p]));
    BRAID_TRY(transport_->recv_pipe(p, kChannel, &recv_[p]));
  }
  const Deadline deadline = Deadline::after(timeout());
  Waiter waiter;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    void* slot = nullptr;
    while (!slot) {
      BRAID_TRY(std::move(send_[p]->try_acquire(&slot, 0)).context(fmt::format("RMA setup with rank {}", p)));
      if (slot) break;
      if (deadline.expired())
        return BRAID_ERROR(ncclTimeout, "RMA setup: no connection to rank {} within BRAID_TIMEOUT", p);
      waiter.pause();
    }
  }
  return Status::ok();
}

RmaEngine::~RmaEngine() {
  const bool aborted = ctx_.stop && ctx_.stop->load(std::memory_order_relaxed);
  if (!aborted && !failed_.load(std::memory_order_acquire)) say_goodbye();
  stop_.store(true);
  // Writes nobody received are dropped: do not wait BRAID_TIMEOUT for them.
  if (transport_) transport_->abort();
  if (receiver_.joinable()) receiver_.join();
}

// Best effort, with no wait: a connection with no room has a peer that is
// not reading (late, or gone), which will see the end as it would have.
void RmaEngine::say_goodbye() {
  const Header bye{kGoodbye, 0, 0, 0, 0, 0, 0};
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || p >= int(send_.size()) || !send_[p]) continue;
    void* slot = nullptr;
    if (!send_[p]->try_acquire(&slot, sizeof bye).is_ok() || !slot) continue;
    std::memcpy(slot, &bye, sizeof bye);
    (void)send_[p]->commit(sizeof bye);
  }
}

void RmaEngine::add_window(const WindowInfo& info) {
  Window w;
  w.base = reinterpret_cast<char*>(info.ranks[rank_].base);
  for (const WindowExtent& e : info.ranks) w.sizes.push_back(e.size);
  std::lock_guard<std::mutex> lock(windows_mutex_);
  windows_[info.seq] = std::move(w);
}

void RmaEngine::remove_window(uint64_t seq) {
  std::lock_guard<std::mutex> lock(windows_mutex_);
  windows_.erase(seq);
}

Status RmaEngine::check_signal(const char* what, int peer, int ctx, int signal) const {
  if (peer < 0 || peer >= nranks_) return BRAID_ERROR(ncclInvalidArgument, "{}: peer {} out of range [0, {})", what, peer, nranks_);
  if (ctx < 0 || ctx >= rma_contexts_)
    return BRAID_ERROR(ncclInvalidArgument, "{}: ctx {} out of range [0, {}) (config numRmaCtx)", what, ctx, rma_contexts_);
  if (signal < 0 || signal >= rma_signals_)
    return BRAID_ERROR(ncclInvalidArgument, "{}: sigIdx {} out of range [0, {}) (config numRmaSig)", what, signal,
                       rma_signals_);
  return Status::ok();
}

Status RmaEngine::failure() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  return error_;
}

// The fences pair with wait()'s: either the waiter sees the signal, or
// this sees the waiter and wakes it.
void RmaEngine::raise(int ctx, int signal, int from) {
  arrived(ctx, signal, from).fetch_add(1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_relaxed) > 0) {
    std::lock_guard<std::mutex> lock(signal_mutex_);
    signal_cv_.notify_all();
  }
}

Status RmaEngine::write(const RmaCall& call) {
  const char* what = call.to_window ? "ncclPutSignal" : "ncclSignal";
  BRAID_TRY(check_signal(what, call.peer, call.ctx, call.signal));
  if (failed_.load(std::memory_order_acquire)) return failure();
  char* local_dest = nullptr;
  if (call.to_window) {
    std::lock_guard<std::mutex> lock(windows_mutex_);
    auto it = windows_.find(call.window_seq);
    if (it == windows_.end())
      return BRAID_ERROR(ncclInvalidArgument, "{}: the window is not registered on this communicator", what);
    const uint64_t size = it->second.sizes[call.peer];
    if (call.offset > size || call.bytes > size - call.offset)
      return BRAID_ERROR(ncclInvalidArgument, "{}: {} bytes at offset {} overrun rank {}'s part of the window ({} bytes)",
                         what, call.bytes, call.offset, call.peer, size);
    if (call.peer == rank_) local_dest = it->second.base + call.offset;
  }
  if (call.peer == rank_) {
    if (call.bytes) std::memmove(local_dest, call.data, call.bytes);
    raise(call.ctx, call.signal, rank_);
    return Status::ok();
  }
  const Header header{kMagic, call.ctx, call.signal, call.to_window ? 1u : 0u, call.window_seq, call.offset, call.bytes};
  const size_t room = transport_->slot_bytes();
  const char* data = static_cast<const char*>(call.data);
  SendPipe* pipe = send_[call.peer];
  const Deadline deadline = Deadline::after(timeout());
  uint64_t sent = 0;
  for (bool first = true; first || sent < call.bytes; first = false) {
    const size_t used = first ? sizeof(header) : 0;
    const size_t chunk = size_t(std::min<uint64_t>(room - used, call.bytes - sent));
    void* slot = nullptr;
    Waiter waiter;
    for (;;) {
      BRAID_TRY(
          std::move(pipe->try_acquire(&slot, used + chunk)).context(fmt::format("{} to rank {}", what, call.peer)));
      if (slot) break;
      if (ctx_.stop && ctx_.stop->load(std::memory_order_relaxed))
        return BRAID_ERROR(ncclInvalidUsage, "{} to rank {}: communicator aborted or revoked", what, call.peer);
      if (failed_.load(std::memory_order_acquire)) return failure();
      if (deadline.expired())
        return BRAID_ERROR(ncclTimeout, "{} to rank {}: no room on the connection within BRAID_TIMEOUT (is the peer "
                           "alive?)", what, call.peer);
      waiter.pause();
    }
    char* out = static_cast<char*>(slot);
    if (first) std::memcpy(out, &header, sizeof(header));
    if (chunk) std::memcpy(out + used, data + sent, chunk);
    sent += chunk;
    BRAID_TRY(pipe->commit(used + chunk));
  }
  return Status::ok();
}

Status RmaEngine::wait(const std::vector<SignalWait>& waits, int64_t bound_ms) {
  // The same (peer, ctx, signal) may be named twice: its counts add up.
  std::map<size_t, uint64_t> need;
  for (const SignalWait& w : waits) {
    BRAID_TRY(check_signal("ncclWaitSignal", w.peer, w.ctx, w.signal));
    if (w.count) need[(size_t(w.ctx) * rma_signals_ + size_t(w.signal)) * size_t(nranks_) + size_t(w.peer)] += w.count;
  }
  auto ready = [&] {
    for (auto [index, n] : need)
      if (arrived_[index].load(std::memory_order_acquire) - consumed_[index] < n) return false;
    return true;
  };
  // What is still missing; only from peers that said goodbye (after which
  // nothing more arrives from them) where `departed_only`.
  auto missing = [&](bool departed_only) {
    std::string text;
    for (auto [index, n] : need) {
      const size_t peer = index % size_t(nranks_), sig = index / size_t(nranks_) % size_t(rma_signals_),
                   ctx = index / size_t(nranks_) / size_t(rma_signals_);
      if (departed_only && !departed_[peer].load(std::memory_order_acquire)) continue;
      const uint64_t got = arrived_[index].load(std::memory_order_acquire) - consumed_[index];
      if (got >= n) continue;
      text += fmt::format("{}{} of {} from rank {} (ctx {}, sigIdx {})", text.empty() ? "" : ", ", got, n, peer, ctx,
                          sig);
    }
    return text;
  };
  const Deadline deadline = Deadline::after(bound_ms > 0 ? std::chrono::milliseconds(bound_ms) : timeout());
  waiters_.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with raise()'s
  // Yield a while before sleeping: a signal that comes within it costs no
  // wake-up (a futex wake and a schedule, tens of microseconds here).  The
  // while is by the clock, within the bound: on a loaded machine one yield
  // can give the core away for a whole time slice, and a count of them
  // outlasted a 2 s bound by seconds.
  const Deadline::Clock::time_point brisk_until = std::min(Deadline::Clock::now() + kBriskWait, deadline.at());
  while (!ready() && !failed_.load(std::memory_order_acquire) && Deadline::Clock::now() < brisk_until)
    std::this_thread::yield();
  Status s;
  {
    std::unique_lock<std::mutex> lock(signal_mutex_);
    while (!ready()) {
      if (failed_.load(std::memory_order_acquire)) {
        lock.unlock();
        s = failure();
        break;
      }
      if (ctx_.stop && ctx_.stop->load(std::memory_order_relaxed)) {
        s = BRAID_ERROR(ncclInvalidUsage, "ncclWaitSignal: communicator aborted or revoked");
        break;
      }
      if (const std::string gone = missing(true); !gone.empty()) {
        s = BRAID_ERROR(ncclRemoteError, "ncclWaitSignal: {}, and no more will come: the rank destroyed its "
                        "communicator", gone);
        break;
      }
      if (deadline.expired()) {
        s = BRAID_ERROR(ncclTimeout, "ncclWaitSignal: {} after {}", missing(false),
                        bound_ms > 0 ? fmt::format("{} ms", bound_ms) : std::string("BRAID_TIMEOUT"));
        break;
      }
      signal_cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  if (!s.is_ok()) return s;
  for (auto [index, n] : need) consumed_[index] += n;
  return Status::ok();
}

uint64_t RmaEngine::signals_pending() const {
  uint64_t pending = 0;
  for (size_t i = 0; i < consumed_.size(); ++i) pending += arrived_[i].load(std::memory_order_acquire) - consumed_[i];
  return pending;
}

uint64_t RmaEngine::bytes_held() const {
  return transport_->bytes_held() + consumed_.size() * (sizeof(uint64_t) + sizeof(std::atomic<uint64_t>));
}

Status RmaEngine::land(int peer, Incoming& in, const char* data, size_t bytes) {
  if (bytes > in.left)
    return BRAID_ERROR(ncclRemoteError, "RMA: rank {} sent {} bytes more than its message holds", peer, bytes - in.left);
  if (in.dest) {
    std::memcpy(in.dest, data, bytes);
    in.dest += bytes;
  }
  in.left -= bytes;
  if (in.left == 0) {
    in.active = false;
    if (in.dest || !in.header.to_window) raise(in.header.ctx, in.header.signal, peer);
  }
  return Status::ok();
}

Status RmaEngine::receive_one(int peer, bool* progress) {
  RecvPipe* pipe = recv_[peer];
  Incoming& in = incoming_[peer];
  for (int n = 0; n < kFragmentsPerTurn; ++n) {
    const void* fragment = nullptr;
    size_t bytes = 0;
    BRAID_TRY(std::move(pipe->try_acquire(&fragment, &bytes)).context(fmt::format("RMA from rank {}", peer)));
    if (!fragment) return Status::ok();
    *progress = true;
    const char* data = static_cast<const char*>(fragment);
    Status s;
    if (!in.active) {
      Header h{};
      if (bytes < sizeof(h)) {
        s = BRAID_ERROR(ncclRemoteError, "RMA: a malformed message from rank {} ({} bytes)", peer, bytes);
      } else {
        std::memcpy(&h, data, sizeof(h));
        if (h.magic == kGoodbye) {
          departed_[size_t(peer)].store(1, std::memory_order_release);
          {
            std::lock_guard<std::mutex> lock(signal_mutex_);
            signal_cv_.notify_all();
          }
          return pipe->release();
        }
        if (h.magic != kMagic) s = BRAID_ERROR(ncclRemoteError, "RMA: a malformed message from rank {}", peer);
        else s = check_signal("RMA from a peer", peer, h.ctx, h.signal);
      }
      if (s.is_ok()) {
        in = Incoming{true, h, nullptr, h.bytes};
        if (h.to_window) {
          std::lock_guard<std::mutex> lock(windows_mutex_);
          auto it = windows_.find(h.window_seq);
          const uint64_t size = it == windows_.end() ? 0 : it->second.sizes[rank_];
          if (it != windows_.end() && h.offset <= size && h.bytes <= size - h.offset)
            in.dest = it->second.base + h.offset;
          else
            s = BRAID_ERROR(ncclRemoteError, "RMA: rank {} wrote {} bytes at offset {} of a window this rank does not "
                            "have (deregistered?) or that is smaller", peer, h.bytes, h.offset);
        }
        // A bad write's data is still read off the connection (and dropped).
        const Status landed = land(peer, in, data + sizeof(h), bytes - sizeof(h));
        if (s.is_ok()) s = landed;
      }
    } else {
      s = land(peer, in, data, bytes);
    }
    BRAID_TRY(pipe->release());
    BRAID_TRY(std::move(s));
  }
  return Status::ok();
}

void RmaEngine::receive_loop() {
  uint32_t idle = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    bool progress = false;
    if (!failed_.load(std::memory_order_acquire)) {
      for (int p = 0; p < nranks_ && !failed_.load(std::memory_order_relaxed); ++p) {
        if (p == rank_ || departed_[size_t(p)].load(std::memory_order_relaxed)) continue;
        Status s = receive_one(p, &progress);
        if (!s.is_ok() && !stop_.load()) {
          BRAID_WARN("comm {:#x} rank {}: {}", ctx_.comm.comm_hash, rank_, s.to_string());
          {
            std::lock_guard<std::mutex> lock(error_mutex_);
            error_ = std::move(s);
          }
          failed_.store(true, std::memory_order_release);
          std::lock_guard<std::mutex> lock(signal_mutex_);
          signal_cv_.notify_all();
        }
      }
    }
    if (progress) {
      idle = 0;
      continue;
    }
    // Brisk while a wait is on or data came lately: a yield, which costs
    // little when other threads want the core, where a nap costs the
    // timer's slack (tens of microseconds) on every message.  Lazy when
    // idle: a communicator whose windows nobody writes costs a wake-up a
    // millisecond.
    ++idle;
    if (idle < kBriskPolls || waiters_.load(std::memory_order_relaxed) > 0) std::this_thread::yield();
    else if (idle < kBriskPolls + 512) std::this_thread::sleep_for(std::chrono::microseconds(20));
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace braid

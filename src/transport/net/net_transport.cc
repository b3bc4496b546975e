// The net transport: braid's pipes over a Net (net_transport.h).
//
// Connections.  At init every pair of ranks it serves opens a control
// connection each way: each rank listens once per peer, the handles cross
// the bootstrap, and both connect and accept until done (BRAID_TIMEOUT).
// A data connection (sender, receiver, channel) is made when first asked
// for, through the control connections: the receiving end listens and
// sends the sender {channel, handle}; the sending end connects with it, the
// receiving end accepts.  A Net connection is ordered, so channels cannot
// share one (their lanes post in no common order); the control connection
// is what lets them be made lazily without the bootstrap, which belongs to
// init.
//
// Credit.  Each end has a ring of BRAID_NET_SLOTS slots of
// BRAID_NET_SLOT_BYTES, registered once.  The receiver keeps an irecv
// posted on every free slot: on InfiniBand that is the credit telling the
// sender where the next fragment may go (ib_protocol.h).  The sender's
// executor writes a fragment into its slot and commits; the fragment is
// isent at once if the net takes it, else queued; its slot comes back when
// the send completes.  The receiver's executor takes fragments in order and
// releases each slot, which posts its irecv again.
//
// Progress.  A thread per transport does what no executor call would:
// connection setup, control messages, queued sends (a collective ends at
// its last commit, possibly before the receiver gave credit for it), and
// completing sends (a TCP net moves bytes only inside test).  While an
// executor sleeps on this transport's doorbell the thread also watches the
// receives, and rings it when one completes or a slot frees.  It sleeps on
// the net's event fd where the net has one (braid's InfiniBand: completion
// channels), so an idle transport burns no core; otherwise it polls with
// back-off to 1 ms.  One mutex serialises every call into the net (NCCL
// also calls a net's comm from one thread at a time).
#include "src/transport/net/net_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/thread_name.h"
#include "src/transport/doorbell.h"
#include "src/transport/net/nic_affinity.h"

namespace braid {
namespace {

constexpr int kHandleTag = 0x1b0;  // bootstrap tag of the control handles
constexpr int kControlRecvs = 4;   // control messages a rank can take ahead
constexpr int kTag = 0;

void signal(int fd) {
  uint64_t one = 1;
  ssize_t ignored = ::write(fd, &one, sizeof(one));
  (void)ignored;
}
void drain(int fd) {
  uint64_t n;
  ssize_t ignored = ::read(fd, &n, sizeof(n));
  (void)ignored;
}

struct ControlMessage {
  int32_t channel;
  NetHandle handle;
};

// Registered memory of `count` buffers of `bytes`, for one comm.
struct Ring {
  char* data = nullptr;
  size_t bytes = 0;
  int count = 0;
  void* mhandle = nullptr;
  char* at(int i) const { return data + size_t(i) * bytes; }
};

struct Connection {
  int peer = 0, channel = 0;
  void* comm = nullptr;  // send or recv comm once connected
  Ring ring;
  Status error;
  bool ready() const { return ring.mhandle != nullptr; }
};

struct SendConnection : Connection {
  bool have_handle = false;
  NetHandle handle{};
  // Slots, as running counts: [completed, posted) in flight, [posted,
  // committed) queued, committed == acquired ones being written.
  uint64_t completed = 0, posted = 0, committed = 0;
  size_t lengths[32] = {};
  void* requests[32] = {};
};

struct RecvConnection : Connection {
  void* listen_comm = nullptr;
  // Slots: [taken, arrived) hold fragments; [arrived, credited) await one.
  uint64_t taken = 0, arrived = 0, credited = 0;
  size_t lengths[32] = {};
  void* requests[32] = {};
};

// Control connections with one peer.
struct Control {
  void* send_comm = nullptr;
  void* recv_comm = nullptr;
  Ring send_ring, recv_ring;  // kControlRecvs buffers of ControlMessage each
  void* send_requests[kControlRecvs] = {};
  void* recv_requests[kControlRecvs] = {};
  uint64_t sends_done = 0, sends_posted = 0;
  uint64_t recvs_done = 0;
  std::deque<ControlMessage> outbox;
  Status error;
  Deadline::Clock::time_point failed_at{};  // when `error` was set
};

// A control connection fails when its peer closes it, which a process that
// made its last call does on exit, while a data connection from it may not
// yet be accepted, or its last fragments not yet read (over TCP between
// hosts, another stream's close may overtake them).  So a receiver takes
// that failure as its own only kControlGrace later; until then it still
// accepts and reads what the peer sent.  (Before, a receiver not yet
// accepted was never accepted, and failed at once.)
constexpr auto kControlGrace = std::chrono::seconds(1);

class NetTransport;

class NetSendPipe final : public SendPipe {
 public:
  NetSendPipe(NetTransport* t, SendConnection* c) : t_(t), c_(c) {}
  Status try_acquire(void** slot, size_t max_bytes) override;
  Status commit(size_t bytes) override;

 private:
  NetTransport* t_;
  SendConnection* c_;
};

class NetRecvPipe final : public RecvPipe {
 public:
  NetRecvPipe(NetTransport* t, RecvConnection* c) : t_(t), c_(c) {}
  Status try_acquire(const void** data, size_t* bytes) override;
  Status release() override;

 private:
  NetTransport* t_;
  RecvConnection* c_;
};

class NetTransport final : public Transport {
 public:
  NetTransport(const TransportContext& ctx, Net* net, NetDeviceChoice devices)
      : ctx_(ctx), net_(net), devices_(std::move(devices)),
        slot_bytes_(size_t(std::clamp<int64_t>(env_int("BRAID_NET_SLOT_BYTES"), 4096, int64_t(1) << 30))),
        slots_(int(std::clamp<int64_t>(env_int("BRAID_NET_SLOTS"), 2, 16))),
        controls_(size_t(ctx.nranks)),
        wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        executor_wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        bell_(this, idle_polls_for(ranks_on_machine(ctx.peers, ctx.rank))) {}

  ~NetTransport() override {
    if (thread_.joinable()) {
      drain_sends();
      stop_.store(true);
      signal(wake_fd_);
      thread_.join();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [key, c] : sends_) close_connection(c.get(), true);
    for (auto& [key, c] : recvs_) {
      close_connection(c.get(), false);
      if (c->listen_comm) (void)net_->close_listen(c->listen_comm);
    }
    for (Control& k : controls_) {
      deregister(k.send_comm, &k.send_ring);
      deregister(k.recv_comm, &k.recv_ring);
      if (k.send_comm) (void)net_->close_send(k.send_comm);
      if (k.recv_comm) (void)net_->close_recv(k.recv_comm);
    }
    ::close(wake_fd_);
    ::close(executor_wake_fd_);
  }

  // The collective part of construction (make_net_transport).
  Status connect_controls(Bootstrap* bootstrap, const std::vector<bool>& serves) {
    const int n = ctx_.nranks;
    std::vector<void*> listens(static_cast<size_t>(n), nullptr);
    std::vector<NetHandle> mine(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
    Status s;
    for (int r = 0; r < n && s.is_ok(); ++r)
      if (serves[size_t(r)]) s = net_->listen(control_device(), config_, &mine[size_t(r)], &listens[size_t(r)]);
    // Small messages: every send completes before its peer's recv is asked for.
    for (int r = 0; r < n && s.is_ok(); ++r)
      if (serves[size_t(r)] && r != ctx_.rank) s = bootstrap->send(r, kHandleTag, &mine[size_t(r)], sizeof(NetHandle));
    for (int r = 0; r < n && s.is_ok(); ++r)
      if (serves[size_t(r)])
        s = r == ctx_.rank ? (theirs[size_t(r)] = mine[size_t(r)], Status::ok())
                           : bootstrap->recv(r, kHandleTag, &theirs[size_t(r)], sizeof(NetHandle));
    Deadline deadline = Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
    Waiter waiter;
    for (bool pending = true; pending && s.is_ok();) {
      pending = false;
      for (int r = 0; r < n && s.is_ok(); ++r) {
        if (!serves[size_t(r)]) continue;
        Control& k = controls_[size_t(r)];
        if (!k.send_comm) s = net_->connect(control_device(), config_, &theirs[size_t(r)], &k.send_comm);
        if (s.is_ok() && !k.recv_comm) s = net_->accept(listens[size_t(r)], &k.recv_comm);
        pending |= !k.send_comm || !k.recv_comm;
      }
      if (pending && s.is_ok()) {
        if (deadline.expired())
          s = BRAID_ERROR(ncclSystemError, "{}: control connections not made within BRAID_TIMEOUT", net_->name());
        waiter.pause();
      }
    }
    for (int r = 0; r < n; ++r)
      if (listens[size_t(r)]) (void)net_->close_listen(listens[size_t(r)]);
    for (int r = 0; r < n && s.is_ok(); ++r) {
      if (!serves[size_t(r)]) continue;
      Control& k = controls_[size_t(r)];
      s = register_ring(k.send_comm, kControlRecvs, sizeof(ControlMessage), &k.send_ring);
      if (s.is_ok()) s = register_ring(k.recv_comm, kControlRecvs, sizeof(ControlMessage), &k.recv_ring);
      for (int i = 0; i < kControlRecvs && s.is_ok(); ++i)
        s = net_->irecv(k.recv_comm, k.recv_ring.at(i), sizeof(ControlMessage), kTag, k.recv_ring.mhandle,
                        &k.recv_requests[i]);
      if (s.is_ok() && std::find(std::begin(k.recv_requests), std::end(k.recv_requests), nullptr) != std::end(k.recv_requests))
        s = BRAID_ERROR(ncclInternalError, "{}: refused a control receive", net_->name());
    }
    if (!s.is_ok()) return std::move(s).context(fmt::format("{} transport setup", net_->name()));
    thread_ = named_thread("braid net", with_caller_env([this] { progress_loop(); }));
    return Status::ok();
  }

  const char* name() const override { return net_->name(); }
  // Every rank gets the same: slices alike at both ends of every connection.
  uint32_t wire_paths(int peer) const override {
    (void)peer;
    return uint32_t(devices_.most_devices);
  }
  size_t slot_bytes() const override { return slot_bytes_; }
  int slots() const override { return slots_; }
  Doorbell* doorbell() override { return &bell_; }
  void abort() override {
    aborted_.store(true);
    signal(wake_fd_);
    signal(executor_wake_fd_);
  }

  Status send_pipe(int peer, int channel, SendPipe** out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    BRAID_TRY(check_peer(peer));
    SendConnection* c = send_connection_locked(peer, channel);
    auto& p = send_pipes_[{peer, channel}];
    if (!p) p = std::make_unique<NetSendPipe>(this, c);
    *out = p.get();
    return Status::ok();
  }

  Status recv_pipe(int peer, int channel, RecvPipe** out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    BRAID_TRY(check_peer(peer));
    auto& c = recvs_[{peer, channel}];
    if (!c) {
      c = std::make_unique<RecvConnection>();
      c->peer = peer;
      c->channel = channel;
      // Listen, and tell the sender where (the progress thread sends it).
      ControlMessage m{channel, {}};
      Status s = net_->listen(device_for(peer, channel), config_, &m.handle, &c->listen_comm);
      if (s.is_ok()) controls_[size_t(peer)].outbox.push_back(m);
      else c->error = std::move(s);
      signal(wake_fd_);
    }
    auto& p = recv_pipes_[{peer, channel}];
    if (!p) p = std::make_unique<NetRecvPipe>(this, c.get());
    *out = p.get();
    return Status::ok();
  }

  // Control connections go over this rank's first device; a data
  // connection between ranks a and b on channel c over each end's
  // ((c + a + b) mod n)-th: the same index at both ends, so that where
  // hosts list their NICs alike a connection keeps to one rail, and
  // channel 0 (all a small call uses) of different pairs on different NICs.
  int control_device() const { return devices_.devices.front(); }
  int device_for(int peer, int channel) const {
    const int n = int(devices_.devices.size());
    const int64_t i = (int64_t(channel) + ctx_.rank + peer) % n;
    return devices_.devices[size_t(i < 0 ? i + n : i)];
  }

  // --- the executor's side (pipes) -------------------------------------

  Status send_try_acquire(SendConnection* c, void** slot) {
    *slot = nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    BRAID_TRY(usable(c));
    if (!c->ready()) return Status::ok();
    BRAID_TRY(complete_sends(c));
    if (c->committed - c->completed < uint64_t(slots_)) *slot = c->ring.at(int(c->committed % uint64_t(slots_)));
    return Status::ok();
  }

  Status send_commit(SendConnection* c, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    c->lengths[c->committed % uint64_t(slots_)] = bytes;
    ++c->committed;
    Status s = post_sends(c);
    if (c->posted < c->committed) signal(wake_fd_);  // the thread sends it when credit comes
    return s;
  }

  Status recv_try_acquire(RecvConnection* c, const void** data, size_t* bytes) {
    *data = nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    if (c->taken == c->arrived) {
      // What arrived counts even if the peer has gone since (it may close
      // right after its last fragment): errors only where nothing did.
      if (c->ready()) BRAID_TRY(complete_recvs(c));
      if (c->taken == c->arrived) return usable(c);
    }
    const int i = int(c->taken % uint64_t(slots_));
    *data = c->ring.at(i);
    *bytes = c->lengths[i];
    return Status::ok();
  }

  // A credit that cannot be given (the peer is gone) is kept on the
  // connection and reported when a fragment is waited for, not here: the
  // peer may have sent its last and closed.
  Status recv_release(RecvConnection* c) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++c->taken;
    (void)post_credits(c);
    return Status::ok();
  }

 private:
  Status check_peer(int peer) const {
    if (peer < 0 || peer >= ctx_.nranks || !controls_[size_t(peer)].send_comm)
      return BRAID_ERROR(ncclInternalError, "{} transport: no connection with rank {}", net_->name(), peer);
    return Status::ok();
  }

  Status usable(const Connection* c) const {
    if (aborted_.load(std::memory_order_relaxed))
      return BRAID_ERROR(ncclSystemError, "{} connection with rank {}: aborted", net_->name(), c->peer);
    return c->error;
  }
  // A sender fails with its control connection at once; a receiver takes
  // that failure when the progress thread gives it (kControlGrace).
  Status usable(const SendConnection* c) const {
    BRAID_TRY(usable(static_cast<const Connection*>(c)));
    return controls_[size_t(c->peer)].error;
  }

  SendConnection* send_connection_locked(int peer, int channel) {
    auto& c = sends_[{peer, channel}];
    if (!c) {
      c = std::make_unique<SendConnection>();
      c->peer = peer;
      c->channel = channel;
      signal(wake_fd_);
    }
    return c.get();
  }

  Status register_ring(void* comm, int count, size_t bytes, Ring* ring) {
    ring->count = count;
    ring->bytes = bytes;
    const size_t total = (size_t(count) * bytes + 4095) & ~size_t(4095);
    ring->data = static_cast<char*>(std::aligned_alloc(4096, total));
    if (!ring->data) return BRAID_ERROR(ncclSystemError, "out of memory for {} bytes of slots", total);
    return net_->reg_mr(comm, ring->data, total, kNetPtrHost, &ring->mhandle);
  }
  void deregister(void* comm, Ring* ring) {
    if (ring->mhandle) (void)net_->dereg_mr(comm, ring->mhandle);
    std::free(ring->data);
    *ring = Ring{};
  }
  void close_connection(Connection* c, bool sending) {
    deregister(c->comm, &c->ring);
    if (c->comm) (void)(sending ? net_->close_send(c->comm) : net_->close_recv(c->comm));
    c->comm = nullptr;
  }

  // Keeps a Net error on the connection (sticky) and passes it on.
  static Status keep(Connection* c, Status s) {
    if (s.is_ok()) return s;
    s = std::move(s).context(fmt::format("rank {} channel {}", c->peer, c->channel));
    if (c->error.is_ok()) c->error = s;
    return s;
  }

  Status post_sends(SendConnection* c) {
    while (c->ready() && c->error.is_ok() && c->posted < c->committed) {
      const int i = int(c->posted % uint64_t(slots_));
      void* request = nullptr;
      BRAID_TRY(keep(c, net_->isend(c->comm, c->ring.at(i), c->lengths[i], kTag, c->ring.mhandle, &request)));
      if (!request) break;  // no credit yet
      c->requests[i] = request;
      ++c->posted;
      progressed_ = true;
    }
    return Status::ok();
  }

  Status complete_sends(SendConnection* c) {
    while (c->completed < c->posted) {
      const int i = int(c->completed % uint64_t(slots_));
      bool done = false;
      BRAID_TRY(keep(c, net_->test(c->requests[i], &done, nullptr)));
      if (!done) break;
      ++c->completed;
      progressed_ = true;
    }
    return Status::ok();
  }

  // One irecv per free slot.
  Status post_credits(RecvConnection* c) {
    while (c->ready() && c->error.is_ok() && c->credited < c->taken + uint64_t(slots_)) {
      const int i = int(c->credited % uint64_t(slots_));
      void* request = nullptr;
      BRAID_TRY(keep(c, net_->irecv(c->comm, c->ring.at(i), slot_bytes_, kTag, c->ring.mhandle, &request)));
      if (!request) break;
      c->requests[i] = request;
      ++c->credited;
    }
    return Status::ok();
  }

  // Completes the oldest receive if it is done.  Only one: a later one's
  // test may meet the end of a peer that sent all it had and closed.
  Status complete_recvs(RecvConnection* c) {
    if (c->arrived < c->credited) {
      const int i = int(c->arrived % uint64_t(slots_));
      bool done = false;
      size_t bytes = 0;
      BRAID_TRY(keep(c, net_->test(c->requests[i], &done, &bytes)));
      if (!done) return Status::ok();
      c->lengths[i] = bytes;
      ++c->arrived;
      progressed_ = true;
    }
    return Status::ok();
  }

  // --- the progress thread --------------------------------------------

  void progress_loop() {
    Deadline::Clock::duration nap = std::chrono::microseconds(20);
    std::vector<pollfd> fds;
    while (!stop_.load()) {
      bool busy = false, progressed = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        progressed_ = false;
        busy = progress_locked();
        progressed = progressed_;  // executors set it too, under the lock
      }
      if (progressed) {
        wake_executor();
        nap = std::chrono::microseconds(20);
        continue;
      }
      if (aborted_.load()) busy = false;
      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      int timeout_ms = 100;
      if (busy) {
        const int event_fd = net_->event_fd();
        if (event_fd < 0) {
          timeout_ms = -1;  // a nap below instead
        } else if (!arm_events()) {
          wake_executor();  // something completed while arming
          nap = std::chrono::microseconds(20);
          continue;
        } else {
          fds.push_back({event_fd, POLLIN, 0});
          timeout_ms = setup_pending_ ? 1 : 10;
        }
      }
      if (timeout_ms < 0) {
        timespec t{0, long(std::chrono::duration_cast<std::chrono::nanoseconds>(nap).count())};
        nanosleep(&t, nullptr);
        nap = std::min<Deadline::Clock::duration>(nap * 2, std::chrono::milliseconds(1));
        continue;
      }
      if (::poll(fds.data(), fds.size(), timeout_ms) > 0) {
        if (fds[0].revents) drain(wake_fd_);
        if (fds.size() > 1 && fds[1].revents) net_->consume_events();
      }
    }
  }

  // Asks the net for an event at the next completion of any comm with work
  // outstanding, then checks once more that nothing completed meanwhile.
  bool arm_events() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Control& k : controls_) {
      if (k.recv_comm) (void)net_->arm_events(k.recv_comm);
      if (k.send_comm && k.sends_done < k.sends_posted) (void)net_->arm_events(k.send_comm);
    }
    for (auto& [key, c] : sends_)
      if (c->ready() && c->completed < c->committed) (void)net_->arm_events(c->comm);  // credit or a freed slot
    for (auto& [key, c] : recvs_)
      if (c->ready() && c->arrived < c->credited) (void)net_->arm_events(c->comm);
    progressed_ = false;
    progress_locked();
    return !progressed_;
  }

  // One pass over everything; whether anything is left to wait for.
  bool progress_locked() {
    setup_pending_ = false;
    bool busy = false;
    const bool executor_sleeps = executor_sleepers_.load() > 0;
    for (size_t r = 0; r < controls_.size(); ++r) busy |= progress_control(int(r));
    for (auto& [key, c] : sends_) {
      if (!c->error.is_ok() || !controls_[size_t(c->peer)].error.is_ok()) continue;
      if (!c->ready()) {
        if (c->have_handle) {
          setup_pending_ = busy = true;
          Status s = net_->connect(device_for(c->peer, c->channel), config_, &c->handle, &c->comm);
          if (s.is_ok() && c->comm) s = register_ring(c->comm, slots_, slot_bytes_, &c->ring);
          if (!keep(c.get(), std::move(s)).is_ok() || c->ready()) progressed_ = true;
        }
        continue;
      }
      (void)post_sends(c.get());
      (void)complete_sends(c.get());
      // Fragments waiting for credit are the thread's to send; sends in
      // flight need it only where the net moves bytes in test (no event
      // fd: TCP) or an executor sleeps until a slot frees.  A NIC finishes
      // them alone, and the executor reclaims their slots when it needs one.
      busy |= c->posted < c->committed ||
              (c->completed < c->posted && (executor_sleeps || net_->event_fd() < 0));
    }
    for (auto& [key, c] : recvs_) {
      if (!c->error.is_ok()) continue;
      if (const Control& k = controls_[size_t(c->peer)]; !k.error.is_ok()) {
        if (Deadline::Clock::now() - k.failed_at > kControlGrace) {
          c->error = k.error;
          progressed_ = true;  // the executor must see it
          continue;
        }
        busy = true;  // to look again when the grace is over
      }
      if (!c->ready()) {
        if (!c->listen_comm) continue;
        setup_pending_ = busy = true;
        Status s = net_->accept(c->listen_comm, &c->comm);
        if (s.is_ok() && c->comm) {
          (void)net_->close_listen(c->listen_comm);
          c->listen_comm = nullptr;
          s = register_ring(c->comm, slots_, slot_bytes_, &c->ring);
          if (s.is_ok()) s = post_credits(c.get());
        }
        if (!keep(c.get(), std::move(s)).is_ok() || c->ready()) progressed_ = true;
        continue;
      }
      if (executor_sleeps) {
        const uint64_t before = c->arrived;
        (void)complete_recvs(c.get());
        busy |= c->arrived == before && c->arrived < c->credited;
      }
    }
    return busy;
  }

  // Control messages with one peer: posts the outbox, takes what arrived.
  bool progress_control(int peer) {
    Control& k = controls_[size_t(peer)];
    if (!k.send_comm || !k.error.is_ok()) return false;
    Status s;
    while (s.is_ok() && k.sends_done < k.sends_posted) {
      bool done = false;
      s = net_->test(k.send_requests[k.sends_done % kControlRecvs], &done, nullptr);
      if (!s.is_ok() || !done) break;
      ++k.sends_done;
    }
    while (s.is_ok() && !k.outbox.empty() && k.sends_posted - k.sends_done < uint64_t(kControlRecvs)) {
      const int i = int(k.sends_posted % kControlRecvs);
      std::memcpy(k.send_ring.at(i), &k.outbox.front(), sizeof(ControlMessage));
      void* request = nullptr;
      s = net_->isend(k.send_comm, k.send_ring.at(i), sizeof(ControlMessage), kTag, k.send_ring.mhandle, &request);
      if (!s.is_ok() || !request) break;
      k.send_requests[i] = request;
      ++k.sends_posted;
      k.outbox.pop_front();
    }
    while (s.is_ok()) {
      const int i = int(k.recvs_done % kControlRecvs);
      bool done = false;
      size_t bytes = 0;
      s = net_->test(k.recv_requests[i], &done, &bytes);
      if (!s.is_ok() || !done) break;
      ControlMessage m;
      std::memcpy(&m, k.recv_ring.at(i), sizeof(m));
      if (bytes != sizeof(m) || m.channel < 0) {
        s = BRAID_ERROR(ncclInternalError, "malformed control message ({} bytes)", bytes);
        break;
      }
      SendConnection* c = send_connection_locked(peer, m.channel);
      if (c->have_handle) {
        s = BRAID_ERROR(ncclInternalError, "channel {} announced twice", m.channel);
        break;
      }
      c->handle = m.handle;
      c->have_handle = true;
      ++k.recvs_done;
      s = net_->irecv(k.recv_comm, k.recv_ring.at(i), sizeof(ControlMessage), kTag, k.recv_ring.mhandle,
                      &k.recv_requests[i]);
      if (s.is_ok() && !k.recv_requests[i]) s = BRAID_ERROR(ncclInternalError, "a control receive was refused");
    }
    if (!s.is_ok()) {
      k.error = std::move(s).context(fmt::format("{} control connection with rank {}", net_->name(), peer));
      k.failed_at = Deadline::Clock::now();
      progressed_ = true;  // the executor must see it
    }
    return !k.outbox.empty() || k.sends_done < k.sends_posted;
  }

  // A collective ends at its last commit: before closing, let queued
  // fragments go (bounded by BRAID_TIMEOUT; not after an abort or error).
  void drain_sends() {
    Deadline deadline = Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
    Waiter waiter;
    for (;;) {
      bool pending = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [key, c] : sends_) {
          if (!c->error.is_ok() || !controls_[size_t(c->peer)].error.is_ok() || !c->ready()) continue;
          (void)post_sends(c.get());
          (void)complete_sends(c.get());
          pending |= c->error.is_ok() && c->completed < c->committed;
        }
      }
      if (!pending || aborted_.load() || deadline.expired()) return;
      waiter.pause();
    }
  }

  void wake_executor() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with arm() (doorbell.h explains)
    if (!executor_sleepers_.load(std::memory_order_relaxed)) return;
    if (Doorbell* to = forward_.load(std::memory_order_acquire)) to->ring();
    else signal(executor_wake_fd_);
  }

  // The executor sleeps in poll() on executor_wake_fd_ (or, forwarded, on
  // another transport's doorbell) while the thread watches for it.
  class NetDoorbell final : public Doorbell {
   public:
    NetDoorbell(NetTransport* t, IdlePolls polls) : Doorbell(polls), t_(t) {}
    uint32_t arm() override {
      t_->executor_sleepers_.fetch_add(1, std::memory_order_seq_cst);
      signal(t_->wake_fd_);  // the thread starts watching the receives
      return 0;
    }
    void sleep(uint32_t) override {
      pollfd p{t_->executor_wake_fd_, POLLIN, 0};
      if (::poll(&p, 1, int(kNapNs / 1000000)) > 0) drain(t_->executor_wake_fd_);
      disarm();
    }
    void disarm() override { t_->executor_sleepers_.fetch_sub(1, std::memory_order_relaxed); }
    void ring() override { signal(t_->executor_wake_fd_); }
    bool forward_to(Doorbell* to) override {
      t_->forward_.store(to, std::memory_order_release);
      return true;
    }

   private:
    NetTransport* t_;
  };

  TransportContext ctx_;
  const NetCommConfig config_{ctx_.traffic_class};
  Net* net_;
  const NetDeviceChoice devices_;  // this rank's (never empty), in the order channels take them
  const size_t slot_bytes_;
  const int slots_;
  std::vector<Control> controls_;  // by peer
  std::mutex mutex_;               // guards everything below and every call into net_
  std::map<std::pair<int, int>, std::unique_ptr<SendConnection>> sends_;
  std::map<std::pair<int, int>, std::unique_ptr<RecvConnection>> recvs_;
  std::map<std::pair<int, int>, std::unique_ptr<NetSendPipe>> send_pipes_;
  std::map<std::pair<int, int>, std::unique_ptr<NetRecvPipe>> recv_pipes_;
  bool progressed_ = false;     // something changed that an executor may wait for
  bool setup_pending_ = false;  // a connection is being made (not event-driven)
  const int wake_fd_;           // the thread's
  const int executor_wake_fd_;
  std::atomic<uint32_t> executor_sleepers_{0};
  std::atomic<Doorbell*> forward_{nullptr};
  NetDoorbell bell_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborted_{false};
  std::thread thread_;
};

Status NetSendPipe::try_acquire(void** slot, size_t) { return t_->send_try_acquire(c_, slot); }
Status NetSendPipe::commit(size_t bytes) { return t_->send_commit(c_, bytes); }
Status NetRecvPipe::try_acquire(const void** data, size_t* bytes) { return t_->recv_try_acquire(c_, data, bytes); }
Status NetRecvPipe::release() { return t_->recv_release(c_); }

}  // namespace

Status make_net_transport(const TransportContext& ctx, Bootstrap* bootstrap, Net* net, const std::vector<bool>& serves,
                          std::unique_ptr<Transport>* out) {
  if (int(serves.size()) != ctx.nranks) return BRAID_ERROR(ncclInternalError, "net transport: serves has wrong size");
  if (net->devices() <= 0) return BRAID_ERROR(ncclSystemError, "{}: no device", net->name());
  std::vector<NetProperties> devices(size_t(net->devices()));
  for (int d = 0; d < net->devices(); ++d) BRAID_TRY(net->properties(d, &devices[size_t(d)]));
  NetDeviceChoice choice;
  BRAID_TRY(choose_net_devices(ctx, bootstrap, devices, &choice));
  std::string used;
  size_t max_p2p_bytes = SIZE_MAX;
  for (int d : choice.devices) {
    const NetProperties& p = devices[size_t(d)];
    if (!used.empty()) used += ", ";
    used += fmt::format("{} ({}, port {}, {} Mbps{})", d, p.name, p.port, p.speed_mbps, rail_text(p.rail, p.plane));
    if (p.max_p2p_bytes == 0)  // NCCL's error for it too
      return BRAID_ERROR(ncclInternalError, "{} device {} ({}) says it sends at most 0 bytes at once (maxP2pBytes)",
                         net->name(), d, p.name);
    max_p2p_bytes = std::min(max_p2p_bytes, p.max_p2p_bytes);
  }
  BRAID_INFO(kNet | kInit, "rank {}: {} transport on device{} {}; the nearest: {}{}", ctx.rank, net->name(),
             choice.devices.size() > 1 ? "s" : "", used, choice.why,
             choice.most_devices > 1 ? fmt::format("; calls between hosts in {} slices", choice.most_devices) : "");
  auto t = std::make_unique<NetTransport>(ctx, net, std::move(choice));
  if (t->slot_bytes() > max_p2p_bytes)  // each of braid's fragments over a net is one message
    return BRAID_ERROR(ncclInvalidUsage, "{} sends at most {} bytes at once (its maxP2pBytes), and braid's fragments "
                       "over it are {} bytes (BRAID_NET_SLOT_BYTES{}): set BRAID_NET_SLOT_BYTES to {} or less on "
                       "every rank", net->name(), max_p2p_bytes, t->slot_bytes(),
                       env_raw("BRAID_NET_SLOT_BYTES").empty() ? ", default" : "", max_p2p_bytes);
  BRAID_TRY(t->connect_controls(bootstrap, serves));
  *out = std::move(t);
  return Status::ok();
}

}  // namespace braid

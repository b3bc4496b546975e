// TCP transport, for ranks on different hosts.
//
// Each connection (sender, receiver, channel) is one TCP stream carrying
// fragments as [u64 length][payload], through in-memory staging rings of
// slots (like a shm segment's).  Every socket call is non-blocking, so the
// executor's try_acquire and commit never block.
//
// The executor moves the bytes itself: commit sends the fragment at once
// when nothing is queued before it, and a receive pipe with an empty ring
// reads what has arrived.  A progress thread per communicator (poll())
// only connects and accepts, and sends what the socket would not take at
// commit, so a committed fragment is delivered after the executor has moved
// on.  Why not the thread for every byte: each fragment then cost a wake-up
// of that thread on both sides (an eventfd write, a socket waking poll()),
// and a wake-up is the dearest thing on the path: a 2-process AllReduce
// of 8 B over loopback then took several times as long as over OpenMPI's
// TCP transport, nearly all of it kernel time waking threads (perf record;
// perf/results/socket_transport.txt).
//
// Waiting (the doorbell, doorbell.h): an executor with nothing to do sleeps
// in poll() on its receive streams and on an eventfd the progress thread
// signals when it frees room in a send ring.  One that also has peers on
// shared memory sleeps on that transport's futex instead, and while it is
// armed the progress thread watches the receive streams and rings it.
//
// Setup: the listener opens before the bootstrap allgather so its address
// travels in PeerInfo (a listener per interface where BRAID_/NCCL_SOCKET_IFNAME
// passes several: a connection on channel c goes to the peer's
// ((c + k) mod n)-th, k its index on its host, so slices, channels and a
// host's ranks spread over its NICs).  The sending side connects when its pipe is created
// and introduces itself with {comm hash, rank, channel}; the progress thread
// accepts and routes the stream to the matching receive pipe.  A peer that
// closes or resets a stream we still wait on is reported as ncclRemoteError.
//
// TLS (ncclSetEncryption): each stream runs its own session, handshaken by
// the progress thread before the hello and then driven by the pumps
// (socket_stream.h): the executor decrypts what it receives, and encrypts a
// fragment whole when it commits it, so the progress thread, finishing a
// send, only hands ciphertext to the kernel.  No relay thread, no hop.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "braid/verify.h"
#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/base/thread_name.h"
#include "src/transport/doorbell.h"
#include "src/transport/socket_stream.h"
#include "src/transport/transport.h"

namespace braid {
namespace {

struct Handshake {
  uint64_t comm_hash;
  int32_t rank;
  int32_t channel;
};

// Of a peer's listeners ("a:p,b:q": PeerInfo::socket_addr), the one a
// connection on `channel` goes to: channel c to the peer's ((c + k) mod n)-th,
// where the peer is its host's k-th rank, so a call's slices (and a
// schedule's channels) cross every NIC, and so do the one-slice
// connections to the ranks of one host.
std::string listener_for(const std::string& listeners, int channel, int local_index) {
  std::vector<std::string> each;
  for (size_t at = 0; at <= listeners.size();) {
    const size_t end = std::min(listeners.find(',', at), listeners.size());
    each.push_back(listeners.substr(at, end - at));
    at = end + 1;
  }
  return each[(size_t(channel) + size_t(local_index)) % each.size()];
}

void signal(int event_fd) {
  uint64_t one = 1;
  ssize_t ignored = ::write(event_fd, &one, sizeof(one));
  (void)ignored;
}
void drain(int event_fd) {
  uint64_t count;
  ssize_t ignored = ::read(event_fd, &count, sizeof(count));
  (void)ignored;
}

class SocketTransportImpl;

class SocketSendPipe final : public SendPipe {
 public:
  SocketSendPipe(Stream* s, SocketTransportImpl* t) : s_(s), t_(t) {}
  Status try_acquire(void** slot, size_t max_bytes) override;
  Status commit(size_t bytes) override;

 private:
  Stream* s_;
  SocketTransportImpl* t_;
};

class SocketRecvPipe final : public RecvPipe {
 public:
  SocketRecvPipe(Stream* s, SocketTransportImpl* t) : s_(s), t_(t) {}
  Status try_acquire(const void** data, size_t* bytes) override;
  Status release() override;

 private:
  Stream* s_;
  SocketTransportImpl* t_;
};

class ListenerImpl final : public SocketListener {
 public:
  ~ListenerImpl() override {
    for (int fd : fds) ::close(fd);
  }
  std::vector<int> fds;  // one per data interface
};

class SocketTransportImpl final : public Transport {
 public:
  SocketTransportImpl(const TransportContext& ctx, std::vector<int> listen_fds)
      : ctx_(ctx), listen_fds_(std::move(listen_fds)),
        slot_bytes_(size_t(std::max<int64_t>(kMinFragmentBytes, env_int("BRAID_SOCKET_SLOT_BYTES")))),
        wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        executor_wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        bell_(this, idle_polls_for(ranks_on_machine(ctx.peers, ctx.rank))) {
    thread_ = named_thread("braid socket", with_caller_env([this] { progress_loop(); }));
  }

  ~SocketTransportImpl() override {
    drain_sends();
    stop_.store(true);
    wake();
    thread_.join();
    // Closed as TCP closes them: what the last sends handed over still
    // arrives after this process exits, TLS or not (a session's records are
    // on the socket once its send took them).
    for (const auto& o : opening_) ::close(o->fd);
    for (auto* group : {&sends_, &recvs_})
      for (auto& [key, s] : *group)
        if (s->fd >= 0) ::close(s->fd);
    for (int fd : listen_fds_) ::close(fd);
    ::close(wake_fd_);
    ::close(executor_wake_fd_);
  }

  const char* name() const override { return "socket"; }
  uint64_t bytes_held() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t bytes = 0;
    for (auto* group : {&sends_, &recvs_})
      for (const auto& [key, s] : *group)
        bytes += s->ring.data.size() + (s->ahead ? kSocketReadAhead : 0) +
                 (s->sending && s->tls ? TlsSession::sealed_bytes(sizeof(uint64_t) + slot_bytes_) : 0);
    return bytes;
  }
  size_t slot_bytes() const override { return slot_bytes_; }
  int slots() const override { return int(kSocketSlots); }
  void abort() override {
    aborted_.store(true);
    // Peers waiting on this rank see its connections end now, not when the
    // transport is destroyed: a revoked communicator (ncclCommRevoke, a
    // shrink with NCCL_SHRINK_ABORT) lives on for its split or shrink, and
    // its peers would wait for it until BRAID_TIMEOUT.  Shut down, not
    // closed: no descriptor is reused under the threads still polling them.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto* group : {&sends_, &recvs_})
        for (auto& [key, s] : *group)
          if (const int fd = s->fd.load(); fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
    wake();
    wake_executor();
  }
  Doorbell* doorbell() override { return &bell_; }
  bool aborted() const { return aborted_.load(std::memory_order_relaxed); }

  Status send_pipe(int peer, int channel, SendPipe** out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = sends_[{peer, channel}];
    if (!s) {
      s = std::make_unique<Stream>(peer, channel, true, slot_bytes_);
      send_pipes_[{peer, channel}] = std::make_unique<SocketSendPipe>(s.get(), this);
      to_connect_.push_back(s.get());
      wake();
    }
    *out = send_pipes_[{peer, channel}].get();
    return Status::ok();
  }

  Status recv_pipe(int peer, int channel, RecvPipe** out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Stream* s = recv_stream_locked(peer, channel);
    auto& p = recv_pipes_[{peer, channel}];
    if (!p) p = std::make_unique<SocketRecvPipe>(s, this);
    *out = p.get();
    return Status::ok();
  }

  void wake() { signal(wake_fd_); }

 private:
  // A collective ends when its last fragment is committed, not delivered:
  // before closing, let the progress thread push out what is still queued
  // (bounded by BRAID_TIMEOUT; skipped after an abort or a failure).
  void drain_sends() {
    Deadline deadline = Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
    Waiter waiter;
    for (;;) {
      bool pending = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [key, s] : sends_)
          pending |= !s->failed && s->ring.head.load() != s->ring.tail.load(std::memory_order_acquire);
      }
      if (!pending || aborted() || deadline.expired()) return;
      waiter.pause();
    }
  }

  Stream* recv_stream_locked(int peer, int channel) {
    auto& s = recvs_[{peer, channel}];
    if (!s) {
      s = std::make_unique<Stream>(peer, channel, false, slot_bytes_);
      if (!accept_failure_.empty()) s->fail(accept_failure_);
    }
    return s.get();
  }

  void progress_loop() {
    std::vector<pollfd> fds;
    std::vector<Stream*> owners;  // parallel to fds; nullptr for listener/wake/handshakes
    uint32_t rang_for_arm = 0;    // the arm() whose executor a receive stream's data has woken
    while (!stop_.load()) {
      connect_new_streams();
      fds.clear();
      owners.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      owners.push_back(nullptr);
      for (int fd : listen_fds_) {
        fds.push_back({fd, short(accept_failure_.empty() ? POLLIN : 0), 0});
        owners.push_back(nullptr);
      }
      for (const auto& o : opening_) {
        fds.push_back({o->fd, o->events, 0});
        owners.push_back(nullptr);
      }
      // Receive streams are the executor's to read.  Only while it sleeps on
      // another doorbell (forwarded) are they watched here, until the first
      // data wakes it.
      const uint32_t arm = arms_.load(std::memory_order_acquire);
      const bool watch_recvs =
          forward_.load(std::memory_order_relaxed) && executor_sleepers_.load() > 0 && arm != rang_for_arm;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [key, s] : sends_) {
          const int fd = s->fd.load(std::memory_order_relaxed);
          if (fd < 0 || s->failed) continue;
          // Always watch for errors; ask for POLLOUT only with data queued.
          fds.push_back({fd, short(send_queue_empty(s.get()) ? 0 : POLLOUT), 0});
          owners.push_back(s.get());
        }
        for (auto& [key, s] : recvs_) {
          const int fd = s->fd.load(std::memory_order_relaxed);
          if (!watch_recvs || fd < 0 || s->failed || s->eof || recv_ring_full(s.get())) continue;
          fds.push_back({fd, POLLIN, 0});
          owners.push_back(s.get());
        }
      }
      int rc = ::poll(fds.data(), fds.size(), 100);
      // Index the poll set as it was built, before accepts change opening_.
      const size_t listeners = listen_fds_.size(), first_stream = 1 + listeners + opening_.size();
      advance_openings(std::span(fds).subspan(1 + listeners, opening_.size()));
      if (rc <= 0) continue;
      if (fds[0].revents) drain(wake_fd_);
      for (size_t i = 1; i <= listeners; ++i)
        if (fds[i].revents & POLLIN) accept_one(fds[i].fd);
      for (size_t i = first_stream; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Stream* s = owners[i];
        if (!s->sending) {
          rang_for_arm = arm;
          wake_executor();  // data to read
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(s->send_mutex);
          pump_send(s);
        }
        if (fds[i].revents & (POLLHUP | POLLERR)) {
          s->fail("the peer closed the connection");
          peer_left(s->peer);
        }
        wake_executor();  // room in the ring, or an error to see
      }
    }
  }

  // A connection being set up: the TLS handshake (with TLS on), then the
  // hello {comm hash, rank, channel}, which the connecting side sends and
  // the accepting side reads to route the stream.  The progress thread
  // drives every step without blocking: two ranks that connect to each
  // other at once each need the other's thread to answer their handshake.
  struct Opening {
    int fd = -1;
    std::unique_ptr<TlsSession> tls;
    Stream* stream = nullptr;  // the sending stream it opens; nullptr: accepted
    Handshake hello{};
    size_t hello_done = 0;
    short events = 0;  // what it waits for
    Deadline deadline = Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
  };

  void connect_new_streams() {
    std::vector<Stream*> todo;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      todo.swap(to_connect_);
    }
    for (Stream* s : todo) {
      SockAddr addr;
      const std::string at =
          listener_for(ctx_.peers[s->peer].socket_addr, s->channel, index_on_host(ctx_.peers, s->peer));
      Status st = parse_endpoint(at, &addr);
      auto o = std::make_unique<Opening>();
      if (st.is_ok()) st = connect_tcp_to_listener(addr, o->deadline, &aborted_, &o->fd);
      if (st.is_ok()) set_nonblocking(o->fd);
      if (st.is_ok() && tls_enabled()) st = TlsSession::open(o->fd, TlsRole::Client, &o->tls);
      if (!st.is_ok()) {
        if (o->fd >= 0) ::close(o->fd);
        s->fail(st.message());
        wake_executor();
        continue;
      }
      o->stream = s;
      o->hello = Handshake{ctx_.comm_hash, ctx_.rank, s->channel};
      if (advance(*o)) opening_.push_back(std::move(o));
    }
  }

  void accept_one(int listen_fd) {
    auto o = std::make_unique<Opening>();
    o->fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (o->fd < 0 && out_of_resources(errno)) return fail_accepts(errno);
    if (o->fd < 0) return;
    set_nodelay(o->fd);
    if (tls_enabled() && !TlsSession::open(o->fd, TlsRole::Server, &o->tls).is_ok()) {
      ::close(o->fd);
      return;
    }
    if (advance(*o)) opening_.push_back(std::move(o));
  }

  // A peer closed a connection this rank opened to it: its transport is
  // gone (it failed, aborted or left).  Its connections to this rank that
  // never came would give the calls waiting on them nothing to see, so they
  // fail now instead of at BRAID_TIMEOUT.
  void peer_left(int peer) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_unconnected_recvs(peer, fmt::format("rank {} closed this rank's connection to it before connecting back "
                                             "(it failed, aborted or left)", peer));
  }

  // Fails the receive streams from `peer` (-1: any) whose connection never came.  Hold mutex_.
  void fail_unconnected_recvs(int peer, const std::string& why) {
    for (auto& [key, s] : recvs_)
      if ((peer < 0 || s->peer == peer) && s->fd.load() < 0 && !s->failed) s->fail(why);
  }

  // Out of descriptors (or memory) to accept with: the connection stays
  // queued, so the listeners would poll readable forever.  They are polled
  // no more, and every receive stream not connected yet, or made later,
  // fails saying why, instead of waiting for BRAID_TIMEOUT.
  void fail_accepts(int err) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      accept_failure_ = fmt::format("cannot accept peers' connections: {} (the open-file limit, ulimit -n?)",
                                    std::strerror(err));
      fail_unconnected_recvs(-1, accept_failure_);
    }
    BRAID_WARN("socket transport: {}", accept_failure_);
    wake_executor();
  }

  // Steps the openings whose descriptors poll() reported (`polled`, in
  // opening_'s order) and drops those past their deadline.
  void advance_openings(std::span<const pollfd> polled) {
    for (size_t i = 0; i < polled.size(); ++i) {
      Opening& o = *opening_[i];
      if (polled[i].revents && !advance(o)) {
        o.fd = -1;  // handed over or closed
      } else if (o.deadline.expired()) {
        drop(o, "it did not complete its handshake in time");
        o.fd = -1;
      }
    }
    std::erase_if(opening_, [](const auto& o) { return o->fd < 0; });
  }

  // Moves an opening connection on as far as its socket allows: true while
  // it is still opening (poll for o.events), false once it was handed to
  // its stream or dropped.
  bool advance(Opening& o) {
    if (o.tls && !o.tls->established()) {
      bool done = false;
      Status st = o.tls->handshake(&done);
      if (!st.is_ok()) return drop(o, st.message());
      if (!done) return o.events = o.tls->wants(), true;
    }
    char* hello = reinterpret_cast<char*>(&o.hello);
    while (o.hello_done < sizeof(o.hello)) {
      const ssize_t n = o.stream ? send_some(o.tls.get(), o.fd, hello + o.hello_done, sizeof(o.hello) - o.hello_done)
                                 : recv_some(o.tls.get(), o.fd, hello + o.hello_done, sizeof(o.hello) - o.hello_done);
      if (n > 0) {
        o.hello_done += size_t(n);
        continue;
      }
      if (n < 0 && errno_would_block()) {
        o.events = o.tls ? o.tls->wants() : short(o.stream ? POLLOUT : POLLIN);
        return true;
      }
      return drop(o, n == 0 ? std::string("the peer closed it") : io_failure(o.tls.get(), "the hello"));
    }
    return o.stream ? opened(o) : accepted(o);
  }

  bool drop(Opening& o, const std::string& why) {
    if (o.stream) {
      o.stream->fail(why);
      wake_executor();
    } else {
      BRAID_INFO(kNet, "socket transport: dropped a connection without a valid handshake ({})", why);
    }
    ::close(o.fd);
    return false;
  }

  // The sending side: the stream may now be pumped.
  bool opened(Opening& o) {
    if (o.tls) o.tls->reserve_outbox(sizeof(uint64_t) + slot_bytes_);  // a fragment, sealed whole
    std::lock_guard<std::mutex> lock(mutex_);
    o.stream->tls = std::move(o.tls);
    o.stream->fd.store(o.fd, std::memory_order_release);
    wake_executor();  // its sender waits for the connection (SocketSendPipe::try_acquire)
    return false;
  }

  // The receiving side: routed by its hello to the matching receive stream.
  bool accepted(Opening& o) {
    const Handshake& hello = o.hello;
    if (hello.comm_hash != ctx_.comm_hash || hello.rank < 0 || hello.rank >= ctx_.nranks || hello.channel < 0)
      return drop(o, "a hello of another communicator, or malformed");
    std::lock_guard<std::mutex> lock(mutex_);
    Stream* s = recv_stream_locked(hello.rank, hello.channel);
    if (s->fd >= 0) {
      BRAID_WARN("socket transport: rank {} channel {} connected twice; dropped", hello.rank, hello.channel);
      ::close(o.fd);
      return false;
    }
    s->tls = std::move(o.tls);
    s->fd.store(o.fd, std::memory_order_release);
    wake_executor();  // a stream it may be waiting on can now be read
    return false;
  }

  // The executor's side of the doorbell: it sleeps in poll() on the streams
  // it reads and on executor_wake_fd_, which the progress thread signals
  // for what the sockets do not show (room freed in a send ring, a stream
  // connected or failed).
  void sleep_until_traffic() {
    sleep_fds_.clear();
    sleep_fds_.push_back({executor_wake_fd_, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [key, s] : recvs_) {
        const int fd = s->fd.load(std::memory_order_relaxed);
        // A full ring waits for the executor, not for the socket.
        if (fd < 0 || s->failed || s->eof || recv_ring_full(s.get())) continue;
        sleep_fds_.push_back({fd, POLLIN, 0});
      }
    }
    if (::poll(sleep_fds_.data(), sleep_fds_.size(), int(Doorbell::kNapNs / 1000000)) > 0 && sleep_fds_[0].revents)
      drain(executor_wake_fd_);
  }

  // Called by the progress thread after it changed what the executor waits on.
  void wake_executor() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with arm() (doorbell.h explains)
    if (!executor_sleepers_.load(std::memory_order_relaxed)) return;
    if (Doorbell* to = forward_.load(std::memory_order_acquire)) to->ring();
    else signal(executor_wake_fd_);
  }

  class SocketDoorbell final : public Doorbell {
   public:
    SocketDoorbell(SocketTransportImpl* t, IdlePolls polls) : Doorbell(polls), t_(t) {}
    uint32_t arm() override {
      t_->executor_sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (t_->forward_.load(std::memory_order_relaxed)) {
        // Have the progress thread watch the receive streams for this sleep.
        t_->arms_.fetch_add(1, std::memory_order_release);
        t_->wake();
      }
      return 0;
    }
    void sleep(uint32_t) override {
      t_->sleep_until_traffic();
      disarm();
    }
    void disarm() override { t_->executor_sleepers_.fetch_sub(1, std::memory_order_relaxed); }
    void ring() override { signal(t_->executor_wake_fd_); }
    bool forward_to(Doorbell* to) override {
      t_->forward_.store(to, std::memory_order_release);
      return true;
    }

   private:
    SocketTransportImpl* t_;
  };

  TransportContext ctx_;
  const std::vector<int> listen_fds_;
  std::string accept_failure_;  // under mutex_ (written once, by the progress thread, which also reads it)
  const size_t slot_bytes_;
  const int wake_fd_;
  const int executor_wake_fd_;
  std::atomic<uint32_t> executor_sleepers_{0};
  std::atomic<Doorbell*> forward_{nullptr};  // set: the executor sleeps on this doorbell instead
  std::atomic<uint32_t> arms_{0};            // arm() calls while forwarding
  SocketDoorbell bell_;
  std::vector<pollfd> sleep_fds_;  // the executor's, reused
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;  // guards the maps and to_connect_
  std::map<std::pair<int, int>, std::unique_ptr<Stream>> sends_, recvs_;
  std::map<std::pair<int, int>, std::unique_ptr<SocketSendPipe>> send_pipes_;
  std::map<std::pair<int, int>, std::unique_ptr<SocketRecvPipe>> recv_pipes_;
  std::vector<Stream*> to_connect_;
  std::vector<std::unique_ptr<Opening>> opening_;  // progress thread only
  std::thread thread_;
};

Status SocketSendPipe::try_acquire(void** slot, size_t) {
  *slot = nullptr;
  if (t_->aborted()) return BRAID_ERROR(ncclSystemError, "socket connection with rank {}: aborted", s_->peer);
  if (s_->failed.load(std::memory_order_acquire)) return s_->status();
  // Nothing is staged before the connection is up: a call must not end with
  // its last fragments queued on a stream its peer never saw, which a
  // process that exits or aborts next would take with it, leaving the peer
  // no socket on which to see it go (it would wait out BRAID_TIMEOUT).
  if (s_->fd.load(std::memory_order_acquire) < 0) return Status::ok();
  StagingRing& r = s_->ring;
  uint64_t head = r.head.load(std::memory_order_relaxed);
  if (head - r.tail.load(std::memory_order_acquire) < r.slots) *slot = r.slot(head);
  return Status::ok();
}

Status SocketSendPipe::commit(size_t bytes) {
  StagingRing& r = s_->ring;
  uint64_t head = r.head.load(std::memory_order_relaxed);
  r.set_length(head, bytes);
  r.head.store(head + 1, std::memory_order_release);
  // Send now, unless the progress thread is at it (it sees the new head);
  // wake it for what the socket refuses.
  bool queued = true;
  if (s_->fd.load(std::memory_order_acquire) >= 0 && s_->send_mutex.try_lock()) {
    pump_send(s_);
    s_->send_mutex.unlock();
    queued = !send_queue_empty(s_);
  }
  if (queued) t_->wake();
  return Status::ok();
}

Status SocketRecvPipe::try_acquire(const void** data, size_t* bytes) {
  *data = nullptr;
  if (t_->aborted()) return BRAID_ERROR(ncclSystemError, "socket connection with rank {}: aborted", s_->peer);
  StagingRing& r = s_->ring;
  uint64_t tail = r.tail.load(std::memory_order_relaxed);
  if (tail == r.head.load(std::memory_order_relaxed) && s_->fd.load(std::memory_order_acquire) >= 0 &&
      !s_->failed.load(std::memory_order_relaxed) && !s_->eof.load(std::memory_order_relaxed))
    pump_recv(s_);
  if (tail != r.head.load(std::memory_order_relaxed)) {
    *data = r.slot(tail);
    *bytes = r.length(tail);
    return Status::ok();
  }
  if (s_->failed.load(std::memory_order_acquire)) return s_->status();
  if (s_->eof.load(std::memory_order_acquire))
    return BRAID_ERROR(ncclRemoteError, "socket connection with rank {} (channel {}): the peer closed it",
                       s_->peer, s_->channel);
  return Status::ok();
}

Status SocketRecvPipe::release() {
  StagingRing& r = s_->ring;
  r.tail.store(r.tail.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return Status::ok();
}

}  // namespace

Status socket_listen(const SockAddr& ip, std::unique_ptr<SocketListener>* out, std::string* address) {
  auto listener = std::make_unique<ListenerImpl>();
  address->clear();
  for (const SockAddr& at : data_addresses(ip)) {
    int fd = -1;
    SockAddr bound;
    BRAID_TRY(listen_tcp(at, &fd, &bound));
    listener->fds.push_back(fd);
    if (!address->empty()) *address += ',';
    *address += to_string(bound);
  }
  if (address->size() >= sizeof(PeerInfo::socket_addr))
    return BRAID_ERROR(ncclInternalError, "the listeners' addresses do not fit PeerInfo: {}", *address);
  *out = std::move(listener);
  return Status::ok();
}

Status make_socket_transport(const TransportContext& ctx, std::unique_ptr<SocketListener> listener,
                             std::unique_ptr<Transport>* out) {
  auto* impl = dynamic_cast<ListenerImpl*>(listener.get());
  if (!impl || impl->fds.empty()) return BRAID_ERROR(ncclInternalError, "socket transport without a listener");
  *out = std::make_unique<SocketTransportImpl>(ctx, std::move(impl->fds));  // the transport owns them now
  impl->fds.clear();
  return Status::ok();
}

}  // namespace braid

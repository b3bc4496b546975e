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
// travels in PeerInfo.  The sending side connects when its pipe is created
// and introduces itself with {comm hash, rank, channel}; the progress thread
// accepts and routes the stream to the matching receive pipe.  A peer that
// closes or resets a stream we still wait on is reported as ncclRemoteError.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "braid/verify.h"
#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/base/tls.h"
#include "src/transport/doorbell.h"
#include "src/transport/transport.h"

namespace braid {
namespace {

constexpr uint32_t kSocketSlots = 4;
constexpr size_t kReadAhead = 4096;  // bytes a receive asks for beyond what it knows it needs

struct Handshake {
  uint64_t comm_hash;
  int32_t rank;
  int32_t channel;
};

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

// A single-producer single-consumer ring of staging slots.
struct StagingRing {
  StagingRing(uint32_t slots, size_t slot_bytes) : slots(slots), slot_bytes(slot_bytes), data(slots * slot_bytes), lengths(slots) {}
  char* slot(uint64_t i) { return data.data() + (i % slots) * slot_bytes; }
  uint64_t& length(uint64_t i) { return lengths[i % slots]; }
  const uint32_t slots;
  const size_t slot_bytes;
  std::vector<char> data;
  std::vector<uint64_t> lengths;
  std::atomic<uint64_t> head{0};  // slots filled by the producer
  std::atomic<uint64_t> tail{0};  // slots emptied by the consumer
};

// Shared by both pipe kinds: the stream, its ring, and a sticky error.
struct Stream {
  Stream(int peer, int channel, bool sending, size_t slot_bytes)
      : peer(peer), channel(channel), sending(sending), ring(kSocketSlots, slot_bytes),
        ahead(sending ? nullptr : new char[kReadAhead]) {}
  const int peer, channel;
  const bool sending;
  StagingRing ring;
  std::atomic<int> fd{-1};   // set once, by the progress thread (connect or accept)
  // Sending side: whoever holds send_mutex pumps the ring into the socket
  // (the executor at commit, else the progress thread).  Receiving side:
  // only the executor reads.
  std::mutex send_mutex;
  size_t offset = 0;        // progress within the current [length][payload]
  uint64_t wire_length = 0; // receive side: length header being read
  // Receive side: bytes read past the fragment being filled, [begin, end).
  std::unique_ptr<char[]> ahead;
  size_t ahead_begin = 0, ahead_end = 0;
  std::atomic<bool> failed{false};
  std::atomic<bool> eof{false};
  std::mutex error_mutex;
  std::string error;

  void fail(std::string why) {
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (error.empty()) error = std::move(why);
    }
    failed.store(true, std::memory_order_release);
  }
  Status status() {
    std::lock_guard<std::mutex> lock(error_mutex);
    return BRAID_ERROR(ncclRemoteError, "socket connection with rank {} (channel {}): {}", peer, channel, error);
  }
};

// Writes queued fragments until the socket would block.  Hold s->send_mutex.
void pump_send(Stream* s) {
  StagingRing& r = s->ring;
  while (r.tail.load(std::memory_order_relaxed) != r.head.load(std::memory_order_acquire)) {
    uint64_t i = r.tail.load(std::memory_order_relaxed);
    uint64_t len = r.length(i);
    iovec iov[2];
    int n = 0;
    if (s->offset < sizeof(len)) {
      iov[n++] = {reinterpret_cast<char*>(&r.length(i)) + s->offset, sizeof(len) - s->offset};
      iov[n++] = {r.slot(i), len};
    } else {
      iov[n++] = {r.slot(i) + (s->offset - sizeof(len)), len - (s->offset - sizeof(len))};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t w = ::sendmsg(s->fd.load(std::memory_order_relaxed), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      s->fail(fmt::format("send failed: {}", std::strerror(errno)));
      return;
    }
    s->offset += size_t(w);
    if (s->offset < sizeof(len) + len) return;
    s->offset = 0;
    r.tail.store(i + 1, std::memory_order_release);
  }
}

bool recv_ring_full(Stream* s) {
  return s->ring.head.load(std::memory_order_acquire) - s->ring.tail.load(std::memory_order_acquire) >= s->ring.slots;
}

bool send_queue_empty(Stream* s) {
  return s->ring.head.load(std::memory_order_acquire) == s->ring.tail.load(std::memory_order_acquire);
}

// Reads fragments into free slots (the receiving executor's thread only)
// until the socket would block, or until one is complete and nothing read
// is left over: a further recv would most likely find nothing, a wasted
// syscall on a small message's path.  A recv for a header (or for a payload
// that fits) asks for up to kReadAhead bytes, so a small fragment's header
// and payload, and whatever follows, come in one call; the rest of a large
// payload is read straight into its slot.
void pump_recv(Stream* s) {
  StagingRing& r = s->ring;
  const int fd = s->fd.load(std::memory_order_relaxed);
  while (r.head.load(std::memory_order_relaxed) - r.tail.load(std::memory_order_relaxed) < r.slots) {
    const uint64_t i = r.head.load(std::memory_order_relaxed);
    const bool in_header = s->offset < sizeof(uint64_t);
    char* dst = in_header ? reinterpret_cast<char*>(&s->wire_length) + s->offset
                          : r.slot(i) + (s->offset - sizeof(uint64_t));
    const size_t want = in_header ? sizeof(uint64_t) - s->offset : s->wire_length - (s->offset - sizeof(uint64_t));
    size_t n = 0;
    if (s->ahead_begin < s->ahead_end) {
      n = std::min(want, s->ahead_end - s->ahead_begin);
      std::memcpy(dst, s->ahead.get() + s->ahead_begin, n);
      s->ahead_begin += n;
    } else if (want > 0) {
      const bool via_ahead = in_header || want <= kReadAhead;
      const ssize_t got = ::recv(fd, via_ahead ? s->ahead.get() : dst, via_ahead ? kReadAhead : want, MSG_DONTWAIT);
      if (got == 0) {
        s->eof.store(true, std::memory_order_release);
        if (s->offset) s->fail("the peer closed the connection in the middle of a fragment");
        return;
      }
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        s->fail(fmt::format("recv failed: {}", std::strerror(errno)));
        return;
      }
      if (via_ahead) {
        s->ahead_begin = 0;
        s->ahead_end = size_t(got);
        continue;
      }
      n = size_t(got);
    }
    s->offset += n;
    if (s->offset < sizeof(uint64_t)) continue;
    if (in_header && s->wire_length > r.slot_bytes) {
      s->fail(fmt::format("malformed fragment of {} bytes (slot is {})", s->wire_length, r.slot_bytes));
      return;
    }
    if (s->offset == sizeof(uint64_t) + s->wire_length) {
      r.length(i) = s->wire_length;
      s->offset = 0;
      r.head.store(i + 1, std::memory_order_release);
      if (s->ahead_begin == s->ahead_end) return;
    }
  }
}

class SocketTransportImpl;

class SocketSendPipe final : public SendPipe {
 public:
  SocketSendPipe(Stream* s, SocketTransportImpl* t) : s_(s), t_(t) {}
  Status try_acquire(void** slot) override;
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
  explicit ListenerImpl(int fd) : fd(fd) {}
  ~ListenerImpl() override {
    if (fd >= 0) ::close(fd);
  }
  int fd;
};

// The threads a rank's socket traffic needs a core for, for the idle
// policy: its own per local rank, and with TLS on the process's relay (it
// encrypts and decrypts every byte) as much again, so that ranks that would
// spin while the relay waits for a core yield to it instead.
int threads_on_path(const TransportContext& ctx) {
  return ranks_on_machine(ctx.peers, ctx.rank) * (tls_enabled() ? 2 : 1);
}

class SocketTransportImpl final : public Transport {
 public:
  SocketTransportImpl(const TransportContext& ctx, int listen_fd)
      : ctx_(ctx), listen_fd_(listen_fd),
        slot_bytes_(size_t(std::max<int64_t>(64, env_int("BRAID_SOCKET_SLOT_BYTES")))),
        wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        executor_wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        bell_(this, idle_polls_for(threads_on_path(ctx))) {
    thread_ = std::thread(with_caller_env([this] { progress_loop(); }));
  }

  ~SocketTransportImpl() override {
    drain_sends();
    stop_.store(true);
    wake();
    thread_.join();
    // Closed as TCP closes them: what the last sends handed over still
    // arrives after this process exits, TLS or not (tls_close).  After an
    // abort nothing is waited for.
    std::vector<int> fds = handshaking_;
    for (auto* group : {&sends_, &recvs_})
      for (auto& [key, s] : *group) fds.push_back(s->fd.load());
    tls_close(fds, aborted() ? Deadline::after(std::chrono::milliseconds(0))
                             : Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT"))));
    ::close(listen_fd_);
    ::close(wake_fd_);
    ::close(executor_wake_fd_);
  }

  const char* name() const override { return "socket"; }
  uint64_t bytes_held() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t bytes = 0;
    for (auto* group : {&sends_, &recvs_})
      for (const auto& [key, s] : *group) bytes += s->ring.data.size() + (s->ahead ? kReadAhead : 0);
    return bytes;
  }
  size_t slot_bytes() const override { return slot_bytes_; }
  int slots() const override { return int(kSocketSlots); }
  void abort() override {
    aborted_.store(true);
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
    if (!s) s = std::make_unique<Stream>(peer, channel, false, slot_bytes_);
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
      fds.push_back({listen_fd_, POLLIN, 0});
      owners.push_back(nullptr);
      for (int fd : handshaking_) {
        fds.push_back({fd, POLLIN, 0});
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
      if (rc <= 0) continue;
      if (fds[0].revents) drain(wake_fd_);
      // Index the poll set as it was built, before accept/handshake change handshaking_.
      const size_t first_stream = 2 + handshaking_.size();
      for (size_t i = 2; i < first_stream; ++i)
        if (fds[i].revents) finish_handshake(fds[i].fd);
      if (fds[1].revents & POLLIN) accept_one();
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
        if (fds[i].revents & (POLLHUP | POLLERR)) s->fail("the peer closed the connection");
        wake_executor();  // room in the ring, or an error to see
      }
    }
  }

  void connect_new_streams() {
    std::vector<Stream*> todo;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      todo.swap(to_connect_);
    }
    for (Stream* s : todo) {
      sockaddr_in addr{};
      Status st = parse_ipv4_endpoint(ctx_.peers[s->peer].socket_addr, &addr);
      int fd = -1;
      Deadline deadline = Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
      if (st.is_ok()) st = connect_tcp(addr, deadline, &aborted_, &fd);
      if (st.is_ok()) st = tls_secure(&fd, TlsRole::Client);
      Handshake hello{ctx_.comm_hash, ctx_.rank, s->channel};
      if (st.is_ok()) st = send_all(fd, &hello, sizeof(hello), deadline, &aborted_);
      if (!st.is_ok()) {
        if (fd >= 0) ::close(fd);
        s->fail(st.message());
        wake_executor();
        continue;
      }
      set_nonblocking(fd);
      std::lock_guard<std::mutex> lock(mutex_);
      s->fd = fd;
    }
  }

  void accept_one() {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    set_nodelay(fd);
    if (!tls_secure(&fd, TlsRole::Server).is_ok()) {
      ::close(fd);
      return;
    }
    handshaking_.push_back(fd);
  }

  void finish_handshake(int fd) {
    std::erase(handshaking_, fd);
    Handshake hello{};
    Status st = recv_all(fd, &hello, sizeof(hello), Deadline::after(std::chrono::seconds(1) + tls_hello_grace()), &aborted_);
    if (!st.is_ok() || hello.comm_hash != ctx_.comm_hash || hello.rank < 0 || hello.rank >= ctx_.nranks ||
        hello.channel < 0) {
      BRAID_INFO(kNet, "socket transport: dropped a connection without a valid handshake");
      ::close(fd);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Stream* s = recv_stream_locked(hello.rank, hello.channel);
    if (s->fd >= 0) {
      BRAID_WARN("socket transport: rank {} channel {} connected twice; dropped", hello.rank, hello.channel);
      ::close(fd);
      return;
    }
    s->fd = fd;
    wake_executor();  // a stream it may be waiting on can now be read
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
  const int listen_fd_;
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
  std::vector<int> handshaking_;  // progress thread only
  std::thread thread_;
};

Status SocketSendPipe::try_acquire(void** slot) {
  *slot = nullptr;
  if (t_->aborted()) return BRAID_ERROR(ncclSystemError, "socket connection with rank {}: aborted", s_->peer);
  if (s_->failed.load(std::memory_order_acquire)) return s_->status();
  StagingRing& r = s_->ring;
  uint64_t head = r.head.load(std::memory_order_relaxed);
  if (head - r.tail.load(std::memory_order_acquire) < r.slots) *slot = r.slot(head);
  return Status::ok();
}

Status SocketSendPipe::commit(size_t bytes) {
  StagingRing& r = s_->ring;
  uint64_t head = r.head.load(std::memory_order_relaxed);
  r.length(head) = bytes;
  r.head.store(head + 1, std::memory_order_release);
  // Send now, unless the progress thread is at it (it sees the new head) or
  // the stream is not connected yet; wake it for what the socket refuses.
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

Status socket_listen(in_addr ip, std::unique_ptr<SocketListener>* out, std::string* address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr = ip;
  int fd = -1;
  sockaddr_in bound{};
  BRAID_TRY(listen_tcp(addr, &fd, &bound));
  *address = to_string(bound);
  *out = std::make_unique<ListenerImpl>(fd);
  return Status::ok();
}

Status make_socket_transport(const TransportContext& ctx, std::unique_ptr<SocketListener> listener,
                             std::unique_ptr<Transport>* out) {
  auto* impl = dynamic_cast<ListenerImpl*>(listener.get());
  if (!impl || impl->fd < 0) return BRAID_ERROR(ncclInternalError, "socket transport without a listener");
  int fd = impl->fd;
  impl->fd = -1;  // the transport owns it now
  *out = std::make_unique<SocketTransportImpl>(ctx, fd);
  return Status::ok();
}

}  // namespace braid

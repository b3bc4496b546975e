// GIN frames over TCP.  The receiver polls all its streams from one thread
// with a short timeout, so stop() is seen promptly.  It never blocks on one
// stream: each keeps how far its current frame has come (header bytes, then
// payload bytes, read straight into the window), and a turn reads only what
// has arrived, up to kTurnBytes, so a slow or stalled sender does not hold
// the others' frames, and a large put does not hold their signals.  An
// answer to a get goes out the same way, as much as the socket takes per
// turn.
#include "src/devapi/gin_tcp.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include "src/base/net.h"
#include "src/base/thread_name.h"
#include "src/base/tls_session.h"

namespace braid::devapi {

namespace {

constexpr uint32_t kFrameMagic = 0x6e696762;  // "bgin"
enum FrameKind : uint32_t {
  kPut = 1,
  kClose = 2,
  kVaSignal = 3,   // to the target: add signal_value at (dst_handle, dst_off)
  kGet = 4,        // to the target: send back `bytes` at (dst_handle, dst_off)
  kGetReply = 5,   // from the target: the bytes follow
  kGetRefused = 6  // from the target: they are outside its windows
};

using Frame = GinTcpFrame;
static_assert(sizeof(Frame) == 48);

struct Hello {
  uint32_t magic;
  int32_t rank;
};

// The timeout counts time without progress, as BRAID_TIMEOUT does
// everywhere: a payload moves in pieces, each with a fresh deadline, so a
// large put on a slow link is no error and only a stream that stalls is.
constexpr uint64_t kPiece = 1 << 20;

// What one stream may read in a turn of the receiver before the next
// stream's turn (whatever has arrived, up to this).
constexpr uint64_t kTurnBytes = 4 << 20;

}  // namespace

TcpGinLink::~TcpGinLink() {
  if (fd_ >= 0) ::close(fd_);
}

Status TcpGinLink::send_frame(const Frame& f, const void* payload, const char* what) {
  if (fd_ < 0) return BRAID_ERROR(ncclInvalidUsage, "GIN {} to rank {} after its link was closed", what, target_);
  Status s = send_bytes(reinterpret_cast<const char*>(&f), sizeof(f));
  // The payload piece by piece: straight where the host reaches window
  // memory, else staged through the ops' copies.
  const char* src = static_cast<const char*>(payload);
  for (uint64_t done = 0; s.is_ok() && payload && done < f.bytes; done += kPiece) {
    const uint64_t piece = std::min(kPiece, f.bytes - done);
    const char* from = src + done;
    if (!ops_.host_direct()) {
      send_stage_.resize(kPiece);
      s = ops_.copy(send_stage_.data(), from, piece);
      from = send_stage_.data();
    }
    if (s.is_ok()) s = send_bytes(from, piece);
  }
  if (!s.is_ok()) {
    broken_ = true;
    return std::move(s).context(fmt::format("GIN {} to rank {}", what, target_));
  }
  return Status::ok();
}

// The target reads nothing more from this stream while it sends an answer
// here, so a sender that only wrote could wait on it forever: while the
// socket is full, answers are read.  The timeout counts time without
// progress either way.
Status TcpGinLink::send_bytes(const char* p, uint64_t bytes) {
  auto last = std::chrono::steady_clock::now();
  while (bytes > 0) {
    const ssize_t n = send_some(tls_.get(), fd_, p, bytes);  // (TLS: repeated with the same bytes until taken)
    if (n > 0) {
      p += n;
      bytes -= uint64_t(n);
      last = std::chrono::steady_clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return BRAID_ERROR(ncclRemoteError, "{}", io_failure(tls_.get(), "send"));
    pollfd pfd{fd_, short((tls_ ? tls_->wants() : POLLOUT) | (gets_.empty() ? 0 : POLLIN)), 0};
    if (::poll(&pfd, 1, 20) < 0 && errno != EINTR)
      return BRAID_ERROR(ncclSystemError, "poll: {}", std::strerror(errno));
    if ((pfd.revents & POLLIN) || (!gets_.empty() && tls_ && tls_->buffered())) {
      const uint64_t landed = gets_landed_, got = answer_got_;
      BRAID_TRY(receive_answers());
      if (gets_landed_ != landed || answer_got_ != got) last = std::chrono::steady_clock::now();
    }
    if (std::chrono::steady_clock::now() - last > timeout_)
      return BRAID_ERROR(ncclTimeout, "send: rank {} took nothing for {} ms (BRAID_TIMEOUT)", target_,
                         timeout_.count());
  }
  return Status::ok();
}

Status TcpGinLink::put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
                       const GinSignalAdd* signal) {
  return send_frame(Frame{kFrameMagic, kPut, dst_handle, dst_off, bytes, signal ? signal->value : 0,
                          signal ? signal->word : 0, uint32_t(signal ? 1 : 0)},
                    src, "put");
}

Status TcpGinLink::add_at(uint64_t handle, uint64_t off, uint64_t value) {
  return send_frame(Frame{kFrameMagic, kVaSignal, handle, off, 0, value, 0, 0}, nullptr, "VA signal");
}

// The answer comes on this stream, whose other end only the target's
// receiver writes, and only to answer gets, in their order.
Status TcpGinLink::get(uint64_t src_handle, uint64_t src_off, void* dst, uint64_t bytes) {
  if (gets_.empty()) last_answer_ = std::chrono::steady_clock::now();  // the wait for an answer starts
  gets_.push_back({static_cast<char*>(dst), bytes, src_handle, src_off});
  ++gets_issued_;
  return send_frame(Frame{kFrameMagic, kGet, src_handle, src_off, bytes, 0, 0, 0}, nullptr, "get");
}

Status TcpGinLink::progress() {
  if (gets_.empty()) return Status::ok();
  Status s = receive_answers();
  if (s.is_ok() && !gets_.empty() && std::chrono::steady_clock::now() - last_answer_ > timeout_)
    s = BRAID_ERROR(ncclTimeout, "no answer for {} ms (BRAID_TIMEOUT)", timeout_.count());
  if (!s.is_ok()) {
    broken_ = true;
    const PendingGet& g = gets_.front();
    return std::move(s).context(fmt::format("GIN get of [{}, +{}) of window {:#x} from rank {}", g.off, g.bytes,
                                            g.handle, target_));
  }
  return Status::ok();
}

Status TcpGinLink::receive_answers() {
  const bool direct = ops_.host_direct();
  while (!gets_.empty()) {
    const PendingGet& g = gets_.front();
    const bool in_header = answer_got_ < sizeof(Frame);
    const uint64_t done = in_header ? 0 : answer_got_ - sizeof(Frame);
    char* into = reinterpret_cast<char*>(&answer_) + answer_got_;
    uint64_t want = sizeof(Frame) - answer_got_;
    if (!in_header) {
      want = g.bytes - done;
      into = g.dst + done;
      if (!direct) {
        recv_stage_.resize(kPiece);
        want = std::min(want, kPiece);
        into = recv_stage_.data();
      }
    }
    const ssize_t n = recv_some(tls_.get(), fd_, into, want);  // want > 0: a landed get is popped below
    if (n == 0) return BRAID_ERROR(ncclRemoteError, "rank {} closed the stream", target_);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
      return BRAID_ERROR(ncclRemoteError, "{}", io_failure(tls_.get(), "recv"));
    }
    last_answer_ = std::chrono::steady_clock::now();
    if (!in_header && !direct) BRAID_TRY(ops_.copy(g.dst + done, recv_stage_.data(), uint64_t(n)));
    answer_got_ += uint64_t(n);
    if (answer_got_ == sizeof(Frame)) {  // the header is in: check it
      if (answer_.magic != kFrameMagic || (answer_.kind != kGetReply && answer_.kind != kGetRefused) ||
          (answer_.kind == kGetReply && answer_.bytes != g.bytes))
        return BRAID_ERROR(ncclRemoteError, "malformed answer (kind {}, {} bytes)", answer_.kind, answer_.bytes);
      if (answer_.kind == kGetRefused)
        return BRAID_ERROR(ncclInvalidArgument, "outside rank {}'s windows", target_);
    }
    if (answer_got_ < sizeof(Frame) + g.bytes) continue;
    gets_.pop_front();
    ++gets_landed_;
    answer_got_ = 0;
  }
  return Status::ok();
}

void TcpGinLink::abort() {
  if (fd_ < 0) return;
  ::shutdown(fd_, SHUT_RDWR);  // the receiver sees the stream end without its close frame
  ::close(fd_);
  fd_ = -1;
}

Status TcpGinLink::close() {
  if (fd_ < 0) return Status::ok();
  if (broken_) {
    abort();
    return BRAID_ERROR(ncclRemoteError, "GIN link to rank {} aborted after a failed put", target_);
  }
  Frame f{kFrameMagic, kClose, 0, 0, 0, 0, 0, 0};
  Status s = send_all(fd_, &f, sizeof(f), Deadline::after(timeout_), nullptr, tls_.get());
  ::close(fd_);  // (the kernel delivers the close frame even if this process exits now)
  fd_ = -1;
  if (!s.is_ok()) return std::move(s).context(fmt::format("closing the GIN link to rank {}", target_));
  return Status::ok();
}

Status TcpGinLink::send_hello(int fd, int rank, Deadline deadline, TlsSession* tls) {
  Hello h{kFrameMagic, rank};
  return send_all(fd, &h, sizeof(h), deadline, nullptr, tls);
}

Status GinTcpReceiver::recv_hello(int fd, int nranks, Deadline deadline, int* rank, TlsSession* tls) {
  Hello h{};
  BRAID_TRY(recv_all(fd, &h, sizeof(h), deadline, nullptr, tls));
  if (h.magic != kFrameMagic) return BRAID_ERROR(ncclRemoteError, "not a GIN stream (magic {:#x})", h.magic);
  if (h.rank < 0 || h.rank >= nranks)
    return BRAID_ERROR(ncclRemoteError, "a GIN stream says it comes from rank {} of {}", h.rank, nranks);
  *rank = h.rank;
  return Status::ok();
}

GinTcpReceiver::GinTcpReceiver(std::vector<int> fds, std::vector<int> sender_of, const GinWindowTable* windows,
                               GinSignals signals, GinFault* fault, std::chrono::milliseconds timeout,
                               std::vector<std::unique_ptr<TlsSession>> tls)
    : windows_(windows),
      signals_(signals),
      fault_(fault),
      timeout_(timeout) {
  if (!signals_.ops->host_direct()) stage_.resize(kPiece);  // before the thread: advance() reads into it
  for (size_t i = 0; i < fds.size(); ++i) {
    streams_.emplace_back();
    streams_.back().fd = fds[i];
    streams_.back().sender = i < sender_of.size() ? sender_of[i] : -1;
    if (i < tls.size()) streams_.back().tls = std::move(tls[i]);
  }
  thread_ = named_thread("braid gin tcp", [this] { run(); });
}

GinTcpReceiver::~GinTcpReceiver() {
  stop();
  for (const Stream& st : streams_)
    if (st.fd >= 0) ::close(st.fd);
}

void GinTcpReceiver::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

// Reads what stream i has ready, up to kTurnBytes, applying each frame it
// completes: a put's payload lands in the window as it arrives (through
// the staging buffer where the host cannot reach windows), its signal once
// all of it has.  *closed at the close frame.
Status GinTcpReceiver::advance(size_t i, bool* closed) {
  Stream& st = streams_[i];
  const bool direct = signals_.ops->host_direct();
  uint64_t budget = kTurnBytes;
  while (budget > 0) {
    const bool in_header = st.header_got < sizeof(Frame);
    char* into = in_header ? reinterpret_cast<char*>(&st.frame) + st.header_got
                           : (direct ? st.dst + st.payload_got : stage_.data());
    uint64_t want = in_header ? sizeof(Frame) - st.header_got : std::min(budget, st.frame.bytes - st.payload_got);
    if (!in_header && !direct) want = std::min(want, kPiece);
    const ssize_t n = recv_some(st.tls.get(), st.fd, into, want);  // want > 0: a frame is never done here
    if (n == 0)
      return BRAID_ERROR(ncclRemoteError, "rank {}'s GIN stream ended without a close: the process died or aborted",
                         st.sender);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
      return BRAID_ERROR(ncclRemoteError, "rank {}'s GIN stream failed: {}", st.sender,
                         io_failure(st.tls.get(), "recv"));
    }
    st.last_progress = std::chrono::steady_clock::now();
    budget -= std::min<uint64_t>(budget, uint64_t(n));
    if (in_header) {
      st.header_got += size_t(n);
      if (st.header_got < sizeof(Frame)) continue;
      const Frame& f = st.frame;
      if (f.magic != kFrameMagic || f.kind < kPut || f.kind > kGet)
        return BRAID_ERROR(ncclRemoteError, "malformed GIN frame from rank {} (magic {:#x}, kind {})", st.sender,
                           f.magic, f.kind);
      if (f.kind == kClose) {
        *closed = true;
        return Status::ok();
      }
      if (f.kind == kVaSignal) {
        char* word = nullptr;
        BRAID_TRY(windows_->resolve(f.dst_handle, f.dst_off, sizeof(uint64_t), &word));
        BRAID_TRY(add_to_word(*signals_.ops, word, f.signal_value));
      }
      if (f.kind == kGet) start_answer(st);
      if (f.kind == kPut && f.bytes) BRAID_TRY(windows_->resolve(f.dst_handle, f.dst_off, f.bytes, &st.dst));
      if (f.kind != kPut) st.frame.bytes = 0;  // no payload follows
    } else {
      if (!direct) BRAID_TRY(signals_.ops->copy(st.dst + st.payload_got, stage_.data(), uint64_t(n)));
      st.payload_got += uint64_t(n);
    }
    if (st.payload_got < st.frame.bytes) continue;
    if (st.frame.has_signal) BRAID_TRY(signals_.add(st.frame.signal_word, st.frame.signal_value));
    st.frame = Frame{};  // the next frame
    st.header_got = 0;
    st.payload_got = 0;
    st.dst = nullptr;
    if (st.answering) BRAID_TRY(continue_answer(i));  // most answers fit the socket at once
    if (st.answering) return Status::ok();           // the rest when it takes more; no reading meanwhile
  }
  return Status::ok();
}

// The bytes a get asks for, back on its stream; bytes outside this rank's
// windows are refused to the sender, whose descriptor it was, and are no
// error here.
void GinTcpReceiver::start_answer(Stream& st) {
  const Frame& f = st.frame;
  char* src = nullptr;
  const bool inside = f.bytes == 0 || windows_->resolve(f.dst_handle, f.dst_off, f.bytes, &src).is_ok();
  st.answer = Frame{kFrameMagic, inside ? kGetReply : kGetRefused, f.dst_handle, f.dst_off, f.bytes, 0, 0, 0};
  st.answer_src = src;
  st.answer_sent = 0;
  st.staged_from = st.staged_to = 0;
  st.answering = true;
}

// Sends what the socket takes (the header, then the payload: straight from
// the window where the host reaches it, else staged piece by piece through
// the ops' copies); the answer is done when all of it went.
Status GinTcpReceiver::continue_answer(size_t i) {
  Stream& st = streams_[i];
  const uint64_t payload = st.answer.kind == kGetReply ? st.answer.bytes : 0;
  const bool direct = signals_.ops->host_direct();
  while (st.answer_sent < sizeof(Frame) + payload) {
    const char* from = reinterpret_cast<const char*>(&st.answer) + st.answer_sent;
    uint64_t want = sizeof(Frame) - st.answer_sent;
    if (st.answer_sent >= sizeof(Frame)) {
      const uint64_t done = st.answer_sent - sizeof(Frame);
      from = st.answer_src + done;
      want = payload - done;
      if (!direct) {
        if (done >= st.staged_to) {
          const uint64_t piece = std::min(kPiece, payload - done);
          st.answer_stage.resize(kPiece);
          BRAID_TRY(signals_.ops->copy(st.answer_stage.data(), st.answer_src + done, piece));
          st.staged_from = done;
          st.staged_to = done + piece;
        }
        from = st.answer_stage.data() + (done - st.staged_from);
        want = st.staged_to - done;
      }
    }
    const ssize_t n = send_some(st.tls.get(), st.fd, from, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
      return BRAID_ERROR(ncclRemoteError, "answering rank {}'s GIN get: {}", st.sender,
                         io_failure(st.tls.get(), "send"));
    }
    st.answer_sent += uint64_t(n);
    st.last_progress = std::chrono::steady_clock::now();
  }
  st.answering = false;
  return Status::ok();
}

// A frame begun and not moving for the timeout: the sender is stuck (or
// gone without its socket closing), and waiters should hear it.
Status GinTcpReceiver::check_stalled(size_t i) const {
  const Stream& st = streams_[i];
  if (st.header_got == 0 && !st.answering) return Status::ok();  // between frames: idle is no error
  if (std::chrono::steady_clock::now() - st.last_progress < timeout_) return Status::ok();
  if (st.answering)
    return BRAID_ERROR(ncclTimeout, "rank {} took nothing of the answer to its GIN get ({} of {} bytes sent) for {} ms",
                       st.sender, st.answer_sent, sizeof(Frame) + st.answer.bytes, timeout_.count());
  if (st.header_got < sizeof(Frame))
    return BRAID_ERROR(ncclTimeout, "rank {}'s GIN stream stopped mid-frame ({} of {} header bytes) for {} ms",
                       st.sender, st.header_got, sizeof(Frame), timeout_.count());
  return BRAID_ERROR(ncclTimeout, "rank {}'s GIN stream stopped mid-frame ({} of {} payload bytes) for {} ms",
                     st.sender, st.payload_got, st.frame.bytes, timeout_.count());
}

void GinTcpReceiver::run() {
  try {
    serve();
  } catch (const std::exception& e) {  // allocation failures in messages: never std::terminate
    fault_->set(BRAID_ERROR(ncclInternalError, "GIN receiver: {}", e.what()));
  }
}

void GinTcpReceiver::serve() {
  std::vector<pollfd> polls;
  size_t open = streams_.size();
  while (open > 0 && !stop_.load(std::memory_order_acquire)) {
    polls.clear();
    bool buffered = false;  // frames a TLS session holds, which poll() does not announce
    for (const Stream& st : streams_) {  // fd -1 is ignored by poll
      polls.push_back(pollfd{st.fd, short(st.answering ? POLLOUT : POLLIN), 0});
      if (st.fd >= 0 && !st.answering && st.tls && st.tls->buffered()) polls.back().revents = POLLIN, buffered = true;
    }
    const int ready = buffered ? int(polls.size()) : ::poll(polls.data(), polls.size(), 20);
    if (ready < 0 && errno != EINTR) {
      fault_->set(BRAID_ERROR(ncclSystemError, "GIN receiver: poll: {}", std::strerror(errno)));
      return;
    }
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i].fd < 0) continue;
      bool closed = false;
      const bool moved = ready > 0 && (polls[i].revents & (POLLIN | POLLOUT | POLLHUP | POLLERR));
      Status s = !moved ? check_stalled(i) : streams_[i].answering ? continue_answer(i) : advance(i, &closed);
      if (!s.is_ok()) fault_->set(std::move(s).context("GIN receiver"));
      if (closed || !s.is_ok()) {
        ::close(streams_[i].fd);
        streams_[i].fd = -1;
        --open;
      }
    }
  }
}

}  // namespace braid::devapi

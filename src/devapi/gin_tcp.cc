// GIN frames over TCP.  The receiver polls all its streams from one thread
// with a short timeout, so stop() is seen promptly.  It never blocks on one
// stream: each keeps how far its current frame has come (header bytes, then
// payload bytes, read straight into the window), and a turn reads only what
// has arrived, up to kTurnBytes, so a slow or stalled sender does not hold
// the others' frames, and a large put does not hold their signals.
#include "src/devapi/gin_tcp.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include "src/base/net.h"

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

// Window memory to and from a stream, piece by piece: straight where the
// host reaches it, else through `stage` (kPiece bytes) and the ops' copies.
Status send_window(int fd, const char* src, uint64_t bytes, const GinMemoryOps& ops, std::vector<char>& stage,
                   std::chrono::milliseconds timeout) {
  for (uint64_t done = 0; done < bytes; done += kPiece) {
    const uint64_t piece = std::min(kPiece, bytes - done);
    const char* from = src + done;
    if (!ops.host_direct()) {
      stage.resize(kPiece);
      BRAID_TRY(ops.copy(stage.data(), from, piece));
      from = stage.data();
    }
    BRAID_TRY(send_all(fd, from, piece, Deadline::after(timeout), nullptr));
  }
  return Status::ok();
}
Status recv_window(int fd, char* dst, uint64_t bytes, const GinMemoryOps& ops, std::vector<char>& stage,
                   std::chrono::milliseconds timeout) {
  for (uint64_t done = 0; done < bytes; done += kPiece) {
    const uint64_t piece = std::min(kPiece, bytes - done);
    if (ops.host_direct()) {
      BRAID_TRY(recv_all(fd, dst + done, piece, Deadline::after(timeout), nullptr));
      continue;
    }
    stage.resize(kPiece);
    BRAID_TRY(recv_all(fd, stage.data(), piece, Deadline::after(timeout), nullptr));
    BRAID_TRY(ops.copy(dst + done, stage.data(), piece));
  }
  return Status::ok();
}

// What one stream may read in a turn of the receiver before the next
// stream's turn (whatever has arrived, up to this).
constexpr uint64_t kTurnBytes = 4 << 20;

}  // namespace

TcpGinLink::~TcpGinLink() {
  if (fd_ >= 0) ::close(fd_);
}

Status TcpGinLink::send_frame(const Frame& f, const void* payload, const char* what) {
  if (fd_ < 0) return BRAID_ERROR(ncclInvalidUsage, "GIN {} to rank {} after its link was closed", what, target_);
  Status s = send_all(fd_, &f, sizeof(f), Deadline::after(timeout_), nullptr);
  if (s.is_ok() && payload) s = send_window(fd_, static_cast<const char*>(payload), f.bytes, ops_, stage_, timeout_);
  if (!s.is_ok()) {
    broken_ = true;
    return std::move(s).context(fmt::format("GIN {} to rank {}", what, target_));
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
// receiver writes, and only to answer a get: nothing else is in the way.
Status TcpGinLink::get(uint64_t src_handle, uint64_t src_off, void* dst, uint64_t bytes) {
  BRAID_TRY(send_frame(Frame{kFrameMagic, kGet, src_handle, src_off, bytes, 0, 0, 0}, nullptr, "get"));
  Frame reply{};
  Status s = recv_all(fd_, &reply, sizeof(reply), Deadline::after(timeout_), nullptr);
  if (s.is_ok() && (reply.magic != kFrameMagic || (reply.kind != kGetReply && reply.kind != kGetRefused) ||
                    (reply.kind == kGetReply && reply.bytes != bytes)))
    s = BRAID_ERROR(ncclRemoteError, "malformed answer to a GIN get (kind {}, {} bytes)", reply.kind, reply.bytes);
  if (s.is_ok() && reply.kind == kGetReply)
    s = recv_window(fd_, static_cast<char*>(dst), bytes, ops_, stage_, timeout_);
  if (!s.is_ok()) {
    broken_ = true;
    return std::move(s).context(fmt::format("GIN get of {} bytes from rank {}", bytes, target_));
  }
  if (reply.kind == kGetRefused)
    return BRAID_ERROR(ncclInvalidArgument, "GIN get of [{}, +{}) of window {:#x}: outside rank {}'s windows", src_off,
                       bytes, src_handle, target_);
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
  Status s = send_all(fd_, &f, sizeof(f), Deadline::after(timeout_), nullptr);
  ::close(fd_);
  fd_ = -1;
  if (!s.is_ok()) return std::move(s).context(fmt::format("closing the GIN link to rank {}", target_));
  return Status::ok();
}

Status TcpGinLink::send_hello(int fd, int rank, Deadline deadline) {
  Hello h{kFrameMagic, rank};
  return send_all(fd, &h, sizeof(h), deadline, nullptr);
}

Status GinTcpReceiver::recv_hello(int fd, int nranks, Deadline deadline, int* rank) {
  Hello h{};
  BRAID_TRY(recv_all(fd, &h, sizeof(h), deadline, nullptr));
  if (h.magic != kFrameMagic) return BRAID_ERROR(ncclRemoteError, "not a GIN stream (magic {:#x})", h.magic);
  if (h.rank < 0 || h.rank >= nranks)
    return BRAID_ERROR(ncclRemoteError, "a GIN stream says it comes from rank {} of {}", h.rank, nranks);
  *rank = h.rank;
  return Status::ok();
}

GinTcpReceiver::GinTcpReceiver(std::vector<int> fds, std::vector<int> sender_of, const GinWindowTable* windows,
                               GinSignals signals, GinFault* fault, std::chrono::milliseconds timeout)
    : windows_(windows),
      signals_(signals),
      fault_(fault),
      timeout_(timeout) {
  if (!signals_.ops->host_direct()) stage_.resize(kPiece);  // before the thread: advance() reads into it
  for (size_t i = 0; i < fds.size(); ++i) {
    streams_.emplace_back();
    streams_.back().fd = fds[i];
    streams_.back().sender = i < sender_of.size() ? sender_of[i] : -1;
  }
  thread_ = std::thread([this] { run(); });
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
    const ssize_t n = ::recv(st.fd, into, want, MSG_DONTWAIT);  // want > 0: a frame is never done here
    if (n == 0)
      return BRAID_ERROR(ncclRemoteError, "rank {}'s GIN stream ended without a close: the process died or aborted",
                         st.sender);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
      return BRAID_ERROR(ncclRemoteError, "rank {}'s GIN stream failed: {}", st.sender, std::strerror(errno));
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
      if (f.kind == kGet) BRAID_TRY(answer_get(st));
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
  }
  return Status::ok();
}

// The bytes a get asks for, back on its stream; bytes outside this rank's
// windows are refused to the sender, whose descriptor it was, and are no
// error here.  The sender waits for nothing else on the stream, so the
// writes cannot meet a full buffer for long.
Status GinTcpReceiver::answer_get(const Stream& st) {
  const Frame& f = st.frame;
  char* src = nullptr;
  const bool inside = f.bytes == 0 || windows_->resolve(f.dst_handle, f.dst_off, f.bytes, &src).is_ok();
  Frame reply{kFrameMagic, inside ? kGetReply : kGetRefused, f.dst_handle, f.dst_off, f.bytes, 0, 0, 0};
  Status s = send_all(st.fd, &reply, sizeof(reply), Deadline::after(timeout_), nullptr);
  if (s.is_ok() && inside) s = send_window(st.fd, src, f.bytes, *signals_.ops, stage_, timeout_);
  if (!s.is_ok()) return std::move(s).context(fmt::format("answering rank {}'s GIN get", st.sender));
  return Status::ok();
}

// A frame begun and not moving for the timeout: the sender is stuck (or
// gone without its socket closing), and waiters should hear it.
Status GinTcpReceiver::check_stalled(size_t i) const {
  const Stream& st = streams_[i];
  if (st.header_got == 0) return Status::ok();  // between frames: idle is no error
  if (std::chrono::steady_clock::now() - st.last_progress < timeout_) return Status::ok();
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
    for (const Stream& st : streams_) polls.push_back(pollfd{st.fd, POLLIN, 0});  // fd -1 is ignored by poll
    const int ready = ::poll(polls.data(), polls.size(), 20);
    if (ready < 0 && errno != EINTR) {
      fault_->set(BRAID_ERROR(ncclSystemError, "GIN receiver: poll: {}", std::strerror(errno)));
      return;
    }
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i].fd < 0) continue;
      bool closed = false;
      Status s = ready > 0 && (polls[i].revents & (POLLIN | POLLHUP | POLLERR)) ? advance(i, &closed)
                                                                                : check_stalled(i);
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

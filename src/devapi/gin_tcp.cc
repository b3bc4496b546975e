// GIN frames over TCP.  The receiver polls all its streams from one thread
// with a short timeout, so stop() is seen promptly and one slow sender does
// not hold the others: a frame is read whole once its first byte is there.
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
enum FrameKind : uint32_t { kPut = 1, kClose = 2 };

struct Frame {
  uint32_t magic;
  uint32_t kind;
  uint64_t dst_handle;
  uint64_t dst_off;
  uint64_t bytes;
  uint64_t signal_value;
  uint16_t signal_id;
  uint16_t has_signal;
  uint32_t pad;
};
static_assert(sizeof(Frame) == 48);

struct Hello {
  uint32_t magic;
  int32_t rank;
};

// The timeout counts time without progress, as BRAID_TIMEOUT does
// everywhere: a payload moves in pieces, each with a fresh deadline, so a
// large put on a slow link is no error and only a stream that stalls is.
constexpr uint64_t kPiece = 1 << 20;

Status send_pieces(int fd, const char* data, uint64_t bytes, std::chrono::milliseconds timeout) {
  for (uint64_t done = 0; done < bytes; done += kPiece)
    BRAID_TRY(send_all(fd, data + done, std::min(kPiece, bytes - done), Deadline::after(timeout), nullptr));
  return Status::ok();
}

Status recv_pieces(int fd, char* data, uint64_t bytes, std::chrono::milliseconds timeout,
                   const std::atomic<bool>* stop) {
  for (uint64_t done = 0; done < bytes; done += kPiece)
    BRAID_TRY(recv_all(fd, data + done, std::min(kPiece, bytes - done), Deadline::after(timeout), stop));
  return Status::ok();
}

}  // namespace

TcpGinLink::~TcpGinLink() {
  if (fd_ >= 0) ::close(fd_);
}

Status TcpGinLink::put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
                       const GinSignalAdd* signal) {
  if (fd_ < 0) return BRAID_ERROR(ncclInvalidUsage, "GIN put to rank {} after its link was closed", target_);
  Frame f{kFrameMagic, kPut, dst_handle, dst_off, bytes, signal ? signal->value : 0, signal ? signal->id : uint16_t(0),
          uint16_t(signal ? 1 : 0), 0};
  Status s = send_all(fd_, &f, sizeof(f), Deadline::after(timeout_), nullptr);
  if (s.is_ok()) s = send_pieces(fd_, static_cast<const char*>(src), bytes, timeout_);
  if (!s.is_ok()) {
    broken_ = true;
    return std::move(s).context(fmt::format("GIN put to rank {}", target_));
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
  Frame f{kFrameMagic, kClose, 0, 0, 0, 0, 0, 0, 0};
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
    : fds_(std::move(fds)),
      sender_of_(std::move(sender_of)),
      windows_(windows),
      signals_(signals),
      fault_(fault),
      timeout_(timeout) {
  thread_ = std::thread([this] { run(); });
}

GinTcpReceiver::~GinTcpReceiver() {
  stop();
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

void GinTcpReceiver::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

Status GinTcpReceiver::apply_one(size_t i, bool* closed) {
  const int fd = fds_[i];
  char first;
  ssize_t n = ::recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0)
    return BRAID_ERROR(ncclRemoteError, "rank {}'s GIN stream ended without a close: the process died or aborted",
                       sender_of_[i]);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::ok();
    return BRAID_ERROR(ncclRemoteError, "rank {}'s GIN stream failed: {}", sender_of_[i], std::strerror(errno));
  }
  Frame f{};
  BRAID_TRY(recv_all(fd, &f, sizeof(f), Deadline::after(timeout_), &stop_));
  if (f.magic != kFrameMagic || (f.kind != kPut && f.kind != kClose))
    return BRAID_ERROR(ncclRemoteError, "malformed GIN frame from rank {} (magic {:#x}, kind {})", sender_of_[i],
                       f.magic, f.kind);
  if (f.kind == kClose) {
    *closed = true;
    return Status::ok();
  }
  if (f.bytes) {
    char* dst = nullptr;
    BRAID_TRY(windows_->resolve(f.dst_handle, f.dst_off, f.bytes, &dst));
    BRAID_TRY(recv_pieces(fd, dst, f.bytes, timeout_, &stop_));
  }
  if (f.has_signal) BRAID_TRY(signals_.add(f.signal_id, f.signal_value));
  return Status::ok();
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
  size_t open = fds_.size();
  while (open > 0 && !stop_.load(std::memory_order_acquire)) {
    polls.clear();
    for (int fd : fds_) polls.push_back(pollfd{fd, POLLIN, 0});  // fd -1 is ignored by poll
    const int ready = ::poll(polls.data(), polls.size(), 20);
    if (ready < 0 && errno != EINTR) {
      fault_->set(BRAID_ERROR(ncclSystemError, "GIN receiver: poll: {}", std::strerror(errno)));
      return;
    }
    if (ready <= 0) continue;
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (fds_[i] < 0 || !(polls[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      bool closed = false;
      Status s = apply_one(i, &closed);
      if (!s.is_ok()) fault_->set(std::move(s).context("GIN receiver"));
      if (closed || !s.is_ok()) {
        ::close(fds_[i]);
        fds_[i] = -1;
        --open;
      }
    }
  }
}

}  // namespace braid::devapi

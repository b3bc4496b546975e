// braid's TCP network in the Net shape (net.h), for the plugin library and
// for the net transport's tests without InfiniBand.  (braid's own transport
// across hosts keeps its tuned socket transport, socket.cc.)
//
// Its devices are the interfaces braid's TCP data connections use
// (data_address_interfaces: every one BRAID_/NCCL_SOCKET_IFNAME names, else
// the one the sockets choose), as NCCL's socket net makes each interface
// the filter passes a device.  A device listens on its interface's address;
// a connection goes wherever the listener's handle says, over the route
// the kernel picks for that address (the interface on its subnet).
//
// A connection is one TCP stream; a message is [u64 length][payload].  The
// requests of a comm complete in the order they were posted; test moves the
// bytes of the oldest unfinished ones, non-blocking (the kernel's socket
// buffers are the receiver's credit here).  A send is done when the kernel
// has taken its bytes.  A peer that closes or resets the stream fails every
// request of the comm with ncclRemoteError.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "src/base/env.h"
#include "src/base/net.h"
#include "src/transport/net/nets.h"

namespace braid {
namespace {

constexpr uint64_t kMagic = 0x62726169642d736bULL;  // "braid-sk"
constexpr int kMaxRequests = 32;

struct SocketComm;
struct Handle {
  uint64_t magic;
  SockAddr addr;
  SocketComm* connecting;
};
static_assert(sizeof(Handle) <= kNetHandleBytes);

struct SocketRequest {
  SocketComm* comm = nullptr;
  bool busy = false, done = false;
  char* data = nullptr;
  uint64_t size = 0;      // send: its length; receive: the room
  uint64_t length = 0;    // the message's length (from the header, receiving)
  uint64_t moved = 0;     // header and payload bytes moved so far
};

struct SocketComm {
  bool sending = false;
  bool ready = false;
  int fd = -1;
  std::string peer;
  uint64_t magic_got = 0;
  size_t magic_bytes = 0;
  SocketRequest requests[kMaxRequests];
  uint64_t posted = 0, finished = 0;  // requests in FIFO order
  Status error;
  void fail(Status s) {
    if (error.is_ok()) error = std::move(s).context(fmt::format("socket connection {} {}", sending ? "to" : "from", peer));
  }
};

struct ListenComm {
  int fd;
  SocketComm* accepting = nullptr;
};

Status io_error(const char* what) {
  if (errno == EPIPE || errno == ECONNRESET)
    return BRAID_ERROR(ncclRemoteError, "{}: the peer closed the connection", what);
  return BRAID_ERROR(ncclSystemError, "{}: {}", what, std::strerror(errno));
}

// Moves the bytes of the oldest unfinished requests until the socket would block.
void progress(SocketComm* c) {
  while (c->error.is_ok() && c->finished < c->posted) {
    SocketRequest& r = c->requests[c->finished % kMaxRequests];
    constexpr uint64_t kHeader = sizeof(uint64_t);
    if (c->sending) {
      iovec iov[2];
      int n = 0;
      if (r.moved < kHeader) iov[n++] = {reinterpret_cast<char*>(&r.size) + r.moved, size_t(kHeader - r.moved)};
      const uint64_t payload_done = r.moved > kHeader ? r.moved - kHeader : 0;
      if (r.size > payload_done) iov[n++] = {r.data + payload_done, size_t(r.size - payload_done)};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = size_t(n);
      ssize_t w = ::sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (!errno_would_block()) c->fail(io_error("send"));
        return;
      }
      r.moved += uint64_t(w);
      if (r.moved < kHeader + r.size) return;
      r.length = r.size;
    } else {
      char* dst;
      uint64_t want;
      if (r.moved < kHeader) {
        dst = reinterpret_cast<char*>(&r.length) + r.moved;
        want = kHeader - r.moved;
      } else {
        dst = r.data + (r.moved - kHeader);
        want = r.length - (r.moved - kHeader);
      }
      if (want > 0) {
        ssize_t got = ::recv(c->fd, dst, size_t(want), MSG_DONTWAIT);
        if (got == 0) return c->fail(BRAID_ERROR(ncclRemoteError, "the peer closed the connection"));
        if (got < 0) {
          if (!errno_would_block()) c->fail(io_error("recv"));
          return;
        }
        r.moved += uint64_t(got);
      }
      if (r.moved < kHeader) return;
      if (r.moved == kHeader && r.length > r.size)
        return c->fail(BRAID_ERROR(ncclInvalidUsage, "a message of {} bytes for a receive of {}: the sender and the "
                                   "receiver disagree on the size", r.length, r.size));
      if (r.moved < kHeader + r.length) continue;
    }
    r.done = true;
    ++c->finished;
  }
}

class SocketNet final : public Net {
 public:
  explicit SocketNet(std::vector<NetInterface> interfaces) : interfaces_(std::move(interfaces)) {}
  const char* name() const override { return "Socket"; }
  int devices() const override { return int(interfaces_.size()); }
  Status properties(int dev, NetProperties* out) override {
    BRAID_TRY(check_dev(dev));
    const NetInterface& i = interfaces_[size_t(dev)];
    *out = NetProperties{};
    out->name = i.name.empty() ? "socket" : i.name;
    out->ptr_support = kNetPtrHost;
    out->speed_mbps = 10000;
    out->max_recvs = 1;
    if (!i.name.empty()) {
      // The interface's PCI device (for the nearest-NIC choice) and link speed, where sysfs has them.
      const std::string dir = "/sys/class/net/" + i.name;
      if (::access((dir + "/device").c_str(), F_OK) == 0) out->pci_path = dir + "/device";
      std::ifstream speed(dir + "/speed");
      int mbps = 0;
      if (speed >> mbps && mbps > 0) out->speed_mbps = mbps;
    }
    return Status::ok();
  }

  Status listen(int dev, const NetCommConfig&, NetHandle* handle, void** listen_comm) override {
    BRAID_TRY(check_dev(dev));
    int fd = -1;
    SockAddr bound;
    BRAID_TRY(listen_tcp(interfaces_[size_t(dev)].addr, &fd, &bound));
    set_nonblocking(fd);
    std::memset(handle->bytes, 0, sizeof(handle->bytes));
    Handle h{kMagic, bound, nullptr};
    std::memcpy(handle->bytes, &h, sizeof(h));
    *listen_comm = new ListenComm{fd};
    return Status::ok();
  }

  Status connect(int dev, const NetCommConfig&, NetHandle* handle, void** send_comm) override {  // TCP: no class
    *send_comm = nullptr;
    BRAID_TRY(check_dev(dev));
    Handle h;
    std::memcpy(&h, handle->bytes, sizeof(h));
    if (h.magic != kMagic) return BRAID_ERROR(ncclInternalError, "not a handle of braid's socket net");
    SocketComm* c = h.connecting;
    if (!c) {
      c = new SocketComm;
      c->sending = true;
      c->peer = to_string(h.addr);
      c->fd = tcp_socket_for(h.addr, SOCK_NONBLOCK);
      if (c->fd < 0 || (::connect(c->fd, &h.addr.sa, h.addr.length()) != 0 &&
                        errno != EINPROGRESS)) {
        Status s = BRAID_ERROR(ncclSystemError, "socket connect to {}: {}", c->peer, std::strerror(errno));
        destroy(c);
        return s;
      }
      set_nodelay(c->fd);
      h.connecting = c;
      std::memcpy(handle->bytes, &h, sizeof(h));
    }
    pollfd p{c->fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) <= 0) return Status::ok();
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    Status s;
    if (err) s = BRAID_ERROR(ncclSystemError, "socket connect to {}: {}", c->peer, std::strerror(err));
    else s = send_all(c->fd, &kMagic, sizeof(kMagic), Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT"))), nullptr);
    h.connecting = nullptr;
    std::memcpy(handle->bytes, &h, sizeof(h));
    if (!s.is_ok()) {
      destroy(c);
      return s;
    }
    c->ready = true;
    *send_comm = c;
    return Status::ok();
  }

  Status accept(void* listen_comm, void** recv_comm) override {
    *recv_comm = nullptr;
    auto* l = static_cast<ListenComm*>(listen_comm);
    if (!l->accepting) {
      SockAddr from;
      socklen_t len = sizeof(from);
      int fd = ::accept4(l->fd, &from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return errno_would_block() ? Status::ok() : io_error("socket accept");
      set_nodelay(fd);
      l->accepting = new SocketComm;
      l->accepting->fd = fd;
      l->accepting->peer = to_string(from);
    }
    SocketComm* c = l->accepting;
    while (c->magic_bytes < sizeof(c->magic_got)) {
      ssize_t got = ::recv(c->fd, reinterpret_cast<char*>(&c->magic_got) + c->magic_bytes,
                           sizeof(c->magic_got) - c->magic_bytes, MSG_DONTWAIT);
      if (got < 0 && errno_would_block()) return Status::ok();
      if (got <= 0) {
        l->accepting = nullptr;
        destroy(c);
        return got == 0 ? BRAID_ERROR(ncclRemoteError, "socket accept: the peer closed the connection")
                        : io_error("socket accept");
      }
      c->magic_bytes += size_t(got);
    }
    l->accepting = nullptr;
    if (c->magic_got != kMagic) {
      destroy(c);
      return BRAID_ERROR(ncclSystemError, "socket accept: a connection without braid's greeting");
    }
    c->ready = true;
    *recv_comm = c;
    return Status::ok();
  }

  Status close_listen(void* listen_comm) override {
    auto* l = static_cast<ListenComm*>(listen_comm);
    if (l->accepting) destroy(l->accepting);
    ::close(l->fd);
    delete l;
    return Status::ok();
  }
  Status close_send(void* comm) override {
    destroy(static_cast<SocketComm*>(comm));
    return Status::ok();
  }
  Status close_recv(void* comm) override {
    destroy(static_cast<SocketComm*>(comm));
    return Status::ok();
  }

  // The kernel copies: nothing to register.
  Status reg_mr(void*, void*, size_t, int type, void** mhandle) override {
    if (type != kNetPtrHost) return BRAID_ERROR(ncclInvalidUsage, "braid's socket net moves host memory only");
    *mhandle = this;
    return Status::ok();
  }
  Status dereg_mr(void*, void*) override { return Status::ok(); }

  Status isend(void* comm, void* data, size_t bytes, int, void*, void** request) override {
    return post(static_cast<SocketComm*>(comm), data, bytes, request);
  }
  Status irecv(void* comm, void* data, size_t bytes, int, void*, void** request) override {
    return post(static_cast<SocketComm*>(comm), data, bytes, request);
  }

  Status test(void* request, bool* done, size_t* bytes) override {
    auto* r = static_cast<SocketRequest*>(request);
    if (!r->done) progress(r->comm);
    *done = r->done;
    if (r->done) {
      if (bytes) *bytes = r->length;
      r->busy = false;
      return Status::ok();
    }
    return r->comm->error;
  }

 private:
  Status check_dev(int dev) const {
    if (dev < 0 || dev >= devices())
      return BRAID_ERROR(ncclInternalError, "socket device {} out of range [0, {})", dev, devices());
    return Status::ok();
  }
  Status post(SocketComm* c, void* data, size_t bytes, void** request) {
    *request = nullptr;
    if (!c->error.is_ok()) return c->error;
    SocketRequest& r = c->requests[c->posted % kMaxRequests];
    if (r.busy) return Status::ok();
    r = SocketRequest{c, true, false, static_cast<char*>(data), bytes, 0, 0};
    ++c->posted;
    if (c->sending) progress(c);  // a send goes out at once when the socket takes it
    *request = &r;
    return Status::ok();
  }
  void destroy(SocketComm* c) {
    if (c->fd >= 0) ::close(c->fd);
    delete c;
  }

  const std::vector<NetInterface> interfaces_;  // by device
};

}  // namespace

Status braid_socket_net(Net** out) {
  // Made once, with the process's settings; lives as long as the process.
  static Status made;
  static SocketNet* net = [] {
    SockAddr anchor;
    made = local_address(&anchor);
    return made.is_ok() ? new SocketNet(data_address_interfaces(anchor)) : nullptr;
  }();
  *out = net;
  return made;
}

}  // namespace braid

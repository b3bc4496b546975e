// The TLS relay (tls.h): TlsSessions on TCP sockets, bridged to local
// socket pairs by one thread per process.
//
// The relay thread owns every session it relays: OpenSSL objects are not
// shared between threads, and a session's reads and writes may each wait on
// the other (TLS reads can need writes and the other way round), which only
// a loop that sees both directions can serve without blocking.
#include "src/base/tls.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/base/net.h"
#include "src/base/thread_name.h"

namespace braid {
namespace {

constexpr size_t kChunk = 64 * 1024;  // bytes moved per read, each way

// One relayed connection.
struct Conn {
  int net = -1;  // the TCP socket, TLS on it
  int app = -1;  // the relay's end of the pair
  std::unique_ptr<TlsSession> tls;
  std::vector<char> to_app, to_net;  // read from one side, not yet written to the other
  size_t to_app_done = 0, to_net_done = 0;
  bool app_closed = false, net_closed = false;
  short net_events = 0, app_events = 0;  // what the next poll waits for
};

class Relay {
 public:
  Relay() : wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) { named_thread("braid tls", [this] { run(); }).detach(); }

  Status add(int net, int app, TlsRole role) {
    if (wake_ < 0) return BRAID_ERROR(ncclSystemError, "TLS: eventfd: {}", std::strerror(errno));
    auto c = std::make_unique<Conn>();
    BRAID_TRY(TlsSession::open(net, role, &c->tls));
    c->net = net;
    c->app = app;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      incoming_.push_back(std::move(c));
    }
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_, &one, sizeof(one));
    (void)ignored;
    return Status::ok();
  }

 private:
  void run() {
    std::vector<std::unique_ptr<Conn>> conns;
    std::vector<pollfd> fds;
    std::vector<char> buffer(kChunk);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& c : incoming_) conns.push_back(std::move(c));
        incoming_.clear();
      }
      bool again = false;  // data a session holds, that no poll would announce, and room for it
      for (auto& c : conns) {
        if (c && !step(*c, buffer)) c.reset();
        again |= c && c->to_app.empty() && !c->net_closed && c->tls->buffered();
      }
      std::erase(conns, nullptr);
      fds.assign(1, pollfd{wake_, POLLIN, 0});
      for (auto& c : conns) {
        fds.push_back({c->net, c->net_events, 0});
        fds.push_back({c->app, c->app_events, 0});
      }
      if (::poll(fds.data(), fds.size(), again ? 0 : -1) > 0 && fds[0].revents) {
        uint64_t count;
        ssize_t ignored = ::read(wake_, &count, sizeof(count));
        (void)ignored;
      }
    }
  }

  // Closes both sides: the application reads an end of file.  (A session
  // that failed has said why: TlsSession records its failures.)
  static bool finish(Conn& c) {
    c.tls.reset();
    ::close(c.net);
    ::close(c.app);
    return false;
  }

  // Moves what can move without blocking and says what to wait for next;
  // false once the connection is over (closed, both sides).
  static bool step(Conn& c, std::vector<char>& buffer) {
    c.net_events = c.app_events = 0;
    if (!c.tls->established()) {
      bool done = false;
      if (!c.tls->handshake(&done).is_ok()) return finish(c);
      if (!done) return c.net_events = c.tls->wants(), true;
    }
    for (bool moved = true; moved;) {
      moved = false;
      c.net_events = c.app_events = 0;
      // The peer to the application.
      // A session's recv gives one record (16 KB at most) a call: as many as
      // have arrived, up to a chunk, go to the application in one send.
      if (c.to_app.empty() && !c.net_closed) {
        size_t filled = 0;
        ssize_t got = 0;
        while (filled < buffer.size() && (got = c.tls->recv(buffer.data() + filled, buffer.size() - filled)) > 0)
          filled += size_t(got);
        if (filled < buffer.size()) {  // the last read stopped: why
          if (got < 0 && errno == EAGAIN) c.net_events |= c.tls->wants();
          else if (got < 0 && errno == EPROTO) return finish(c);  // e.g. a record that fails its authentication
          else c.net_closed = true;                               // the end of the stream, or the socket failed
        }
        if (filled) c.to_app.assign(buffer.data(), buffer.data() + filled), moved = true;
      }
      if (!c.to_app.empty()) {
        const ssize_t w = ::send(c.app, c.to_app.data() + c.to_app_done, c.to_app.size() - c.to_app_done,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
          moved = true;
          c.to_app_done += size_t(w);
          if (c.to_app_done == c.to_app.size()) c.to_app.clear(), c.to_app_done = 0;
        } else if (w < 0 && errno_would_block()) {
          c.app_events |= POLLOUT;
        } else {
          return finish(c);  // the application closed its end
        }
      }
      // The application to the peer.
      if (c.to_net.empty() && !c.app_closed) {
        const ssize_t r = ::recv(c.app, buffer.data(), buffer.size(), MSG_DONTWAIT);
        if (r > 0) {
          c.to_net.assign(buffer.data(), buffer.data() + r);
          moved = true;
        } else if (r < 0 && errno_would_block()) {
          c.app_events |= POLLIN;
        } else {
          c.app_closed = true;  // closed or shut down: flush, then close the connection
        }
      }
      if (!c.to_net.empty()) {
        const ssize_t n = c.tls->send(c.to_net.data() + c.to_net_done, c.to_net.size() - c.to_net_done);
        if (n > 0) {
          moved = true;
          c.to_net_done += size_t(n);
          if (c.to_net_done == c.to_net.size()) c.to_net.clear(), c.to_net_done = 0;
        } else if (errno == EAGAIN) {
          c.net_events |= c.tls->wants();
        } else if (errno == EPROTO) {
          return finish(c);
        } else {
          c.net_closed = true, c.to_net.clear();  // the peer is gone
        }
      }
    }
    if (c.app_closed && c.to_net.empty()) {
      c.tls->close_notify();
      return finish(c);
    }
    if (c.net_closed && c.to_app.empty()) return finish(c);
    return true;
  }

  const int wake_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Conn>> incoming_;
};

// The process's relay, started at the first secured connection.  A forked
// child does not have the parent's thread: it starts its own (the parent's
// connections are the parent's business).  The fork handlers are registered
// when the library loads, not on first use: a function-local static's
// guard, taken by one thread of the parent while another forked, stayed
// taken in the child, which then hung at its first secured connection (a
// grown communicator's joining process, forked while the parent's bootstrap
// root secured its first connection).  The child makes a fresh relay mutex
// (one that another thread of the parent held at the fork stays taken).
std::mutex g_relay_mutex;
Relay* g_relay = nullptr;
const bool g_fork_handlers = [] {
  pthread_atfork(nullptr, nullptr, [] {
    new (&g_relay_mutex) std::mutex;
    g_relay = nullptr;  // the parent's is left as it was (its thread is not here)
  });
  return true;
}();

Relay& relay() {
  std::lock_guard<std::mutex> lock(g_relay_mutex);
  if (!g_relay) g_relay = new Relay;
  return *g_relay;
}

}  // namespace

std::chrono::milliseconds tls_hello_grace() { return std::chrono::milliseconds(tls_enabled() ? 10000 : 0); }

Status tls_secure(int* fd, TlsRole role) {
  if (!tls_enabled()) return Status::ok();
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return BRAID_ERROR(ncclSystemError, "TLS: socketpair: {}", std::strerror(errno));
  const int net = *fd;
  if (::fcntl(net, F_GETFL) & O_NONBLOCK) set_nonblocking(pair[0]);
  set_nonblocking(pair[1]);
  Status s = relay().add(net, pair[1], role);
  if (!s.is_ok()) {
    ::close(pair[0]);
    ::close(pair[1]);
    return s;
  }
  *fd = pair[0];
  return Status::ok();
}

// A relayed descriptor is our end of a UNIX socket pair: shutting down its
// writing side tells the relay the application is done; the relay flushes
// what it holds to the TCP socket and then closes its end, which reads here
// as an end of file.  Whatever the peer still sends meanwhile is discarded.
void tls_close(std::span<const int> fds, Deadline deadline) {
  std::vector<pollfd> relayed;
  for (int fd : fds) {
    if (fd < 0) continue;
    int domain = 0;
    socklen_t len = sizeof(domain);
    if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX &&
        ::shutdown(fd, SHUT_WR) == 0)
      relayed.push_back({fd, POLLIN, 0});
    else
      ::close(fd);
  }
  char discard[4096];
  while (!relayed.empty() && !deadline.expired()) {
    if (::poll(relayed.data(), relayed.size(), deadline.remaining_ms()) < 0 && errno != EINTR) break;
    std::erase_if(relayed, [&](const pollfd& p) {
      if (!p.revents) return false;
      const ssize_t r = ::recv(p.fd, discard, sizeof(discard), MSG_DONTWAIT);
      if (r > 0 || (r < 0 && errno_would_block())) return false;
      ::close(p.fd);  // the relay has closed its end: everything written is on the TCP socket
      return true;
    });
  }
  for (const pollfd& p : relayed) ::close(p.fd);
}

}  // namespace braid

// The TLS relay (tls.h): OpenSSL sessions on TCP sockets, bridged to local
// socket pairs by one thread per process.
//
// The key: SHA-256 of the PSK text, a TLS 1.3 external PSK under a fixed
// identity, with TLS_AES_128_GCM_SHA256 (its hash must match the key's
// derivation) and OpenSSL's default key exchange, which adds (EC)DHE to the
// PSK.  No certificates, no session tickets (a connection is never resumed).
//
// The relay thread owns every session: OpenSSL objects are not shared
// between threads, and a session's reads and writes may each wait on the
// other (TLS reads can need writes and the other way round), which only a
// loop that sees both directions can serve without blocking.
#include "src/base/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"

namespace braid {
namespace {

constexpr unsigned char kIdentity[] = "braid-nccl-psk";
constexpr size_t kIdentityBytes = sizeof(kIdentity) - 1;
constexpr unsigned char kAes128GcmSha256[] = {0x13, 0x01};  // its TLS 1.3 cipher-suite code
constexpr size_t kKeyBytes = 32;
constexpr size_t kMinPskBytes = 32;  // NCCL's minimum
constexpr size_t kChunk = 64 * 1024;  // bytes moved per read, each way

// The key, read by the handshake callbacks on the relay thread.
struct KeyState {
  std::mutex mutex;
  unsigned char key[kKeyBytes] = {};
  std::string last_failure;
};
KeyState& key_state() {
  static KeyState* k = new KeyState;  // never destroyed: the relay may outlive static destructors
  return *k;
}
std::atomic<bool> g_enabled{false};

// OpenSSL 3 takes global locks inside many calls (SSL_new, SSL_CTX_new,
// handshakes) and registers no fork handlers, so a process that forks while
// a braid thread is inside OpenSSL leaves the child with a lock held for
// good: a grown communicator's joining process, forked while the parent's
// bootstrap root set up a session, hung in SSL_CTX_new at its first secured
// connection.  braid enters OpenSSL only inside a section that holds this
// gate shared, and fork() waits until no braid thread is inside (its prepare
// handler takes the gate exclusively; see g_fork_handlers).  Sections are
// short: every socket is non-blocking.
pthread_rwlock_t g_openssl_gate = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;  // a waiting fork goes first
struct OpensslSection {
  OpensslSection() { pthread_rwlock_rdlock(&g_openssl_gate); }
  ~OpensslSection() { pthread_rwlock_unlock(&g_openssl_gate); }
  OpensslSection(const OpensslSection&) = delete;
  OpensslSection& operator=(const OpensslSection&) = delete;
};

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof(text));
    out += out.empty() ? text : std::string("; ") + text;
  }
  return out;
}

SSL_SESSION* psk_session(SSL* ssl) {
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kAes128GcmSha256);
  SSL_SESSION* s = cipher ? SSL_SESSION_new() : nullptr;
  if (!s) return nullptr;
  unsigned char key[kKeyBytes];
  {
    std::lock_guard<std::mutex> lock(key_state().mutex);
    std::memcpy(key, key_state().key, sizeof(key));
  }
  const bool ok = SSL_SESSION_set1_master_key(s, key, sizeof(key)) && SSL_SESSION_set_cipher(s, cipher) &&
                  SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION);
  OPENSSL_cleanse(key, sizeof(key));
  if (!ok) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

int client_psk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* id_len, SSL_SESSION** out) {
  *out = nullptr;
  SSL_SESSION* s = psk_session(ssl);
  if (!s) return 0;
  // A second call (after a HelloRetryRequest) names the hash the server chose.
  const EVP_MD* ours = SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s));
  if (md && (!ours || EVP_MD_get_type(md) != EVP_MD_get_type(ours))) {
    SSL_SESSION_free(s);
    return 1;
  }
  *out = s;
  *id = kIdentity;
  *id_len = kIdentityBytes;
  return 1;
}

int server_psk(SSL* ssl, const unsigned char* id, size_t id_len, SSL_SESSION** out) {
  *out = nullptr;
  if (id_len != kIdentityBytes || std::memcmp(id, kIdentity, id_len) != 0) return 1;  // not ours: no PSK
  *out = psk_session(ssl);
  return *out ? 1 : 0;
}

SSL_CTX* make_context(TlsRole role) {
  SSL_CTX* ctx = SSL_CTX_new(role == TlsRole::Client ? TLS_client_method() : TLS_server_method());
  if (!ctx) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256");
  SSL_CTX_set_num_tickets(ctx, 0);
  // A peer that closes without close_notify (a process that exits) is an
  // end of file, as on plain TCP; braid's own framing notices truncation.
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Reads take whatever has arrived, many records a syscall, instead of a
  // record's header and then its body.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kChunk);
  if (role == TlsRole::Client) SSL_CTX_set_psk_use_session_callback(ctx, client_psk);
  else SSL_CTX_set_psk_find_session_callback(ctx, server_psk);
  return ctx;
}

// One relayed connection.
struct Conn {
  int net = -1;  // the TCP socket, TLS on it
  int app = -1;  // the relay's end of the pair
  SSL* ssl = nullptr;
  std::string peer;  // "ip:port", for messages
  bool established = false;
  std::vector<char> to_app, to_net;  // read from one side, not yet written to the other
  size_t to_app_done = 0, to_net_done = 0;
  bool app_closed = false, net_closed = false;
  short net_events = 0, app_events = 0;  // what the next poll waits for
};

void record_failure(const std::string& why) {
  BRAID_WARN("{}", why);
  std::lock_guard<std::mutex> lock(key_state().mutex);
  key_state().last_failure = why;
}

class Relay {
 public:
  Relay() : wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    {
      OpensslSection openssl;
      client_ = make_context(TlsRole::Client);
      server_ = make_context(TlsRole::Server);
    }
    std::thread([this] { run(); }).detach();
  }

  Status add(int net, int app, TlsRole role) {
    auto c = std::make_unique<Conn>();
    {
      OpensslSection openssl;
      if (!client_ || !server_ || wake_ < 0)
        return BRAID_ERROR(ncclSystemError, "TLS: OpenSSL could not set up ({})", openssl_errors());
      c->ssl = SSL_new(role == TlsRole::Client ? client_ : server_);
      if (!c->ssl || !SSL_set_fd(c->ssl, net)) {
        if (c->ssl) SSL_free(c->ssl);
        return BRAID_ERROR(ncclSystemError, "TLS: cannot start a session ({})", openssl_errors());
      }
      if (role == TlsRole::Client) SSL_set_connect_state(c->ssl);
      else SSL_set_accept_state(c->ssl);
    }
    c->net = net;
    c->app = app;
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    if (::getpeername(net, reinterpret_cast<sockaddr*>(&addr), &len) == 0) c->peer = to_string(addr);
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
    // OpenSSL writes to sockets with write(): a peer that is gone must be
    // EPIPE here, not a SIGPIPE for the process.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    std::vector<std::unique_ptr<Conn>> conns;
    std::vector<pollfd> fds;
    std::vector<char> buffer(kChunk);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& c : incoming_) conns.push_back(std::move(c));
        incoming_.clear();
      }
      bool again = false;  // data OpenSSL holds, that no poll would announce, and room for it
      {
        OpensslSection openssl;
        for (auto& c : conns) {
          if (c && !step(*c, buffer)) c.reset();
          again |= c && c->to_app.empty() && !c->net_closed && SSL_has_pending(c->ssl);
        }
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

  // Closes both sides: the application reads an end of file.
  static bool finish(Conn& c) {
    if (c.ssl) SSL_free(c.ssl);
    ::close(c.net);
    ::close(c.app);
    return false;
  }

  static bool fail(Conn& c, const char* what, int ssl_error) {
    std::string detail = openssl_errors();
    if (detail.empty())
      detail = ssl_error == SSL_ERROR_SYSCALL ? (errno ? std::strerror(errno) : "the peer closed the connection")
                                              : fmt::format("OpenSSL error {}", ssl_error);
    std::string why = fmt::format("TLS {} with {}: {}", what, c.peer.empty() ? "a peer" : c.peer, detail);
    if (!c.established) why += " (the peer has no TLS, or another key: check ncclSetEncryption on every rank)";
    record_failure(why);
    return finish(c);
  }

  // Moves what can move without blocking and says what to wait for next;
  // false once the connection is over (closed, both sides).
  static bool step(Conn& c, std::vector<char>& buffer) {
    c.net_events = c.app_events = 0;
    if (!c.established) {
      ERR_clear_error();
      const int r = SSL_do_handshake(c.ssl);
      if (r != 1) {
        const int e = SSL_get_error(c.ssl, r);
        if (e == SSL_ERROR_WANT_READ) return c.net_events = POLLIN, true;
        if (e == SSL_ERROR_WANT_WRITE) return c.net_events = POLLOUT, true;
        return fail(c, "handshake", e);
      }
      c.established = true;
    }
    for (bool moved = true; moved;) {
      moved = false;
      c.net_events = c.app_events = 0;
      // The peer to the application.
      // SSL_read gives one record (16 KB at most) a call: as many as have
      // arrived, up to a chunk, go to the application in one send.
      if (c.to_app.empty() && !c.net_closed) {
        size_t filled = 0, got = 0;
        ERR_clear_error();
        while (filled < buffer.size() && SSL_read_ex(c.ssl, buffer.data() + filled, buffer.size() - filled, &got)) {
          filled += got;
          ERR_clear_error();
        }
        if (filled < buffer.size()) {  // the last read failed: why
          const int e = SSL_get_error(c.ssl, 0);
          if (e == SSL_ERROR_WANT_READ) c.net_events |= POLLIN;
          else if (e == SSL_ERROR_WANT_WRITE) c.net_events |= POLLOUT;
          else if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) c.net_closed = true;
          else return fail(c, "receive", e);  // e.g. a record that fails its authentication
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
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
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
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          c.app_events |= POLLIN;
        } else {
          c.app_closed = true;  // closed or shut down: flush, then close the connection
        }
      }
      if (!c.to_net.empty()) {
        size_t n = 0;
        ERR_clear_error();
        if (SSL_write_ex(c.ssl, c.to_net.data() + c.to_net_done, c.to_net.size() - c.to_net_done, &n)) {
          moved = true;
          c.to_net_done += n;
          if (c.to_net_done == c.to_net.size()) c.to_net.clear(), c.to_net_done = 0;
        } else {
          const int e = SSL_get_error(c.ssl, 0);
          if (e == SSL_ERROR_WANT_WRITE) c.net_events |= POLLOUT;
          else if (e == SSL_ERROR_WANT_READ) c.net_events |= POLLIN;
          else if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) c.net_closed = true, c.to_net.clear();
          else return fail(c, "send", e);
        }
      }
    }
    if (c.app_closed && c.to_net.empty()) {
      SSL_shutdown(c.ssl);  // close_notify, if the socket takes it now
      return finish(c);
    }
    if (c.net_closed && c.to_app.empty()) return finish(c);
    return true;
  }

  const int wake_;
  SSL_CTX* client_ = nullptr;
  SSL_CTX* server_ = nullptr;
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
// root secured its first connection).  The relay mutex is not taken around
// fork (relay() holds it while entering the gate, so prepare taking both
// could deadlock); the child makes a fresh one instead.
std::mutex g_relay_mutex;
Relay* g_relay = nullptr;
const bool g_fork_handlers = [] {
  pthread_atfork([] { pthread_rwlock_wrlock(&g_openssl_gate); },
                 [] { pthread_rwlock_unlock(&g_openssl_gate); },
                 [] {
                   // A fresh gate: the child's thread has another id than the
                   // one that took it, so unlocking would not release it.
                   g_openssl_gate = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
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

Status tls_configure(const char* psk) {
  if (!psk) {
    g_enabled.store(false);
    return Status::ok();
  }
  const size_t bytes = std::strlen(psk);
  if (bytes < kMinPskBytes)
    return BRAID_ERROR(ncclInvalidArgument, "the pre-shared key has {} bytes; at least {} are required", bytes,
                       kMinPskBytes);
  {
    OpensslSection openssl;
    // OpenSSL initialises itself (error strings included) on first use, under
    // its global locks.  Done here, on the thread configuring TLS, rather
    // than lazily on the relay thread: a process forking while that thread
    // held the lock left the child waiting on it forever.
    if (!OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, nullptr))
      return BRAID_ERROR(ncclSystemError, "TLS: OpenSSL does not initialise ({})", openssl_errors());
    unsigned char key[kKeyBytes];
    unsigned int len = 0;
    if (!EVP_Digest(psk, bytes, key, &len, EVP_sha256(), nullptr) || len != kKeyBytes)
      return BRAID_ERROR(ncclSystemError, "TLS: cannot derive the key ({})", openssl_errors());
    {
      std::lock_guard<std::mutex> lock(key_state().mutex);
      std::memcpy(key_state().key, key, sizeof(key));
    }
    OPENSSL_cleanse(key, sizeof(key));
  }
  g_enabled.store(true);
  BRAID_INFO(kInit | kNet | kBootstrap, "TLS 1.3 with a pre-shared key on the bootstrap and socket connections");
  return Status::ok();
}

bool tls_enabled() { return g_enabled.load(std::memory_order_acquire); }

std::chrono::milliseconds tls_hello_grace() { return std::chrono::milliseconds(tls_enabled() ? 10000 : 0); }

Status tls_secure(int* fd, TlsRole role) {
  if (!tls_enabled()) return Status::ok();
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return BRAID_ERROR(ncclSystemError, "TLS: socketpair: {}", std::strerror(errno));
  const int net = *fd;
  if (::fcntl(net, F_GETFL) & O_NONBLOCK) set_nonblocking(pair[0]);
  set_nonblocking(pair[1]);
  set_nonblocking(net);
  set_nodelay(net);
  Status s = relay().add(net, pair[1], role);
  if (!s.is_ok()) {
    ::close(pair[0]);
    ::close(pair[1]);
    return s;
  }
  *fd = pair[0];
  return Status::ok();
}

std::string tls_last_failure() {
  std::lock_guard<std::mutex> lock(key_state().mutex);
  return key_state().last_failure;
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
      if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return false;
      ::close(p.fd);  // the relay has closed its end: everything written is on the TCP socket
      return true;
    });
  }
  for (const pollfd& p : relayed) ::close(p.fd);
}

}  // namespace braid

// TLS sessions (tls_session.h) on OpenSSL 3.
//
// The key: SHA-256 of the PSK text, a TLS 1.3 external PSK under a fixed
// identity, with TLS_AES_128_GCM_SHA256 (its hash must match the key's
// derivation) and OpenSSL's default key exchange, which adds (EC)DHE to the
// PSK.  No certificates, no session tickets (a connection is never resumed),
// so after the handshake neither end sends anything but application data:
// a connection that carries bytes one way needs no reads on its sending end.
//
// Sessions move bytes through a BIO of braid's own rather than OpenSSL's
// socket BIO, which writes with write(2): a peer that is gone would then
// raise SIGPIPE in whichever thread sent, and the application's thread may
// be the one.
#include "src/base/tls_session.h"

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "src/base/log.h"
#include "src/base/net.h"
#include "src/base/openssl_loader.h"

namespace braid {
namespace {

constexpr unsigned char kIdentity[] = "braid-nccl-psk";
constexpr size_t kIdentityBytes = sizeof(kIdentity) - 1;
constexpr unsigned char kAes128GcmSha256[] = {0x13, 0x01};  // its TLS 1.3 cipher-suite code
constexpr size_t kKeyBytes = 32;
constexpr size_t kMinPskBytes = 32;          // NCCL's minimum
constexpr long kReadBufferBytes = 64 << 10;  // what one read from the socket may take

// The key, read by the handshake callbacks.
struct KeyState {
  std::mutex mutex;
  unsigned char key[kKeyBytes] = {};
  std::string last_failure;
};
KeyState& key_state() {
  static KeyState* k = new KeyState;  // never destroyed: sessions may outlive static destructors
  return *k;
}
std::atomic<bool> g_enabled{false};

// Made once, by the first tls_configure, and never freed.
std::atomic<SSL_CTX*> g_client{nullptr}, g_server{nullptr};
std::atomic<BIO_METHOD*> g_socket_bio{nullptr};

// OpenSSL 3 takes global locks inside many calls (SSL_new, SSL_CTX_new,
// handshakes) and registers no fork handlers, so a process that forks while
// a braid thread is inside OpenSSL leaves the child with a lock held for
// good: a grown communicator's joining process, forked while the parent's
// bootstrap root set up a session, hung in SSL_CTX_new at its first secured
// connection.  braid enters OpenSSL only inside a section that holds this
// gate shared, and fork() waits until no braid thread is inside (its prepare
// handler takes the gate exclusively).  Sections are short (every socket is
// non-blocking) and never nested: a waiting fork goes first, so a thread
// re-entering would wait for it while it waits for the thread.  The fork
// handlers are registered when the library loads, not on first use: a
// function-local static's guard, taken by one thread of the parent while
// another forked, stays taken in the child.
pthread_rwlock_t g_openssl_gate = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
const bool g_gate_fork_handlers = [] {
  pthread_atfork([] { pthread_rwlock_wrlock(&g_openssl_gate); }, [] { pthread_rwlock_unlock(&g_openssl_gate); },
                 // A fresh gate: the child's thread has another id than the
                 // one that took it, so unlocking would not release it.
                 [] { g_openssl_gate = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP; });
  return true;
}();
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

void record_failure(const std::string& why) {
  BRAID_WARN("{}", why);
  std::lock_guard<std::mutex> lock(key_state().mutex);
  key_state().last_failure = why;
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
  // end of stream, as on plain TCP; braid's own framing notices truncation.
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Reads take whatever has arrived, many records a syscall, instead of a
  // record's header and then its body.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kReadBufferBytes);
  if (role == TlsRole::Client)
    SSL_CTX_set_psk_use_session_callback(ctx, client_psk);
  else
    SSL_CTX_set_psk_find_session_callback(ctx, server_psk);
  return ctx;
}

}  // namespace

// Where a session's records go: the socket, or while it seals, the outbox.
struct TlsWire {
  int fd = -1;
  bool sealing = false;
  std::vector<char> outbox;  // sealed records not yet on the socket
  size_t outbox_sent = 0;
};

namespace {

// The socket BIO: its data is the session's TlsWire.  Would-block sets the
// retry flags, which SSL_get_error turns into WANT_READ / WANT_WRITE.
TlsWire& wire_of(BIO* b) { return *static_cast<TlsWire*>(BIO_get_data(b)); }
int bio_write(BIO* b, const char* data, size_t bytes, size_t* written) {
  BIO_clear_retry_flags(b);
  TlsWire& w = wire_of(b);
  if (w.sealing) {
    w.outbox.insert(w.outbox.end(), data, data + bytes);
    return *written = bytes, 1;
  }
  const ssize_t n = ::send(w.fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return *written = size_t(n), 1;
  if (errno_would_block()) BIO_set_retry_write(b);
  return 0;
}
int bio_read(BIO* b, char* data, size_t bytes, size_t* got) {
  BIO_clear_retry_flags(b);
  const ssize_t n = ::recv(wire_of(b).fd, data, bytes, MSG_DONTWAIT);
  if (n > 0) return *got = size_t(n), 1;
  if (n < 0 && errno_would_block()) BIO_set_retry_read(b);
  if (n == 0) errno = 0;  // the end of the stream, no error
  return 0;
}
long bio_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }
int bio_create(BIO* b) { return BIO_set_init(b, 1), 1; }

BIO_METHOD* make_socket_bio() {
  BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "braid socket");
  if (m && BIO_meth_set_write_ex(m, bio_write) && BIO_meth_set_read_ex(m, bio_read) && BIO_meth_set_ctrl(m, bio_ctrl) &&
      BIO_meth_set_create(m, bio_create))
    return m;
  if (m) BIO_meth_free(m);
  return nullptr;
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
    BRAID_TRY(load_openssl());  // its dlopen too, not under a fork
    // OpenSSL initialises itself (error strings included) on first use,
    // under its global locks: done here, on the thread configuring TLS,
    // rather than on a thread that another could fork under.
    if (!OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, nullptr))
      return BRAID_ERROR(ncclSystemError, "TLS: OpenSSL does not initialise ({})", openssl_errors());
    static std::mutex make_once;
    std::lock_guard<std::mutex> lock(make_once);
    if (!g_client.load()) g_client.store(make_context(TlsRole::Client));
    if (!g_server.load()) g_server.store(make_context(TlsRole::Server));
    if (!g_socket_bio.load()) g_socket_bio.store(make_socket_bio());
    if (!g_client.load() || !g_server.load() || !g_socket_bio.load())
      return BRAID_ERROR(ncclSystemError, "TLS: OpenSSL could not set up ({})", openssl_errors());
    unsigned char key[kKeyBytes];
    unsigned int len = 0;
    if (!EVP_Digest(psk, bytes, key, &len, EVP_sha256(), nullptr) || len != kKeyBytes)
      return BRAID_ERROR(ncclSystemError, "TLS: cannot derive the key ({})", openssl_errors());
    {
      std::lock_guard<std::mutex> key_lock(key_state().mutex);
      std::memcpy(key_state().key, key, sizeof(key));
    }
    OPENSSL_cleanse(key, sizeof(key));
  }
  g_enabled.store(true);
  BRAID_INFO(kInit | kNet | kBootstrap, "TLS 1.3 with a pre-shared key on the bootstrap and socket connections");
  return Status::ok();
}

bool tls_enabled() { return g_enabled.load(std::memory_order_acquire); }

std::string tls_last_failure() {
  std::lock_guard<std::mutex> lock(key_state().mutex);
  return key_state().last_failure;
}

Status TlsSession::open(int fd, TlsRole role, std::unique_ptr<TlsSession>* out) {
  if (!tls_enabled()) return BRAID_ERROR(ncclInternalError, "a TLS session without ncclSetEncryption");
  set_nonblocking(fd);
  set_nodelay(fd);
  std::unique_ptr<TlsSession> s(new TlsSession);
  s->wire_ = std::make_unique<TlsWire>();
  s->wire_->fd = fd;
  {
    OpensslSection openssl;
    ERR_clear_error();
    s->ssl_ = SSL_new(role == TlsRole::Client ? g_client.load() : g_server.load());
    BIO* bio = s->ssl_ ? BIO_new(g_socket_bio.load()) : nullptr;
    if (!bio) return BRAID_ERROR(ncclSystemError, "TLS: cannot start a session ({})", openssl_errors());
    BIO_set_data(bio, s->wire_.get());
    SSL_set_bio(s->ssl_, bio, bio);  // the session owns it now
    if (role == TlsRole::Client)
      SSL_set_connect_state(s->ssl_);
    else
      SSL_set_accept_state(s->ssl_);
  }
  SockAddr addr;
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, &addr.sa, &len) == 0) s->peer_ = to_string(addr);
  *out = std::move(s);
  return Status::ok();
}

TlsSession::~TlsSession() {
  OpensslSection openssl;
  SSL_free(ssl_);
}

// Records why the session failed; -1 with errno EPROTO.
ssize_t TlsSession::failed(const char* what, int ssl_error) {
  std::string detail = openssl_errors();
  if (detail.empty())
    detail = ssl_error == SSL_ERROR_SYSCALL ? (errno ? std::strerror(errno) : "the peer closed the connection")
                                            : fmt::format("OpenSSL error {}", ssl_error);
  error_ = fmt::format("TLS {} with {}: {}", what, peer_.empty() ? "a peer" : peer_, detail);
  if (!established_) error_ += " (the peer has no TLS, or another key: check ncclSetEncryption on every rank)";
  record_failure(error_);
  errno = EPROTO;
  return -1;
}

// Whether an SSL error means "try again when the socket is ready": then
// wants() says for what, and errno is EAGAIN.
bool TlsSession::would_block(int ssl_error) {
  if (ssl_error != SSL_ERROR_WANT_READ && ssl_error != SSL_ERROR_WANT_WRITE) return false;
  wants_ = ssl_error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
  errno = EAGAIN;
  return true;
}

Status TlsSession::handshake(bool* done) {
  *done = established_;
  if (established_) return Status::ok();
  OpensslSection openssl;
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    established_ = *done = true;
    wants_ = 0;
    return Status::ok();
  }
  const int e = SSL_get_error(ssl_, r);
  if (would_block(e)) return Status::ok();
  failed("handshake", e);
  return BRAID_ERROR(ncclRemoteError, "{}", error_);
}

ssize_t TlsSession::send(const void* data, size_t bytes) {
  OpensslSection openssl;
  ERR_clear_error();
  size_t n = 0;
  if (SSL_write_ex(ssl_, data, bytes, &n)) return ssize_t(n);
  const int e = SSL_get_error(ssl_, 0);
  if (would_block(e)) return -1;
  if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno) return -1;  // the socket's error, as errno says
  return failed("send", e);
}

Status TlsSession::seal(const void* data, size_t bytes) {
  OpensslSection openssl;
  wire_->sealing = true;
  for (size_t done = 0, n = 0; done < bytes; done += n) {
    ERR_clear_error();
    if (!SSL_write_ex(ssl_, static_cast<const char*>(data) + done, bytes - done, &n)) {
      wire_->sealing = false;
      failed("send", SSL_get_error(ssl_, 0));  // the outbox takes everything: never "would block"
      return BRAID_ERROR(ncclSystemError, "{}", error_);
    }
  }
  wire_->sealing = false;
  return Status::ok();
}

ssize_t TlsSession::flush() {
  TlsWire& w = *wire_;
  while (w.outbox_sent < w.outbox.size()) {
    const ssize_t n =
        ::send(w.fd, w.outbox.data() + w.outbox_sent, w.outbox.size() - w.outbox_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (errno == EWOULDBLOCK) errno = EAGAIN;
      wants_ = POLLOUT;
      return -1;
    }
    w.outbox_sent += size_t(n);
  }
  w.outbox.clear();  // (keeps its capacity for the next fragment)
  w.outbox_sent = 0;
  return 0;
}

// TLS 1.3 records carry at most 16 KB of data and add 22 bytes each (a
// 5-byte header, the content type, a 16-byte tag).
size_t TlsSession::sealed_bytes(size_t bytes) { return bytes + (bytes / 16384 + 1) * 22; }

void TlsSession::reserve_outbox(size_t bytes) { wire_->outbox.reserve(sealed_bytes(bytes)); }

ssize_t TlsSession::recv(void* data, size_t bytes) {
  OpensslSection openssl;
  ERR_clear_error();
  size_t n = 0;
  if (SSL_read_ex(ssl_, data, bytes, &n)) return ssize_t(n);
  const int e = SSL_get_error(ssl_, 0);
  if (would_block(e)) return -1;
  if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && !errno)) return 0;
  if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) return -1;  // the socket's error, as errno says
  return failed("receive", e);                                     // e.g. a record that fails its authentication
}

bool TlsSession::buffered() const {
  OpensslSection openssl;
  return SSL_pending(ssl_) > 0 || SSL_has_pending(ssl_);
}

int TlsSession::fd() const { return wire_->fd; }

ssize_t send_some(TlsSession* tls, int fd, const void* data, size_t bytes) {
  return tls ? tls->send(data, bytes) : ::send(fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
}

ssize_t recv_some(TlsSession* tls, int fd, void* data, size_t bytes) {
  return tls ? tls->recv(data, bytes) : ::recv(fd, data, bytes, MSG_DONTWAIT);
}

std::string io_failure(TlsSession* tls, const char* what) {
  if (tls && errno == EPROTO) return tls->error();
  return fmt::format("{} failed: {}", what, std::strerror(errno));
}

Status tls_handshake_all(std::span<TlsSession* const> sessions, Deadline deadline) {
  std::vector<pollfd> waiting;
  for (;;) {
    waiting.clear();
    for (TlsSession* s : sessions) {
      bool done = false;
      BRAID_TRY(s->handshake(&done));
      if (!done) waiting.push_back({s->fd(), s->wants(), 0});
    }
    if (waiting.empty()) return Status::ok();
    if (deadline.expired())
      return BRAID_ERROR(ncclTimeout, "TLS: {} handshake(s) not done within BRAID_TIMEOUT", waiting.size());
    if (::poll(waiting.data(), waiting.size(), std::min(deadline.remaining_ms(), 100)) < 0 && errno != EINTR)
      return BRAID_ERROR(ncclSystemError, "TLS: poll: {}", std::strerror(errno));
  }
}

void TlsSession::close_notify() {
  OpensslSection openssl;
  if (established_) SSL_shutdown(ssl_);
  ERR_clear_error();
}

}  // namespace braid

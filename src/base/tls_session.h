// One TLS session on one TCP socket, driven by its caller (ncclSetEncryption,
// NCCL 2.32), and the process-wide key every session uses.
//
// TLS 1.3 in PSK-with-(EC)DHE mode (OpenSSL 3): the key every process was
// given authenticates both ends of each handshake, and each connection gets
// fresh traffic keys.  A peer with another key, or without TLS, fails the
// handshake; a record altered in flight fails its authentication tag.  In
// both cases the failure is logged and kept for error messages
// (tls_last_failure).
//
// A session never blocks: the socket is non-blocking, and each call says,
// as send(2) and recv(2) do, that it would block (errno EAGAIN) and what to
// poll for (wants()).  Code that owns a connection's I/O loop drives its
// sessions itself (the socket transport: no thread hop, no copy); code that
// wants a plain descriptor goes through the relay (tls.h), which drives
// sessions on a thread of its own.  OpenSSL objects are not thread-safe:
// one thread at a time per session.
#pragma once

#include <sys/types.h>

#include <memory>
#include <span>
#include <string>

#include "src/base/deadline.h"
#include "src/base/status.h"

struct ssl_st;  // OpenSSL's SSL

namespace braid {

// Turns TLS on for connections made from now on, keyed by `psk` (at least
// 32 bytes of text), or off (psk nullptr).  Process-wide.
Status tls_configure(const char* psk);
bool tls_enabled();

// The last reason this process closed a TLS connection ("" if it never
// did), e.g. a handshake with a peer holding another key.
std::string tls_last_failure();

enum class TlsRole { Client, Server };

struct TlsWire;  // tls_session.cc

class TlsSession {
 public:
  // A session on `fd`, a connected TCP socket, which this makes
  // non-blocking and which stays the caller's to close.  Needs TLS on.
  static Status open(int fd, TlsRole role, std::unique_ptr<TlsSession>* out);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Advances the handshake as far as the socket allows: *done once it is
  // complete (then wants() is 0), else poll for wants().  A failed
  // handshake is an error saying why (another key, no TLS there).
  Status handshake(bool* done);
  bool established() const { return established_; }

  // As send(2) and recv(2) with MSG_DONTWAIT: bytes moved, 0 (recv) at the
  // peer's end of the stream, or -1 with errno: EAGAIN (poll for wants()),
  // EPROTO (a TLS failure: error() says which), or the socket's own error.
  // A send that would block must be repeated with the same bytes (more may
  // follow them).
  ssize_t send(const void* data, size_t bytes);
  ssize_t recv(void* data, size_t bytes);
  // POLLIN or POLLOUT: what the last call that would block waits for.
  short wants() const { return wants_; }
  // The other way to send, for a thread that should not encrypt while the
  // socket is full: seal() encrypts all `bytes` at once into the session's
  // outbox (nothing goes to the socket), flush() then sends what the socket
  // takes: 0 once the outbox is empty, else -1 with errno (EAGAIN: poll for
  // wants()).  Not while a send() that would block is still to be repeated.
  Status seal(const void* data, size_t bytes);
  ssize_t flush();
  // Allocates the outbox for sealing up to `bytes` at a time, now rather
  // than at the first seal; sealed_bytes(bytes) is its size.
  void reserve_outbox(size_t bytes);
  static size_t sealed_bytes(size_t bytes);
  // Bytes taken off the socket that recv has not returned yet: poll() does
  // not announce them, so a reader must drain them before it sleeps.
  bool buffered() const;
  // The last TLS failure of this session, with the peer's address.
  const std::string& error() const { return error_; }
  // Sends close_notify if the socket takes it now (the peer reads an end of
  // stream either way when the socket closes).
  void close_notify();
  int fd() const;

 private:
  TlsSession() = default;
  ssize_t failed(const char* what, int ssl_error);
  bool would_block(int ssl_error);

  ::ssl_st* ssl_ = nullptr;
  std::unique_ptr<TlsWire> wire_;  // the BIO's data: the socket, the outbox
  std::string peer_;               // "ip:port", for messages
  bool established_ = false;
  short wants_ = 0;
  std::string error_;
};

// send(2) and recv(2) with MSG_DONTWAIT, through `tls` where there is one.
ssize_t send_some(TlsSession* tls, int fd, const void* data, size_t bytes);
ssize_t recv_some(TlsSession* tls, int fd, void* data, size_t bytes);
// Why the last of those failed (errno, or the session's TLS failure).
std::string io_failure(TlsSession* tls, const char* what);

// Completes the handshakes of `sessions` together, by `deadline`: for
// connections that ranks open to each other at once, where each side's
// handshake needs the other's answer.
Status tls_handshake_all(std::span<TlsSession* const> sessions, Deadline deadline);

}  // namespace braid

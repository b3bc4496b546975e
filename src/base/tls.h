// TLS under code that wants a plain descriptor (ncclSetEncryption, NCCL
// 2.32): the bootstrap's connections.  The socket transport and GIN's TCP
// streams drive their sessions themselves (tls_session.h).
//
// tls_secure swaps a connected TCP socket for one end of a local socket
// pair, and a relay thread (one per process) moves bytes between the pair's
// other end and a TlsSession on the TCP socket.  The callers keep their
// plain, non-blocking socket calls and their own deadlines, and a
// connection behaves as TCP does: writes are buffered at once (so a rank may
// send before its peer accepted, as the bootstrap's ring does), and a failed
// or closed peer is an end of file.  Closing is the one difference: the
// kernel delivers what a closed TCP socket still held after its process
// exits, but the relay thread ends with the process, so callers close with
// tls_close, which waits for the relay.  The handshake itself runs in the
// relay, so tls_secure never waits for the peer.  What it costs: one more
// copy and a thread hop per message, paid only by processes that turned TLS
// on.
#pragma once

#include <chrono>
#include <span>
#include <string>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/base/tls_session.h"

namespace braid {

// With TLS on: *fd, a connected TCP socket, becomes a socket-pair end that
// carries the same byte stream in the clear while the relay carries it
// encrypted on the TCP socket (which the relay now owns and closes).  The
// new descriptor keeps the old one's O_NONBLOCK and is close-on-exec.
// With TLS off: nothing changes.
Status tls_secure(int* fd, TlsRole role);

// Closes descriptors as close(2) closes TCP sockets: the kernel delivers
// what was written even if the process then exits.  A TLS connection's
// unsent tail is in the relay thread, which a process exit would end, so
// for those this waits until the relay has handed everything written to
// the TCP socket and closed it, or until `deadline` (a peer that stopped
// reading).  Other descriptors are just closed.
void tls_close(std::span<const int> fds, Deadline deadline);

// How much longer than usual an accepted connection's first message may
// take: with TLS on, the handshake comes first (0 with TLS off).
std::chrono::milliseconds tls_hello_grace();

}  // namespace braid

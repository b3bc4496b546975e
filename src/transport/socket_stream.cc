#include "src/transport/socket_stream.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/base/net.h"

namespace braid {

void Stream::fail(std::string why) {
  {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (error.empty()) error = std::move(why);
  }
  failed.store(true, std::memory_order_release);
}

Status Stream::status() {
  std::lock_guard<std::mutex> lock(error_mutex);
  return BRAID_ERROR(ncclRemoteError, "socket connection with rank {} (channel {}): {}", peer, channel, error);
}

// With TLS a fragment is sealed whole (encrypted into the session's outbox)
// by the first pump that reaches it, most often the executor's at commit,
// and then flushed like plain bytes: so whichever thread finishes a send
// that the socket refused at first only hands ciphertext to the kernel, as
// over plain TCP, and never waits for a core to encrypt.  Its slot is
// released once all of it is on the socket.
void pump_send(Stream* s) {
  StagingRing& r = s->ring;
  const int fd = s->fd.load(std::memory_order_relaxed);
  TlsSession* tls = s->tls.get();
  while (r.tail.load(std::memory_order_relaxed) != r.head.load(std::memory_order_acquire)) {
    const uint64_t i = r.tail.load(std::memory_order_relaxed);
    const size_t frame_bytes = sizeof(uint64_t) + r.length(i);
    if (tls) {
      if (!s->sealed) {
        Status st = tls->seal(r.frame(i), frame_bytes);
        if (!st.is_ok()) return s->fail(st.message());
        s->sealed = true;
      }
      if (tls->flush() < 0) {
        if (!errno_would_block()) s->fail(io_failure(tls, "send"));
        return;
      }
      s->sealed = false;
    } else {
      const ssize_t w = ::send(fd, r.frame(i) + s->offset, frame_bytes - s->offset, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (!errno_would_block()) s->fail(io_failure(nullptr, "send"));
        return;
      }
      s->offset += size_t(w);
      if (s->offset < frame_bytes) return;
      s->offset = 0;
    }
    r.tail.store(i + 1, std::memory_order_release);
  }
}

bool recv_ring_full(Stream* s) {
  return s->ring.head.load(std::memory_order_acquire) - s->ring.tail.load(std::memory_order_acquire) >= s->ring.slots;
}

bool send_queue_empty(Stream* s) {
  return s->ring.head.load(std::memory_order_acquire) == s->ring.tail.load(std::memory_order_acquire);
}

// Reads until the socket would block, or until one fragment is complete and
// nothing read is left over: a further recv would most likely find nothing,
// a wasted syscall on a small message's path.  Plain TCP: a recv for a
// header (or for a payload that fits) asks for up to kSocketReadAhead
// bytes, so a small fragment's header and payload, and whatever follows,
// come in one call; the rest of a large payload is read straight into its
// slot.  TLS: the session reads ahead itself (many records a syscall) and
// hands out what is asked, so every read goes straight where it belongs.
void pump_recv(Stream* s) {
  StagingRing& r = s->ring;
  const int fd = s->fd.load(std::memory_order_relaxed);
  TlsSession* tls = s->tls.get();
  while (r.head.load(std::memory_order_relaxed) - r.tail.load(std::memory_order_relaxed) < r.slots) {
    const uint64_t i = r.head.load(std::memory_order_relaxed);
    const bool in_header = s->offset < sizeof(uint64_t);
    char* dst =
        in_header ? reinterpret_cast<char*>(&s->wire_length) + s->offset : r.slot(i) + (s->offset - sizeof(uint64_t));
    const size_t want = in_header ? sizeof(uint64_t) - s->offset : s->wire_length - (s->offset - sizeof(uint64_t));
    size_t n = 0;
    if (s->ahead_begin < s->ahead_end) {
      n = std::min(want, s->ahead_end - s->ahead_begin);
      std::memcpy(dst, s->ahead.get() + s->ahead_begin, n);
      s->ahead_begin += n;
    } else if (want > 0) {
      const bool via_ahead = !tls && (in_header || want <= kSocketReadAhead);
      const ssize_t got = recv_some(tls, fd, via_ahead ? s->ahead.get() : dst, via_ahead ? kSocketReadAhead : want);
      if (got == 0) {
        s->eof.store(true, std::memory_order_release);
        if (s->offset) s->fail("the peer closed the connection in the middle of a fragment");
        return;
      }
      if (got < 0) {
        if (!errno_would_block()) s->fail(io_failure(tls, "recv"));
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
      r.set_length(i, s->wire_length);
      s->offset = 0;
      r.head.store(i + 1, std::memory_order_release);
      if (s->ahead_begin == s->ahead_end && !(tls && tls->buffered())) return;
    }
  }
}

}  // namespace braid

// One stream of the TCP transport (socket.cc): a connection that carries
// fragments one way as [u64 length][payload], staged through a ring of
// slots on each side, and the non-blocking pumps that move them between the
// ring and the socket.
//
// With TLS on (ncclSetEncryption) the stream holds its own TlsSession, and
// the pumps seal (encrypt) and open records themselves: no relay thread, no
// copy through a local socket pair.  A session is used by one thread at a
// time, as the stream's socket already is: the sending side by whoever
// holds send_mutex, the receiving side by the executor alone.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/base/tls_session.h"

namespace braid {

constexpr uint32_t kSocketSlots = 4;
constexpr size_t kSocketReadAhead = 4096;  // bytes a plain receive asks for beyond what it knows it needs

// A single-producer single-consumer ring of staging slots.  Each slot is
// preceded by its fragment's length, so that [length][payload] leaves in
// one piece (one TLS record, for a small fragment).  The stride is a
// multiple of 64 bytes, so every slot is as aligned as the first.
struct StagingRing {
  static constexpr size_t kHeader = 64;
  StagingRing(uint32_t slots, size_t slot_bytes)
      : slots(slots), slot_bytes(slot_bytes), stride(kHeader + (slot_bytes + 63) / 64 * 64), data(slots * stride) {}
  char* slot(uint64_t i) { return data.data() + (i % slots) * stride + kHeader; }
  char* frame(uint64_t i) { return slot(i) - sizeof(uint64_t); }  // [length][payload]
  uint64_t length(uint64_t i) { return *reinterpret_cast<const uint64_t*>(frame(i)); }
  void set_length(uint64_t i, uint64_t bytes) { *reinterpret_cast<uint64_t*>(frame(i)) = bytes; }
  const uint32_t slots;
  const size_t slot_bytes, stride;
  std::vector<char> data;
  std::atomic<uint64_t> head{0};  // slots filled by the producer
  std::atomic<uint64_t> tail{0};  // slots emptied by the consumer
};

// Shared by both pipe kinds: the stream, its ring, and a sticky error.
struct Stream {
  Stream(int peer, int channel, bool sending, size_t slot_bytes)
      : peer(peer),
        channel(channel),
        sending(sending),
        ring(kSocketSlots, slot_bytes),
        ahead(sending ? nullptr : new char[kSocketReadAhead]) {}
  const int peer, channel;
  const bool sending;
  StagingRing ring;
  std::atomic<int> fd{-1};          // set once, by the progress thread (connect or accept)
  std::unique_ptr<TlsSession> tls;  // with TLS on; set before fd
  // Sending side: whoever holds send_mutex pumps the ring into the socket
  // (the executor at commit, else the progress thread).  Receiving side:
  // only the executor reads.
  std::mutex send_mutex;
  size_t offset = 0;         // progress within the current [length][payload]
  bool sealed = false;       // TLS: the current fragment is in the session's outbox
  uint64_t wire_length = 0;  // receive side: length header being read
  // Receive side, plain TCP: bytes read past the fragment being filled,
  // [begin, end).  (A TLS session keeps its own.)
  std::unique_ptr<char[]> ahead;
  size_t ahead_begin = 0, ahead_end = 0;
  std::atomic<bool> failed{false};
  std::atomic<bool> eof{false};
  std::mutex error_mutex;
  std::string error;

  void fail(std::string why);
  Status status();
};

// Writes queued fragments until the socket would block.  Hold s->send_mutex.
void pump_send(Stream* s);
// Reads fragments into free slots (the receiving executor's thread only).
void pump_recv(Stream* s);
bool recv_ring_full(Stream* s);
bool send_queue_empty(Stream* s);

}  // namespace braid

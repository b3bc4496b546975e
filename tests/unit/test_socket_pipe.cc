// The TCP transport's pipes (src/transport/socket.cc) against a raw socket
// playing the peer: what a receive pipe makes of a byte stream however it is
// cut (headers and payloads split, many fragments in one read, a fragment
// of 0 bytes, a malformed length, the peer closing), and what a send pipe
// puts on the wire when the socket is full at commit and the caller has
// moved on.  The wire format is [u64 length][payload] after a handshake of
// {u64 comm hash, i32 rank, i32 channel}; with TLS on (ncclSetEncryption)
// the same inside a TLS session, which the test's end then speaks too.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/env.h"
#include "src/base/net.h"
#include "src/transport/doorbell.h"
#include "src/transport/socket_stream.h"
#include "src/transport/transport.h"

using namespace braid;

namespace {

struct Handshake {
  uint64_t comm_hash;
  int32_t rank;
  int32_t channel;
};

std::string pattern(size_t bytes, int seed) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = char((i * 131 + size_t(seed) * 7 + 1) & 0xff);
  return s;
}

std::string wire(const std::vector<std::string>& fragments) {
  std::string out;
  for (const std::string& f : fragments) {
    uint64_t len = f.size();
    out.append(reinterpret_cast<const char*>(&len), sizeof(len));
    out += f;
  }
  return out;
}

constexpr const char* kPsk = "unit-test-only-socket-psk-0123456789abcdef";

// TLS on for the transports made while it lives.
struct TlsOn {
  explicit TlsOn(bool on) {
    if (on) REQUIRE(tls_configure(kPsk).is_ok());
  }
  ~TlsOn() { (void)tls_configure(nullptr); }
};

// The test's end of one stream ("rank 1"): plain TCP, or TLS as rank 0's
// transport speaks it.  Blocking, bounded at 20 s.  (No Catch2 assertions
// in the I/O: writers run on threads of their own.)
struct PeerEnd {
  int fd = -1;
  std::unique_ptr<TlsSession> tls;

  PeerEnd(int connected, TlsRole role) : fd(connected) {
    if (!tls_enabled()) return;
    REQUIRE(TlsSession::open(fd, role, &tls).is_ok());
    bool done = false;
    while (!done) {
      Status s = tls->handshake(&done);
      INFO(s.message());
      REQUIRE(s.is_ok());
      if (!done) REQUIRE(wait_for(tls->wants()));
    }
  }
  ~PeerEnd() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  bool wait_for(short events) {
    pollfd p{fd, events, 0};
    return ::poll(&p, 1, 20000) == 1;
  }
  bool write(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = send_some(tls.get(), fd, p, n);
      if (w < 0 && errno == EAGAIN && wait_for(tls ? tls->wants() : short(POLLOUT))) continue;
      if (w <= 0) return false;
      p += w;
      n -= size_t(w);
    }
    return true;
  }
  bool write(const std::string& bytes) { return write(bytes.data(), bytes.size()); }
  bool read(char* p, size_t n) {
    while (n > 0) {
      const ssize_t r = recv_some(tls.get(), fd, p, n);
      if (r < 0 && errno == EAGAIN && wait_for(tls ? tls->wants() : short(POLLIN))) continue;
      if (r <= 0) return false;
      p += r;
      n -= size_t(r);
    }
    return true;
  }
};

// Rank 0's socket transport; rank 1 is the test, listening on its own port.
struct Rank0 {
  uint64_t comm_hash = (uint64_t(getpid()) << 32) ^ uint64_t(std::random_device{}());
  std::unique_ptr<Transport> transport;
  std::string address;  // rank 0's listener
  int peer_listener = -1;

  Rank0() {
    SockAddr addr;
    REQUIRE(local_address(&addr).is_ok());
    SockAddr bound;
    REQUIRE(listen_tcp(addr, &peer_listener, &bound).is_ok());
    std::unique_ptr<SocketListener> listener;
    REQUIRE(socket_listen(addr, &listener, &address).is_ok());
    TransportContext ctx;
    ctx.comm_hash = comm_hash;
    ctx.rank = 0;
    ctx.nranks = 2;
    ctx.peers.resize(2);
    ctx.peers[0].host_hash = 1;
    ctx.peers[1].host_hash = 2;
    std::snprintf(ctx.peers[0].socket_addr, sizeof(ctx.peers[0].socket_addr), "%s", address.c_str());
    std::snprintf(ctx.peers[1].socket_addr, sizeof(ctx.peers[1].socket_addr), "%s", to_string(bound).c_str());
    REQUIRE(make_socket_transport(ctx, std::move(listener), &transport).is_ok());
  }
  ~Rank0() {
    transport.reset();
    ::close(peer_listener);
  }

  RecvPipe* pipe_from_rank1() {
    RecvPipe* pipe = nullptr;
    REQUIRE(transport->recv_pipe(1, 0, &pipe).is_ok());
    return pipe;
  }

  // A stream from "rank 1" into rank 0's receive pipe (1, channel 0).
  std::unique_ptr<PeerEnd> connect_as_rank1() {
    SockAddr addr;
    REQUIRE(parse_endpoint(address, &addr).is_ok());
    int fd = -1;
    REQUIRE(connect_tcp(addr, Deadline::after(std::chrono::seconds(5)), nullptr, &fd).is_ok());
    auto peer = std::make_unique<PeerEnd>(fd, TlsRole::Client);
    Handshake hello{comm_hash, 1, 0};
    REQUIRE(peer->write(reinterpret_cast<const char*>(&hello), sizeof(hello)));
    return peer;
  }

  // The stream rank 0's send pipe to rank 1 opened, handshake checked.
  std::unique_ptr<PeerEnd> accept_from_rank0() {
    pollfd p{peer_listener, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    int fd = ::accept(peer_listener, nullptr, nullptr);
    REQUIRE(fd >= 0);
    auto peer = std::make_unique<PeerEnd>(fd, TlsRole::Server);
    Handshake hello{};
    REQUIRE(peer->read(reinterpret_cast<char*>(&hello), sizeof(hello)));
    CHECK(hello.comm_hash == comm_hash);
    CHECK(hello.rank == 0);
    CHECK(hello.channel == 0);
    return peer;
  }
};

// Takes `count` fragments from the pipe (releasing each), or stops at the
// first error, which it returns.
Status collect(RecvPipe* pipe, size_t count, std::vector<std::string>* out) {
  Deadline deadline = Deadline::after(std::chrono::seconds(20));
  while (out->size() < count) {
    const void* data = nullptr;
    size_t bytes = 0;
    BRAID_TRY(pipe->try_acquire(&data, &bytes));
    if (!data) {
      if (deadline.expired()) return BRAID_ERROR(ncclInternalError, "test: no fragment within 20 s");
      std::this_thread::yield();
      continue;
    }
    out->emplace_back(static_cast<const char*>(data), bytes);
    BRAID_TRY(pipe->release());
  }
  return Status::ok();
}

}  // namespace

TEST_CASE("socket pipe: fragments arrive whole however the byte stream is cut", "[socket][tls]") {
  const bool tls = GENERATE(false, true);
  INFO("TLS " << tls);
  TlsOn on(tls);
  const size_t slot = size_t(env_int("BRAID_SOCKET_SLOT_BYTES"));
  std::vector<std::string> sent;
  int seed = 0;
  for (size_t bytes : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(4087), size_t(4088), size_t(4089),
                       size_t(4096), size_t(0), size_t(5000), size_t(65536), slot, size_t(3)})
    sent.push_back(pattern(bytes, ++seed));
  const std::string bytes = wire(sent);
  // Cuts: none (one write), and pieces that split headers and payloads
  // everywhere, written with pauses so the reader sees them apart.
  for (bool pieces : {false, true}) {
    INFO("pieces " << pieces);
    Rank0 r;
    RecvPipe* pipe = r.pipe_from_rank1();
    auto peer = r.connect_as_rank1();
    bool written = true;
    std::thread writer([&] {
      if (!pieces) {
        written = peer->write(bytes);
        return;
      }
      // (With TLS, each piece is a record of its own.)
      const size_t cuts[] = {1, 3, 8, 13, 4096, 5, 1000, 2};
      for (size_t at = 0, k = 0; at < bytes.size() && written; ++k) {
        size_t n = std::min(cuts[k % std::size(cuts)], bytes.size() - at);
        written = peer->write(bytes.data() + at, n);
        at += n;
        if (k < 64) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    std::vector<std::string> got;
    Status s = collect(pipe, sent.size(), &got);
    writer.join();
    CHECK(written);
    INFO(s.message());
    REQUIRE(s.is_ok());
    REQUIRE(got.size() == sent.size());
    for (size_t i = 0; i < sent.size(); ++i) {
      INFO("fragment " << i << " of " << sent[i].size() << " bytes");
      CHECK(got[i] == sent[i]);
    }
  }
}

TEST_CASE("socket pipe: a length beyond the slot is refused, not read", "[socket]") {
  Rank0 r;
  RecvPipe* pipe = r.pipe_from_rank1();
  auto peer = r.connect_as_rank1();
  const std::string good = wire({pattern(100, 1)});
  uint64_t too_long = uint64_t(env_int("BRAID_SOCKET_SLOT_BYTES")) + 1;
  std::string bytes = good + std::string(reinterpret_cast<const char*>(&too_long), sizeof(too_long)) + "xyz";
  REQUIRE(peer->write(bytes));
  std::vector<std::string> got;
  Status s = collect(pipe, 2, &got);
  REQUIRE(got.size() == 1);
  CHECK(got[0] == pattern(100, 1));
  CHECK(s.code() == ncclRemoteError);
  CHECK(s.message().find("malformed fragment") != std::string::npos);
}

TEST_CASE("socket pipe: the peer closing is an error, and a fragment it cut short is never delivered",
          "[socket][tls]") {
  const bool tls = GENERATE(false, true);
  INFO("TLS " << tls);
  TlsOn on(tls);
  for (bool mid_fragment : {false, true}) {
    INFO("mid fragment " << mid_fragment);
    Rank0 r;
    RecvPipe* pipe = r.pipe_from_rank1();
    auto peer = r.connect_as_rank1();
    std::string bytes = wire({pattern(10, 1)});
    if (mid_fragment) bytes += wire({pattern(100, 2)}).substr(0, 50);
    REQUIRE(peer->write(bytes));
    peer->close();  // (without TLS's close_notify: as a process that exits)
    std::vector<std::string> got;
    Status s = collect(pipe, 2, &got);
    REQUIRE(got.size() == 1);
    CHECK(got[0] == pattern(10, 1));
    CHECK(s.code() == ncclRemoteError);
    CHECK(s.message().find(mid_fragment ? "in the middle of a fragment" : "the peer closed it") != std::string::npos);
  }
}

TEST_CASE("socket pipe: committed fragments reach the wire whole and in order after the sender moved on",
          "[socket][tls]") {
  const bool tls = GENERATE(false, true);
  INFO("TLS " << tls);
  TlsOn on(tls);
  // More than the kernel's socket buffers hold while the peer does not
  // read: commit sends what the socket takes and queues the rest, which the
  // progress thread must deliver with no further call on the pipe.
  const size_t slot = size_t(env_int("BRAID_SOCKET_SLOT_BYTES"));
  Rank0 r;
  SendPipe* pipe = nullptr;
  REQUIRE(r.transport->send_pipe(1, 0, &pipe).is_ok());
  std::vector<std::string> sent;
  for (int i = 0; i < 24; ++i) sent.push_back(pattern(i % 5 == 4 ? 17 : slot - size_t(i), i));
  auto peer = r.accept_from_rank0();
  const std::string expected = wire(sent);
  std::string received(expected.size(), '\0');
  bool read = false;
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the sender fill the socket
    read = peer->read(received.data(), received.size());
  });
  Deadline deadline = Deadline::after(std::chrono::seconds(20));
  for (const std::string& f : sent) {
    void* dst = nullptr;
    Status s = Status::ok();
    while (!dst && s.is_ok() && !deadline.expired()) {
      s = pipe->try_acquire(&dst);
      if (!dst) std::this_thread::yield();
    }
    INFO(s.message());
    REQUIRE(dst);
    std::memcpy(dst, f.data(), f.size());
    REQUIRE(pipe->commit(f.size()).is_ok());
  }
  reader.join();
  REQUIRE(read);
  CHECK(received == expected);
}

TEST_CASE("socket pipe: while armed to forward, data on a receive stream rings the other doorbell", "[socket]") {
  // Peers on shared memory and on sockets at once: the executor sleeps on
  // the shared-memory doorbell, and the socket transport's progress thread
  // watches the receive streams for it (ForwardedDoorbell).
  Rank0 r;
  RecvPipe* pipe = r.pipe_from_rank1();
  auto peer = r.connect_as_rank1();
  DoorbellWord word{};
  FutexDoorbell shm(&word, IdlePolls{0, 0});
  Doorbell* socket = r.transport->doorbell();
  REQUIRE(socket);
  REQUIRE(socket->forward_to(&shm));
  ForwardedDoorbell both(&shm, socket);
  auto rung_within = [&](uint32_t seen, int ms) {
    for (int i = 0; i < ms && word.seq.load() == seen; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return word.seq.load() != seen;
  };
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    const uint32_t seen = both.arm();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the progress thread starts watching
    REQUIRE(peer->write(wire({pattern(64, round)})));
    CHECK(rung_within(seen, 5000));
    both.disarm();
    std::vector<std::string> got;
    REQUIRE(collect(pipe, 1, &got).is_ok());
    CHECK(got[0] == pattern(64, round));
  }
  // The socket side not armed (the shared-memory side is, so a ring would
  // show): data is left to the executor, nobody is rung.
  const uint32_t seen = shm.arm();
  REQUIRE(peer->write(wire({pattern(64, 9)})));
  CHECK(!rung_within(seen, 50));
  shm.disarm();
  std::vector<std::string> got;
  REQUIRE(collect(pipe, 1, &got).is_ok());
  CHECK(got[0] == pattern(64, 9));
}

TEST_CASE("socket pipe over TLS: a record altered in flight fails the stream, and nothing of it is delivered",
          "[socket][tls]") {
  TlsOn on(true);
  Rank0 r;
  RecvPipe* pipe = r.pipe_from_rank1();
  auto peer = r.connect_as_rank1();
  REQUIRE(peer->write(wire({pattern(100, 1)})));
  // An application-data record whose contents (a fragment's header and
  // payload, as far as the transport could tell) fail authentication.
  std::string forged = "\x17\x03\x03";
  forged += char(0), forged += char(40);
  forged += pattern(40, 2);
  REQUIRE(::send(peer->fd, forged.data(), forged.size(), MSG_NOSIGNAL) == ssize_t(forged.size()));
  std::vector<std::string> got;
  Status s = collect(pipe, 2, &got);
  REQUIRE(got.size() == 1);
  CHECK(got[0] == pattern(100, 1));
  CHECK(s.code() == ncclRemoteError);
  INFO(s.message());
  CHECK(s.message().find("TLS receive") != std::string::npos);
}

TEST_CASE("socket pipe over TLS: a peer without TLS fails the sending stream at its handshake, saying why",
          "[socket][tls]") {
  const bool looks_like_a_record_header = GENERATE(false, true);
  TlsOn on(true);
  Rank0 r;
  SendPipe* pipe = nullptr;
  REQUIRE(r.transport->send_pipe(1, 0, &pipe).is_ok());
  pollfd p{r.peer_listener, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);
  int fd = ::accept(r.peer_listener, nullptr, nullptr);
  REQUIRE(fd >= 0);
  // A plain peer answers the ClientHello with its own hello, then closes,
  // as braid without TLS does with a hello it cannot read.  A comm hash is
  // random: one in a few hundred begins like a TLS record header whose
  // length is more than follows, and OpenSSL then waits for the rest until
  // the close.  Both cases run.
  pollfd hello_in{fd, POLLIN, 0};
  REQUIRE(::poll(&hello_in, 1, 5000) == 1);
  char hello[512];
  CHECK(::recv(fd, hello, sizeof(hello), MSG_DONTWAIT) > 0);
  Handshake plain{r.comm_hash, 1, 0};
  // Little-endian bytes 16 03 03 00 40: a handshake record of 64 bytes.
  if (looks_like_a_record_header) plain.comm_hash = (plain.comm_hash & ~0xffffffffffull) | 0x4000030316ull;
  REQUIRE(::send(fd, &plain, sizeof(plain), MSG_NOSIGNAL) == ssize_t(sizeof(plain)));
  ::shutdown(fd, SHUT_WR);
  Status s = Status::ok();
  void* slot = nullptr;
  for (Deadline deadline = Deadline::after(std::chrono::seconds(20)); s.is_ok() && !deadline.expired();) {
    s = pipe->try_acquire(&slot);
    if (slot) s = pipe->commit(0);  // queued until the stream opens, which it never does
    std::this_thread::yield();
  }
  CHECK(s.code() == ncclRemoteError);
  INFO(s.message());
  CHECK(s.message().find("TLS handshake") != std::string::npos);
  CHECK(s.message().find("check ncclSetEncryption on every rank") != std::string::npos);
  ::close(fd);
}

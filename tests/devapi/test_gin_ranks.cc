// The GIN proxy between real processes: each forked rank has its own
// memory (braid's shareable host memory, src/transport/host_memory.h), its
// own queues, a CPU producer posting as the device does, and its proxy
// thread; puts reach the other processes either through their memory
// mapped here (one host) or over TCP.  The ranks publish their handles and
// ports on a board shared from before the fork, and report what went
// wrong there; the checks run here, on the main thread.  Then a dead peer:
// a rank killed mid-job must turn the others' waits into errors in bounded
// time, not hangs.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "gin_workload.h"
#include "src/base/net.h"
#include "src/devapi/gin_tcp.h"
#include "src/transport/host_memory.h"

using namespace braid;
using namespace braid::devapi;
using namespace devapi_test;

namespace {

constexpr int kMaxRanks = 4;

struct RankSlot {
  SharedHandle recv, signals;
  uint16_t port;
  char error[400];
};
struct Board {
  std::atomic<int> arrived[4];
  RankSlot ranks[kMaxRanks];
};

enum class Wire { Shm, Tcp };

Board* make_board() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return new (p) Board{};
}

bool barrier(Board* b, int phase, int n) {
  b->arrived[phase].fetch_add(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (b->arrived[phase].load() < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

SockAddr loopback(uint16_t port) { return SockAddr::loopback(AF_INET).with_port(port); }

// Everything one rank owns, set up and connected.
struct Rank {
  int rank = 0, n = 0;
  char* send = nullptr;
  char* recv = nullptr;
  uint64_t* signal_words = nullptr;
  GinSignals signals;
  GinWindowTable sources, receives;
  std::unique_ptr<QueueMemory> queues;
  GinFault fault;
  std::vector<std::unique_ptr<PeerMapping>> mappings;
  std::unique_ptr<GinTcpReceiver> receiver;
  std::unique_ptr<GinProxy> proxy;
  int listener = -1;
};

Status alloc_rank(Rank& r, Board* b) {
  void *send = nullptr, *recv = nullptr, *sig = nullptr;
  BRAID_TRY(host_shared_alloc(send_bytes(r.n), &send));
  BRAID_TRY(host_shared_alloc(recv_bytes(r.n), &recv));
  BRAID_TRY(host_shared_alloc(signal_count(r.n) * sizeof(uint64_t), &sig));
  r.send = static_cast<char*>(send);
  r.recv = static_cast<char*>(recv);
  r.signal_words = static_cast<uint64_t*>(sig);
  r.signals = GinSignals{r.signal_words, signal_count(r.n)};
  fill_send(r.rank, r.n, r.send);
  BRAID_TRY(r.sources.add(kSendToken, r.send, send_bytes(r.n)));
  BRAID_TRY(r.receives.add(kRecvToken, r.recv, recv_bytes(r.n)));
  r.queues = std::make_unique<QueueMemory>(r.n, 8, r.n, signal_count(r.n));
  RankSlot& slot = b->ranks[r.rank];
  slot.recv = host_shared_handle(r.recv, recv_bytes(r.n));
  slot.signals = host_shared_handle(r.signal_words, signal_count(r.n) * sizeof(uint64_t));
  SockAddr bound;
  BRAID_TRY(listen_tcp(loopback(0), &r.listener, &bound));
  slot.port = bound.port();
  return Status::ok();
}

// Links after every rank has published (barrier 0).
Status connect_rank(Rank& r, Board* b, Wire wire) {
  std::vector<std::unique_ptr<GinLink>> links;
  const auto timeout = std::chrono::seconds(10);
  if (wire == Wire::Shm) {
    for (int t = 0; t < r.n; ++t) {
      char* recv = r.recv;
      uint64_t* sig = r.signal_words;
      if (t != r.rank) {  // a peer process: map its memory here
        std::unique_ptr<PeerMapping> m1, m2;
        BRAID_TRY(map_peer_range(b->ranks[t].recv, recv_bytes(r.n), &m1));
        BRAID_TRY(map_peer_range(b->ranks[t].signals, signal_count(r.n) * sizeof(uint64_t), &m2));
        recv = m1->base();
        sig = reinterpret_cast<uint64_t*>(m2->base());
        r.mappings.push_back(std::move(m1));
        r.mappings.push_back(std::move(m2));
      }
      auto w = std::make_shared<GinWindowTable>();
      BRAID_TRY(w->add(kRecvToken, recv, recv_bytes(r.n)));
      links.push_back(std::make_unique<DirectGinLink>(std::move(w), GinSignals{sig, signal_count(r.n)}));
    }
  } else {
    for (int t = 0; t < r.n; ++t) {  // itself too: a put to self goes the same way
      int fd = -1;
      BRAID_TRY(connect_tcp(loopback(b->ranks[t].port), Deadline::after(timeout), nullptr, &fd));
      BRAID_TRY(TcpGinLink::send_hello(fd, r.rank, Deadline::after(timeout)));
      links.push_back(std::make_unique<TcpGinLink>(fd, t, timeout));
    }
    std::vector<int> fds, senders;
    for (int i = 0; i < r.n; ++i) {
      if (!wait_readable(r.listener, Deadline::after(timeout), nullptr))
        return BRAID_ERROR(ncclSystemError, "rank {}: only {} of {} GIN streams connected", r.rank, i, r.n);
      int fd = ::accept(r.listener, nullptr, nullptr);
      if (fd < 0) return BRAID_ERROR(ncclSystemError, "accept: {}", std::strerror(errno));
      int sender = -1;
      BRAID_TRY(GinTcpReceiver::recv_hello(fd, r.n, Deadline::after(timeout), &sender));
      fds.push_back(fd);
      senders.push_back(sender);
    }
    r.receiver = std::make_unique<GinTcpReceiver>(fds, senders, &r.receives, r.signals, &r.fault, timeout);
  }
  BRAID_TRY(GinProxy::create({r.queues->q}, std::move(links), &r.sources, &r.fault, {}, &r.proxy));
  r.proxy->start();
  return Status::ok();
}

// A rank's memory and links, every rank past barrier 0 before any connects;
// an error's text, or "".
std::string start_rank(Rank& r, int rank, int n, Board* b, Wire wire) {
  r.rank = rank;
  r.n = n;
  if (Status s = alloc_rank(r, b); !s.is_ok()) return s.to_string();
  if (!barrier(b, 0, n)) return "barrier 0 timed out";
  if (Status s = connect_rank(r, b, wire); !s.is_ok()) return s.to_string();
  return "";
}

// Waits for `signal` where it never comes because a peer failed: the wait
// must fail within 10 s of its 30 s deadline, with `want` in the error.
// Stops the proxy.  An error's text, or "".
std::string wait_fails_fast(Rank& r, uint16_t signal, const std::string& want) {
  const auto start = std::chrono::steady_clock::now();
  Status s = wait_signal(r.signals, signal, 1, Deadline::after(std::chrono::seconds(30)), &r.fault);
  const auto took = std::chrono::steady_clock::now() - start;
  (void)r.proxy->stop();
  if (s.is_ok()) return "the wait on a failed peer succeeded";
  if (took > std::chrono::seconds(10)) return "the wait took " + std::to_string(took.count()) + " ns";
  if (s.to_string().find(want) == std::string::npos) return "unexpected error: " + s.to_string();
  return "";
}

// The child's whole life; what it leaves in its slot's error is the verdict.
std::string rank_main(int rank, int n, Board* b, Wire wire) {
  Rank r;
  if (std::string e = start_rank(r, rank, n, b, wire); !e.empty()) return e;
  std::string bad = run_workload(rank, n, r.queues->q, r.signals, r.recv, r.fault);
  // Everyone has received everything before anyone closes.
  if (!barrier(b, 1, n) && bad.empty()) bad = "barrier 1 timed out";
  if (Status s = r.proxy->stop(); !s.is_ok() && bad.empty()) bad = s.to_string();
  if (r.receiver) {
    if (!barrier(b, 2, n) && bad.empty()) bad = "barrier 2 timed out";
    r.receiver->stop();
  }
  if (r.fault.failed() && bad.empty()) bad = r.fault.get().to_string();
  return bad;
}

// Forks n ranks running body(rank) -> error text; returns each exit status.
template <typename Body>
std::vector<int> run_processes(int n, Board* b, Body body) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(90);
      std::string e = body(rank);
      std::snprintf(b->ranks[rank].error, sizeof(b->ranks[rank].error), "%s", e.c_str());
      _exit(e.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    statuses.push_back(status);
  }
  return statuses;
}

}  // namespace

TEST_CASE("GIN proxy across processes: puts, signals and counters exact", "[devapi][gin][mp]") {
  for (Wire wire : {Wire::Shm, Wire::Tcp}) {
    const int n = 3;
    Board* b = make_board();
    auto statuses = run_processes(n, b, [&](int rank) { return rank_main(rank, n, b, wire); });
    for (int rank = 0; rank < n; ++rank) {
      INFO((wire == Wire::Shm ? "shm" : "tcp") << " rank " << rank << ": " << b->ranks[rank].error);
      CHECK(WIFEXITED(statuses[rank]));
      CHECK(WEXITSTATUS(statuses[rank]) == 0);
    }
    munmap(b, sizeof(Board));
  }
}

// Over TCP a dead peer is seen at once (its streams end without a close
// frame).  Over shared memory it is not (a dead peer looks like a slow one,
// and only the deadline ends a wait), so that wire is not part of this test.
TEST_CASE("GIN proxy across processes: a killed peer ends the waits with an error", "[devapi][gin][mp]") {
  const int n = 2;
  Board* b = make_board();
  auto statuses = run_processes(n, b, [&](int rank) -> std::string {
    Rank r;
    if (std::string e = start_rank(r, rank, n, b, Wire::Tcp); !e.empty()) return e;
    if (!barrier(b, 1, n)) return "barrier 1 timed out";
    if (rank == 1) raise(SIGKILL);  // dies holding its connections, never signalling
    // Rank 0 keeps posting to the dead rank and waits for its signal.
    DeviceProducer dev(r.queues->q);
    Gfd g = put_gfd(kSendToken, 0, kRecvToken, 0, kChunk);
    g.op |= kGfdWithSignalInc;
    g.signal_id = 0;
    for (int i = 0; i < 4; ++i) (void)dev.post(1, g);
    return wait_fails_fast(r, 1, "rank 1");
  });
  INFO(b->ranks[0].error);
  CHECK(WIFSIGNALED(statuses[1]));
  CHECK((WIFEXITED(statuses[0]) && WEXITSTATUS(statuses[0]) == 0));
  munmap(b, sizeof(Board));
}

// A rank whose proxy stops on a bad descriptor ends its links without close
// frames: its peer's wait fails at once, naming it, instead of at its
// deadline (and no close frame lands in a window as payload).
TEST_CASE("GIN proxy across processes: a faulted proxy's peers learn it at once", "[devapi][gin][mp]") {
  const int n = 2;
  Board* b = make_board();
  auto statuses = run_processes(n, b, [&](int rank) -> std::string {
    Rank r;
    if (std::string e = start_rank(r, rank, n, b, Wire::Tcp); !e.empty()) return e;
    if (!barrier(b, 1, n)) return "barrier 1 timed out";
    if (rank == 0) {
      DeviceProducer dev(r.queues->q);
      Gfd bad = put_gfd(77, 0, kRecvToken, 0, kChunk);  // no source window 77 here
      bad.op |= kGfdWithSignalInc;
      if (!dev.post(1, bad)) return "could not post";
      Status s = wait_signal(r.signals, 0, 1, Deadline::after(std::chrono::seconds(10)), &r.fault);
      (void)r.proxy->stop();
      if (s.is_ok() || s.to_string().find("names no window") == std::string::npos)
        return "rank 0's proxy did not fault: " + s.to_string();
      return "";
    }
    return wait_fails_fast(r, 0, "rank 0's GIN stream ended without a close");
  });
  for (int rank = 0; rank < n; ++rank) {
    INFO("rank " << rank << ": " << b->ranks[rank].error);
    CHECK(WIFEXITED(statuses[rank]));
    CHECK(WEXITSTATUS(statuses[rank]) == 0);
  }
  munmap(b, sizeof(Board));
}

TEST_CASE("GIN over TCP: a hello from no rank of the job, or no GIN stream, is refused", "[devapi][gin]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  int rank = -7;
  REQUIRE(TcpGinLink::send_hello(sv[0], 2, Deadline::after(std::chrono::seconds(5))).is_ok());
  REQUIRE(GinTcpReceiver::recv_hello(sv[1], 3, Deadline::after(std::chrono::seconds(5)), &rank).is_ok());
  CHECK(rank == 2);
  for (int bad : {3, -1}) {
    REQUIRE(TcpGinLink::send_hello(sv[0], bad, Deadline::after(std::chrono::seconds(5))).is_ok());
    Status s = GinTcpReceiver::recv_hello(sv[1], 3, Deadline::after(std::chrono::seconds(5)), &rank);
    CHECK(s.code() == ncclRemoteError);
    CHECK_THAT(s.message(), Catch::Contains("rank " + std::to_string(bad) + " of 3"));
  }
  const char junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  REQUIRE(::write(sv[0], junk, sizeof(junk)) == ssize_t(sizeof(junk)));
  CHECK_THAT(GinTcpReceiver::recv_hello(sv[1], 3, Deadline::after(std::chrono::seconds(5)), &rank).message(),
             Catch::Contains("not a GIN stream"));
  ::close(sv[0]);
  ::close(sv[1]);
}

// The link's timeout counts time without progress: a put that takes longer
// than it in all, because its reader is slow, still succeeds; a reader that
// stops makes it fail.
TEST_CASE("GIN over TCP: a slow but moving stream is no timeout but a stalled one is", "[devapi][gin]") {
  for (bool stall : {false, true}) {
    INFO((stall ? "stalled reader" : "slow reader"));
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    const size_t payload = 6 << 20;
    std::vector<char> src(payload, 'g');
    std::atomic<size_t> read_total{0};
    std::thread reader([&] {  // 256 KiB every 20 ms: ~80 ms a MiB, ~500 ms for the put
      std::vector<char> buf(256 << 10);
      const size_t want = sizeof(uint64_t) * 6 + payload;  // the 48-byte frame header, then the payload
      while (read_total < want) {
        if (stall && read_total > (1 << 20)) break;  // stops reading after a MiB
        ssize_t n = ::recv(sv[1], buf.data(), buf.size(), 0);
        if (n <= 0) break;
        read_total += size_t(n);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    Status s;
    {
      TcpGinLink link(sv[0], 1, std::chrono::milliseconds(300));
      s = link.put(kRecvToken, 0, src.data(), payload, nullptr);
      if (stall) ::shutdown(sv[1], SHUT_RDWR);  // let the reader's last recv return
    }  // closes sv[0]
    reader.join();
    ::close(sv[1]);
    if (stall) {
      CHECK(s.code() == ncclTimeout);
    } else {
      INFO(s.to_string());
      CHECK(s.is_ok());
      CHECK(read_total == 48 + payload);
    }
  }
}

// One receiver, two senders.  Sender 0 starts a 4 MiB put, sends half of
// it and stops; sender 1's puts and signals must still land at once (the
// receiver reads only what has arrived, and never waits on one stream), and
// the stopped frame must then end in an error naming it, in bounded time.
TEST_CASE("GIN over TCP: a sender stopped mid-frame holds no other sender and then times out", "[devapi][gin]") {
  int a[2], b[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0);
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0);
  const uint64_t big = 4 << 20;
  std::vector<char> window(big + 4096, 0);
  GinWindowTable windows;
  REQUIRE(windows.add(kRecvToken, window.data(), window.size()).is_ok());
  std::vector<uint64_t> words(4, 0);
  GinSignals signals{words.data(), uint32_t(words.size())};
  GinFault fault;
  const auto timeout = std::chrono::milliseconds(1500);
  GinTcpReceiver receiver({a[1], b[1]}, {0, 1}, &windows, signals, &fault, timeout);

  // Sender 0: a put frame's header (the wire format, gin_tcp.cc) and half its payload.
  const GinTcpFrame head{0x6e696762, 1, kRecvToken, 0, big, 1, 0, 1};
  REQUIRE(::write(a[0], &head, sizeof head) == ssize_t(sizeof head));
  std::vector<char> half(big / 2, 'a');
  std::atomic<bool> half_sent{false};  // Catch's macros are not for other threads
  std::thread half_writer([&] {
    half_sent = braid::send_all(a[0], half.data(), half.size(), Deadline::after(std::chrono::seconds(20)), nullptr)
                    .is_ok();
  });
  struct Join {  // a failed REQUIRE below still joins it
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();
    }
  } join{half_writer};

  // Sender 1: three puts behind the stopped frame, each with its signal.
  const auto t0 = std::chrono::steady_clock::now();
  {
    TcpGinLink link(b[0], 0, std::chrono::seconds(5));
    const char bytes[3] = {'x', 'y', 'z'};
    for (int k = 0; k < 3; ++k) {
      GinSignalAdd add{1, 1};
      REQUIRE(link.put(kRecvToken, big + uint64_t(k), &bytes[k], 1, &add).is_ok());
    }
    REQUIRE(wait_signal(signals, 1, 3, Deadline::after(std::chrono::milliseconds(1000)), &fault).is_ok());
    CHECK(std::chrono::steady_clock::now() - t0 < timeout);
    CHECK(std::string(window.data() + big, 3) == "xyz");
    CHECK(words[0] == 0);  // sender 0's signal: its payload is not all there
    REQUIRE(link.close().is_ok());
  }
  half_writer.join();
  REQUIRE(half_sent);
  // Sender 0 stays open and silent: the receiver reports the stopped frame.
  Status s = wait_signal(signals, 0, 1, Deadline::after(std::chrono::seconds(10)), &fault);
  CHECK(s.code() == ncclTimeout);
  CHECK_THAT(s.message(), Catch::Contains("rank 0's GIN stream stopped mid-frame (2097152 of 4194304 payload bytes)"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(8));
  CHECK(window[0] == 'a');
  CHECK(window[big / 2 - 1] == 'a');
  receiver.stop();
  ::close(a[0]);
}

namespace {

// Lands a link's gets in flight, as the proxy's turns do (bounded).
Status land_gets(GinLink& link) {
  const Deadline deadline = Deadline::after(std::chrono::seconds(20));
  while (link.gets_landed() < link.gets_issued()) {
    BRAID_TRY(link.progress());
    if (deadline.expired()) return BRAID_ERROR(ncclTimeout, "gets never landed");
  }
  return Status::ok();
}

// Window memory the host may not touch itself (as a GPU's): copies and
// adds go through the ops, which count them, and TCP stages through host
// buffers.  Plain memory underneath, so the result can be checked.
class StagedOps final : public GinMemoryOps {
 public:
  bool host_direct() const override { return false; }
  bool adds_in_windows() const override { return true; }
  Status copy(void* dst, const void* src, uint64_t bytes) const override {
    std::memmove(dst, src, bytes);
    copies.fetch_add(1);
    return Status::ok();
  }
  Status add(uint64_t* word, uint64_t value) const override {
    __atomic_fetch_add(word, value, __ATOMIC_RELEASE);
    adds.fetch_add(1);
    return Status::ok();
  }
  mutable std::atomic<int> copies{0}, adds{0};
};

}  // namespace

// A put, a VA signal and a get of several staging pieces each, between a
// link and a receiver whose window memory the host does not reach: every
// byte crosses through the ops' copies, in order with the signal.
TEST_CASE("GIN over TCP: window memory the host does not reach is staged through the ops", "[devapi][gin]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  StagedOps ops;
  const uint64_t big = (3 << 20) + 5;  // over three 1 MiB pieces
  std::vector<char> src(big), window(2 * big + 64, 0), back(big, 0);
  for (uint64_t i = 0; i < big; ++i) src[i] = char(i * 13 + 1);
  GinWindowTable windows;
  REQUIRE(windows.add(kRecvToken, window.data(), window.size()).is_ok());
  std::vector<uint64_t> words(2, 0);
  GinSignals signals{words.data(), 2, &ops};
  GinFault fault;
  GinTcpReceiver receiver({sv[1]}, {0}, &windows, signals, &fault, std::chrono::seconds(10));
  TcpGinLink link(sv[0], 1, std::chrono::seconds(10), ops);
  GinSignalAdd add{1, 7};
  REQUIRE(link.put(kRecvToken, 64, src.data(), big, &add).is_ok());
  REQUIRE(link.add_at(kRecvToken, 8, 5).is_ok());                   // a VA signal into the window's word 1
  REQUIRE(link.get(kRecvToken, 64, back.data(), big).is_ok());      // the put's bytes, back
  REQUIRE(land_gets(link).is_ok());
  REQUIRE(wait_signal(signals, 1, 7, Deadline::after(std::chrono::seconds(10)), &fault).is_ok());
  CHECK(std::memcmp(window.data() + 64, src.data(), big) == 0);
  CHECK(std::memcmp(back.data(), src.data(), big) == 0);
  uint64_t va = 0;
  std::memcpy(&va, window.data() + 8, 8);
  CHECK(va == 5);
  CHECK(ops.adds.load() == 2);      // the signal and the VA signal
  CHECK(ops.copies.load() >= 3 * 4);  // the put's pieces received, the get's sent and received, the put's sent
  REQUIRE(link.get(kRecvToken, window.size() - 8, back.data(), 64).is_ok());  // past the window's end
  Status refused = land_gets(link);
  CHECK(refused.code() == ncclInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains("outside rank 1's windows"));
  CHECK(!fault.failed());  // a refused get is the asker's error, not the target's
  CHECK(link.close().code() == ncclRemoteError);  // after its error the link ends aborted
  receiver.stop();
}

// A get's answer larger than the socket's buffers, then a put as large on
// the same stream, before the answer is read: the target reads nothing
// more of the stream while it answers, so the sender must read the answer
// while it writes the put, or both wait until the timeout.  Both memories:
// the host's, and one reached only through copies (staged).  With TLS too:
// then the sender reads records while its session has a put's record
// half-written, to be repeated.
TEST_CASE("GIN over TCP: a large get's answer and a large put cross on one stream", "[devapi][gin][tls]") {
  const bool tls = GENERATE(false, true);
  INFO("TLS " << tls);
  struct TlsOn {
    explicit TlsOn(bool on) {
      if (on) REQUIRE(tls_configure("unit-test-only-gin-psk-0123456789abcdef").is_ok());
    }
    ~TlsOn() { (void)tls_configure(nullptr); }
  } on(tls);
  StagedOps staged;
  for (const GinMemoryOps* ops : {&host_gin_memory(), static_cast<const GinMemoryOps*>(&staged)}) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    std::vector<std::unique_ptr<TlsSession>> sessions(2);
    if (tls) {
      REQUIRE(TlsSession::open(sv[0], TlsRole::Client, &sessions[0]).is_ok());
      REQUIRE(TlsSession::open(sv[1], TlsRole::Server, &sessions[1]).is_ok());
      TlsSession* both[] = {sessions[0].get(), sessions[1].get()};
      REQUIRE(tls_handshake_all(both, Deadline::after(std::chrono::seconds(10))).is_ok());
    }
    const uint64_t big = 24 << 20;
    std::vector<char> window(2 * big, 0), src(big), back(big, 0);
    for (uint64_t i = 0; i < big; ++i) {
      window[i] = char(i * 7 + 3);  // what the get brings
      src[i] = char(i * 11 + 5);    // what the put writes after it
    }
    GinWindowTable windows;
    REQUIRE(windows.add(kRecvToken, window.data(), window.size()).is_ok());
    std::vector<uint64_t> words(1, 0);
    GinSignals signals{words.data(), 1, ops};
    GinFault fault;
    std::vector<std::unique_ptr<TlsSession>> receiver_session;
    receiver_session.push_back(std::move(sessions[1]));
    GinTcpReceiver receiver({sv[1]}, {0}, &windows, signals, &fault, std::chrono::seconds(5),
                            std::move(receiver_session));
    TcpGinLink link(sv[0], 1, std::chrono::seconds(5), *ops, std::move(sessions[0]));
    GinSignalAdd add{0, 1};
    REQUIRE(link.get(kRecvToken, 0, back.data(), big).is_ok());
    REQUIRE(link.put(kRecvToken, big, src.data(), big, &add).is_ok());
    REQUIRE(link.get(kRecvToken, 0, back.data(), 16).is_ok());  // answered after the put's bytes landed
    REQUIRE(land_gets(link).is_ok());
    REQUIRE(wait_signal(signals, 0, 1, Deadline::after(std::chrono::seconds(10)), &fault).is_ok());
    for (uint64_t i = 0; i < big; ++i)
      if (back[i] != char(i * 7 + 3) || window[big + i] != src[i]) {
        FAIL_CHECK("byte " << i);
        break;
      }
    CHECK(link.gets_landed() == 2);
    CHECK(!fault.failed());
    REQUIRE(link.close().is_ok());
    receiver.stop();
  }
}

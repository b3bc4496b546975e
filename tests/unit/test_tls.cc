// The TLS relay (src/base/tls.h) on real loopback TCP connections: data
// crosses exactly and never in the clear, and a man in the middle that
// alters one byte of a record makes the receiving end fail (authentication)
// instead of delivering the altered data; what a process wrote before it
// closed and exited still arrives.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "src/base/net.h"
#include "src/base/tls.h"

using namespace braid;

namespace {

constexpr const char* kPsk = "unit-test-only-psk-0123456789abcdef";
const std::string kMarker = "PLAINTEXT-MARKER-THAT-MUST-NOT-BE-SEEN";

SockAddr loopback() { return SockAddr::loopback(AF_INET); }

// Forwards one TCP connection both ways, records what went from client to
// server, and (when tamper_at >= 0) flips a bit of that byte on the way.
class Proxy {
 public:
  Proxy(const SockAddr& server, long tamper_at) : server_(server), tamper_at_(tamper_at) {
    REQUIRE(listen_tcp(loopback(), &listen_fd_, &address_).is_ok());
    thread_ = std::thread([this] { run(); });
  }
  ~Proxy() {
    stop();
    ::close(listen_fd_);
  }
  const SockAddr& address() const { return address_; }
  // Ends the forwarding; then what went from client to server.
  const std::string& stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return seen_;
  }

 private:
  void run() {
    if (!wait_readable(listen_fd_, Deadline::after(std::chrono::seconds(20)), &stop_)) return;
    int client = ::accept(listen_fd_, nullptr, nullptr), server = -1;
    if (client < 0 || !connect_tcp(server_, Deadline::after(std::chrono::seconds(5)), nullptr, &server).is_ok()) return;
    char buf[4096];
    long offset = 0;
    while (!stop_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, 50) <= 0) continue;
      if (fds[0].revents) {
        ssize_t n = ::recv(client, buf, sizeof(buf), 0);
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; ++i, ++offset)
          if (offset == tamper_at_) buf[i] ^= 0x20;
        seen_.append(buf, size_t(n));
        if (::send(server, buf, size_t(n), MSG_NOSIGNAL) != n) break;
      }
      if (fds[1].revents) {
        ssize_t n = ::recv(server, buf, sizeof(buf), 0);
        if (n <= 0 || ::send(client, buf, size_t(n), MSG_NOSIGNAL) != n) break;
      }
    }
    ::close(client);
    if (server >= 0) ::close(server);
  }

  SockAddr server_;
  long tamper_at_;
  int listen_fd_ = -1;
  SockAddr address_;
  std::atomic<bool> stop_{false};
  std::string seen_;
  std::thread thread_;
};

struct TlsOn {
  TlsOn() { REQUIRE(tls_configure(kPsk).is_ok()); }
  ~TlsOn() { (void)tls_configure(nullptr); }
};

// A TLS server end and a TLS client end, the client connecting to `via`.
struct Pair {
  int client = -1, server = -1;
  ~Pair() {
    if (client >= 0) ::close(client);
    if (server >= 0) ::close(server);
  }
};
void connect_pair(int listen_fd, const SockAddr& via, Pair* p) {
  REQUIRE(connect_tcp(via, Deadline::after(std::chrono::seconds(5)), nullptr, &p->client).is_ok());
  REQUIRE(tls_secure(&p->client, TlsRole::Client).is_ok());
  REQUIRE(wait_readable(listen_fd, Deadline::after(std::chrono::seconds(5)), nullptr));
  p->server = ::accept(listen_fd, nullptr, nullptr);
  REQUIRE(p->server >= 0);
  REQUIRE(tls_secure(&p->server, TlsRole::Server).is_ok());
}

}  // namespace

TEST_CASE("TLS: bytes cross exactly both ways and never in the clear", "[tls]") {
  TlsOn on;
  int listen_fd = -1;
  SockAddr server;
  REQUIRE(listen_tcp(loopback(), &listen_fd, &server).is_ok());
  {
    Proxy proxy(server, -1);
    Pair p;
    connect_pair(listen_fd, proxy.address(), &p);
    const auto deadline = Deadline::after(std::chrono::seconds(20));
    std::vector<char> up(3 << 20), down(1 << 20);
    for (size_t i = 0; i < up.size(); ++i) up[i] = char(i * 31 + 7);
    for (size_t i = 0; i < down.size(); ++i) down[i] = char(i * 17 + 3);
    std::memcpy(up.data() + 1000, kMarker.data(), kMarker.size());
    // Both directions at once: neither side waits for the other to read.
    // (Catch's assertions are for the test's own thread: the sender's result is checked after join.)
    bool sent_up = false;
    std::thread sender([&] { sent_up = send_all(p.client, up.data(), up.size(), deadline, nullptr).is_ok(); });
    CHECK(send_all(p.server, down.data(), down.size(), deadline, nullptr).is_ok());
    std::vector<char> got_up(up.size()), got_down(down.size());
    CHECK(recv_all(p.server, got_up.data(), got_up.size(), deadline, nullptr).is_ok());
    CHECK(recv_all(p.client, got_down.data(), got_down.size(), deadline, nullptr).is_ok());
    sender.join();
    CHECK(sent_up);
    const bool up_exact = got_up == up, down_exact = got_down == down;  // not CHECK(a == b): Catch would print MBs
    CHECK(up_exact);
    CHECK(down_exact);
    const std::string& wire = proxy.stop();
    CHECK(wire.size() > up.size());  // all of it went through the proxy, with TLS framing
    CHECK(wire.find(kMarker) == std::string::npos);
    CHECK(wire.find(std::string(up.data() + 5000, 64)) == std::string::npos);
    ::close(p.client);
    p.client = -1;
    char byte;
    CHECK(recv_all(p.server, &byte, 1, deadline, nullptr).code() == ncclRemoteError);  // an orderly end
  }
  ::close(listen_fd);
}

TEST_CASE("TLS: a byte altered in flight fails authentication, nothing altered is delivered", "[tls]") {
  TlsOn on;
  int listen_fd = -1;
  SockAddr server;
  REQUIRE(listen_tcp(loopback(), &listen_fd, &server).is_ok());
  {
    // Well past the handshake (a ClientHello with a PSK is a few hundred bytes).
    Proxy proxy(server, 5000);
    Pair p;
    connect_pair(listen_fd, proxy.address(), &p);
    const auto deadline = Deadline::after(std::chrono::seconds(20));
    std::vector<char> data(64 << 10, 'x');
    CHECK(send_all(p.client, data.data(), data.size(), deadline, nullptr).is_ok());
    std::vector<char> got(data.size());
    size_t received = 0;
    // What arrives before the altered record is intact; then the connection ends.
    Status s;
    while (received < got.size()) {
      s = recv_all(p.server, got.data() + received, 1, deadline, nullptr);
      if (!s.is_ok()) break;
      ++received;
    }
    CHECK(!s.is_ok());
    CHECK(s.code() == ncclRemoteError);
    CHECK(received < data.size());
    CHECK(std::all_of(got.begin(), got.begin() + long(received), [](char c) { return c == 'x'; }));
    INFO(s.to_string());
    CHECK(s.to_string().find("TLS") != std::string::npos);
    CHECK(tls_last_failure().find("TLS receive") != std::string::npos);
  }
  ::close(listen_fd);
}

// A process that closes a connection and exits at once: on plain TCP the
// kernel still delivers what was written.  Over TLS the relay thread holds
// the unsent tail and dies with the process, unless tls_close waits for it.
// The reader starts late, so the TCP buffers are full and the relay is still
// holding data when the writer is done writing.  (Not for TSan: the writer is
// a child forked from a process with threads, and it starts its own relay.)
TEST_CASE("TLS: what a process wrote before tls_close and _exit arrives", "[tls]") {
  TlsOn on;
  int listen_fd = -1;
  SockAddr server;
  REQUIRE(listen_tcp(loopback(), &listen_fd, &server).is_ok());
  std::vector<char> data(16 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 13 + 5);
  std::fflush(nullptr);
  const pid_t writer = ::fork();
  REQUIRE(writer >= 0);
  if (writer == 0) {
    alarm(60);
    int fd = -1;
    const auto deadline = Deadline::after(std::chrono::seconds(30));
    if (!connect_tcp(server, deadline, nullptr, &fd).is_ok() || !tls_secure(&fd, TlsRole::Client).is_ok()) _exit(2);
    if (!send_all(fd, data.data(), data.size(), deadline, nullptr).is_ok()) _exit(3);
    tls_close({&fd, 1}, deadline);
    _exit(0);
  }
  REQUIRE(wait_readable(listen_fd, Deadline::after(std::chrono::seconds(20)), nullptr));
  int fd = ::accept(listen_fd, nullptr, nullptr);
  REQUIRE(fd >= 0);
  REQUIRE(tls_secure(&fd, TlsRole::Server).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writer fills every buffer meanwhile
  // Whatever arrives, until the stream ends (or stalls for 30 s): a short count is the failure.
  std::vector<char> got(data.size());
  size_t received = 0;
  while (received < got.size() && wait_readable(fd, Deadline::after(std::chrono::seconds(30)), nullptr)) {
    const ssize_t r = ::recv(fd, got.data() + received, got.size() - received, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) break;
    if (r > 0) received += size_t(r);
  }
  CHECK(received == data.size());
  CHECK(std::equal(got.begin(), got.begin() + long(received), data.begin()));
  char byte;
  CHECK(recv_all(fd, &byte, 1, Deadline::after(std::chrono::seconds(10)), nullptr).code() == ncclRemoteError);
  int status = 0;
  REQUIRE(::waitpid(writer, &status, 0) == writer);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  tls_close({&fd, 1}, Deadline::after(std::chrono::seconds(10)));
  ::close(listen_fd);
}

TEST_CASE("TLS: a key under 32 bytes is refused, off leaves sockets alone", "[tls]") {
  CHECK(tls_configure("short").code() == ncclInvalidArgument);
  CHECK(!tls_enabled());
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  int fd = fds[0];
  CHECK(tls_secure(&fd, TlsRole::Client).is_ok());
  CHECK(fd == fds[0]);
  ::close(fds[0]);
  ::close(fds[1]);
}

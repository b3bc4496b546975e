// IPv4 and IPv6 socket addresses (src/base/sock_addr.h): the endpoint forms
// NCCL_COMM_ID takes, their text back, and the subnet test.
#include <arpa/inet.h>
#include <net/if.h>

#include <catch2/catch.hpp>

#include "src/base/net.h"
#include "src/base/sock_addr.h"

using namespace braid;

namespace {

std::string parsed(const std::string& text) {
  SockAddr a;
  Status s = parse_endpoint(text, &a);
  return s.is_ok() ? to_string(a) : "error: " + s.message();
}

SockAddr ip(const char* text) {
  SockAddr a;
  REQUIRE(parse_ip(text, &a).is_ok());
  return a;
}

}  // namespace

TEST_CASE("endpoints: IPv4, [IPv6], [IPv6%interface] and host names, as NCCL_COMM_ID", "[net]") {
  CHECK(parsed("10.1.2.3:5000") == "10.1.2.3:5000");
  CHECK(parsed("[fd00::1]:5000") == "[fd00::1]:5000");
  CHECK(parsed("[::1]:65535") == "[::1]:65535");
  CHECK(parsed("[::ffff:10.1.2.3]:80") == "[::ffff:10.1.2.3]:80");
  // Link-local: the scope is an interface of this host; "lo" is on every one.
  SockAddr a;
  REQUIRE(parse_endpoint("[fe80::1%lo]:7", &a).is_ok());
  CHECK(a.v6.sin6_scope_id == if_nametoindex("lo"));
  CHECK(a.is_link_local());
  CHECK(to_string(a) == "[fe80::1%lo]:7");
  // A host name resolves (localhost: to 127.0.0.1 or ::1, as /etc/hosts lists it first).
  const std::string local = parsed("localhost:29500");
  CHECK((local == "127.0.0.1:29500" || local == "[::1]:29500"));
  REQUIRE(parse_endpoint("10.1.2.3:5000", &a).is_ok());
  CHECK(a.family() == AF_INET);
  CHECK(a.port() == 5000);
  CHECK(a.length() == sizeof(sockaddr_in));
  REQUIRE(parse_endpoint("[fd00::1]:5000", &a).is_ok());
  CHECK(a.length() == sizeof(sockaddr_in6));
  CHECK(a.with_port(0).port() == 0);
  CHECK(to_string(a.with_port(1)) == "[fd00::1]:1");
}

TEST_CASE("endpoints: what is not one is refused, saying which part", "[net]") {
  CHECK(parsed("").find("no host:port") != std::string::npos);
  CHECK(parsed("10.1.2.3").find("no host:port") != std::string::npos);
  CHECK(parsed(":5000").find("no host:port") != std::string::npos);
  CHECK(parsed("10.1.2.3:").find("the port is not a number in 1..65535") != std::string::npos);
  CHECK(parsed("10.1.2.3:0").find("1..65535") != std::string::npos);
  CHECK(parsed("10.1.2.3:65536").find("1..65535") != std::string::npos);
  CHECK(parsed("10.1.2.3:50x").find("1..65535") != std::string::npos);
  CHECK(parsed("10.1.2.3:-1").find("1..65535") != std::string::npos);
  CHECK(parsed("fd00::1:5000").find("an IPv6 address needs brackets") != std::string::npos);
  CHECK(parsed("[fd00::1]").find("no ':port' after ']'") != std::string::npos);
  CHECK(parsed("[fd00::1:5000").find("no ']'") != std::string::npos);
  CHECK(parsed("[fd00::1]5000").find("no ':port' after ']'") != std::string::npos);
  CHECK(parsed("[10.1.2.3]:5000").find("not an IPv6 address") != std::string::npos);
  CHECK(parsed("[fe80::1%no-such-if0]:5000").find("no interface of that name") != std::string::npos);
  CHECK(parsed("no-such-host.invalid:5000").find("cannot resolve no-such-host.invalid") != std::string::npos);
  // Every refusal says which forms are taken.
  CHECK(parsed("10.1.2.3").find("[ipv6]:port") != std::string::npos);
  SockAddr a;
  CHECK(parse_endpoint("x", &a).code() == ncclInvalidArgument);
  CHECK(parse_ip("10.1.2.3:80", &a).code() == ncclInvalidArgument);
  CHECK(parse_ip("[::1]", &a).code() == ncclInvalidArgument);
}

TEST_CASE("addresses: loopback, link-local, subnets of both families", "[net]") {
  CHECK(ip("127.0.0.5").is_loopback());
  CHECK(ip("::1").is_loopback());
  CHECK_FALSE(ip("10.0.0.1").is_loopback());
  CHECK_FALSE(ip("fd00::1").is_loopback());
  CHECK(SockAddr::loopback(AF_INET6).ip() == "::1");
  CHECK(SockAddr::loopback(AF_INET).ip() == "127.0.0.1");
  CHECK(ip("fe80::abcd").is_link_local());
  CHECK_FALSE(ip("fd00::1").is_link_local());
  CHECK(SockAddr{}.family() == 0);
  CHECK_FALSE(SockAddr{}.is_ip());

  CHECK(same_subnet(ip("10.1.0.7"), ip("10.1.200.1"), ip("255.255.0.0")));
  CHECK_FALSE(same_subnet(ip("10.1.0.7"), ip("10.2.0.1"), ip("255.255.0.0")));
  CHECK_FALSE(same_subnet(ip("10.1.0.7"), ip("10.1.0.8"), ip("0.0.0.0")));  // no mask: no subnet
  const SockAddr m64 = ip("ffff:ffff:ffff:ffff::");
  CHECK(same_subnet(ip("fd00:1::7"), ip("fd00:1::abcd:1"), m64));
  CHECK_FALSE(same_subnet(ip("fd00:1::7"), ip("fd00:2::7"), m64));
  // A /65: the first bit of the fifth group counts, the second does not.
  CHECK_FALSE(same_subnet(ip("fd00:1::7"), ip("fd00:1:0:0:8000::"), ip("ffff:ffff:ffff:ffff:8000::")));
  CHECK(same_subnet(ip("fd00:1::7"), ip("fd00:1:0:0:4000::"), ip("ffff:ffff:ffff:ffff:8000::")));
  CHECK_FALSE(same_subnet(ip("fd00:1::7"), ip("fd00:1::8"), ip("::")));
  CHECK_FALSE(same_subnet(ip("10.1.0.7"), ip("::ffff:10.1.0.7"), m64));  // families differ
}

TEST_CASE("TCP over IPv6 loopback: listen, connect, bytes both ways", "[net]") {
  int listen_fd = -1;
  SockAddr bound;
  REQUIRE(listen_tcp(SockAddr::loopback(AF_INET6), &listen_fd, &bound).is_ok());
  CHECK(bound.family() == AF_INET6);
  CHECK(bound.port() != 0);
  int client = -1;
  REQUIRE(connect_tcp(bound, Deadline::after(std::chrono::seconds(5)), nullptr, &client).is_ok());
  SockAddr from;
  socklen_t len = sizeof(from);
  const int server = ::accept(listen_fd, &from.sa, &len);
  REQUIRE(server >= 0);
  CHECK(from.ip() == "::1");
  const char hello[] = "over v6";
  char got[sizeof hello] = {};
  REQUIRE(send_all(client, hello, sizeof hello, Deadline::after(std::chrono::seconds(5)), nullptr).is_ok());
  REQUIRE(recv_all(server, got, sizeof got, Deadline::after(std::chrono::seconds(5)), nullptr).is_ok());
  CHECK(std::string(got) == hello);
  ::close(server);
  ::close(client);
  ::close(listen_fd);
  // A closed listener's address refuses at once.
  int fd = -1;
  CHECK(connect_tcp_to_listener(bound, Deadline::after(std::chrono::seconds(5)), nullptr, &fd).code() ==
        ncclRemoteError);
}

TEST_CASE("a refused connect is retried as NCCL_SOCKET_RETRY_CNT/_SLEEP_MSEC say, else until the deadline",
          "[net]") {
  int listen_fd = -1;
  SockAddr closed;
  REQUIRE(listen_tcp(SockAddr::loopback(AF_INET), &listen_fd, &closed).is_ok());
  ::close(listen_fd);  // its port now refuses
  using Clock = std::chrono::steady_clock;
  auto connect_as = [&](const ConnectRetries& retries, Deadline deadline, double* seconds) {
    int fd = -1;
    const auto start = Clock::now();
    Status s = connect_tcp_with(closed, deadline, nullptr, retries, &fd);
    *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK(fd == -1);
    return s;
  };
  double took = 0;
  const Status counted = connect_as({true, 3, 20}, Deadline::after(std::chrono::seconds(60)), &took);
  CHECK(counted.code() == ncclRemoteError);
  CHECK_THAT(counted.message(), Catch::Contains("still after 3 retries (NCCL_SOCKET_RETRY_CNT=3, "
                                               "NCCL_SOCKET_RETRY_SLEEP_MSEC=20)"));
  CHECK(took >= 0.120);  // slept 20, 40 and 60 ms, as NCCL
  CHECK(took < 30);      // and stopped: the deadline was a minute away
  const Status no_retry = connect_as({true, 0, 1000}, Deadline::after(std::chrono::seconds(60)), &took);
  CHECK(no_retry.code() == ncclRemoteError);
  CHECK(took < 0.9);  // failed at the first refusal, no sleep
  // A count that outlasts the deadline: the deadline ends it.
  const Status late = connect_as({true, 1000, 50}, Deadline::after(std::chrono::milliseconds(300)), &took);
  CHECK(late.code() == ncclTimeout);
  // Unset: braid's own, until the deadline.
  const Status until = connect_as({}, Deadline::after(std::chrono::milliseconds(300)), &took);
  CHECK(until.code() == ncclTimeout);
  CHECK_THAT(until.message(), Catch::Contains("until the timeout (BRAID_TIMEOUT)"));
  CHECK(took >= 0.3);
}

// An IPv4 or IPv6 socket address, and the text forms braid reads and writes.
//
// Fixed-size (28 bytes, NCCL's ncclSocketAddress) and trivially copyable, so
// it travels as is in the unique id, the bootstrap's tables and net handles.
// Every rank of a job runs the same braid, so the bytes mean the same thing
// on both ends.
//
// Text forms, as NCCL's NCCL_COMM_ID takes them:
//   "10.0.0.1:5000", "node7:5000" (a host name, resolved once),
//   "[fd00::1]:5000", "[fe80::1%eth0]:5000" (link-local: the scope is this
//   host's interface).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "src/base/status.h"

namespace braid {

struct SockAddr {
  union {
    sockaddr_in6 v6{};  // first, so that {} zeroes all 28 bytes
    sockaddr_in v4;
    sockaddr sa;
  };

  // Copies an AF_INET or AF_INET6 address; anything else gives family 0.
  static SockAddr from(const sockaddr* addr);
  static SockAddr loopback(int family);  // 127.0.0.1 or ::1, port 0

  int family() const { return sa.sa_family; }
  bool is_ip() const { return family() == AF_INET || family() == AF_INET6; }
  socklen_t length() const { return family() == AF_INET6 ? sizeof(v6) : sizeof(v4); }
  uint16_t port() const;
  SockAddr with_port(uint16_t port) const;
  bool is_loopback() const;    // 127/8 or ::1
  bool is_link_local() const;  // fe80::/10: meaningful only with this host's scope id
  std::string ip() const;      // "10.0.0.1", "fd00::1"
};
static_assert(sizeof(SockAddr) == sizeof(sockaddr_in6));

std::string to_string(const SockAddr& addr);  // "10.0.0.1:5000", "[fd00::1]:5000"

// An endpoint in one of the text forms above; a bad one is
// ncclInvalidArgument saying which form was expected.
Status parse_endpoint(const std::string& text, SockAddr* out);
// A numeric IPv4 or IPv6 address without port ("10.0.0.1", "fd00::1").
Status parse_ip(const std::string& text, SockAddr* out);

// Whether `a` and `b` share the subnet of `mask` (same family only).
bool same_subnet(const SockAddr& a, const SockAddr& b, const SockAddr& mask);

// A TCP socket of the address's family; -1 with errno on failure.
int tcp_socket_for(const SockAddr& addr, int flags = 0);

}  // namespace braid

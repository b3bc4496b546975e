#include "src/base/sock_addr.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>

#include <cstdlib>
#include <cstring>

namespace braid {
namespace {

Status bad_endpoint(const std::string& text, const char* why) {
  return BRAID_ERROR(ncclInvalidArgument,
                     "'{}' is not an endpoint: {} (expected ip:port, host:port, [ipv6]:port or [ipv6%if]:port)",
                     text, why);
}

// A decimal port in 1..65535, else 0.
uint16_t parse_port(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 5) return 0;
  const long p = std::strtol(text.c_str(), nullptr, 10);
  return p > 0 && p <= 65535 ? uint16_t(p) : 0;
}

// "[addr]:port" or "[addr%if]:port".
Status parse_bracketed(const std::string& text, SockAddr* out) {
  const size_t close = text.find(']');
  if (close == std::string::npos) return bad_endpoint(text, "no ']'");
  if (close + 1 >= text.size() || text[close + 1] != ':') return bad_endpoint(text, "no ':port' after ']'");
  const uint16_t port = parse_port(text.substr(close + 2));
  if (port == 0) return bad_endpoint(text, "the port is not a number in 1..65535");
  std::string ip = text.substr(1, close - 1), scope;
  if (const size_t pct = ip.find('%'); pct != std::string::npos) scope = ip.substr(pct + 1), ip.resize(pct);
  SockAddr a;
  a.v6.sin6_family = AF_INET6;
  if (inet_pton(AF_INET6, ip.c_str(), &a.v6.sin6_addr) != 1) return bad_endpoint(text, "not an IPv6 address");
  if (!scope.empty()) {
    a.v6.sin6_scope_id = if_nametoindex(scope.c_str());
    if (a.v6.sin6_scope_id == 0) return bad_endpoint(text, "no interface of that name on this host");
  }
  *out = a.with_port(port);
  return Status::ok();
}

}  // namespace

SockAddr SockAddr::from(const sockaddr* addr) {
  SockAddr a;
  if (addr && addr->sa_family == AF_INET) std::memcpy(&a.v4, addr, sizeof(a.v4));
  if (addr && addr->sa_family == AF_INET6) std::memcpy(&a.v6, addr, sizeof(a.v6));
  return a;
}

SockAddr SockAddr::loopback(int family) {
  SockAddr a;
  if (family == AF_INET6) {
    a.v6.sin6_family = AF_INET6;
    a.v6.sin6_addr = in6addr_loopback;
  } else {
    a.v4.sin_family = AF_INET;
    a.v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  return a;
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET6) return ntohs(v6.sin6_port);
  return family() == AF_INET ? ntohs(v4.sin_port) : 0;
}

SockAddr SockAddr::with_port(uint16_t port) const {
  SockAddr a = *this;
  if (family() == AF_INET6) a.v6.sin6_port = htons(port);
  if (family() == AF_INET) a.v4.sin_port = htons(port);
  return a;
}

bool SockAddr::is_loopback() const {
  if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&v6.sin6_addr);
  return family() == AF_INET && (ntohl(v4.sin_addr.s_addr) >> 24) == 127;
}

bool SockAddr::is_link_local() const { return family() == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&v6.sin6_addr); }

std::string SockAddr::ip() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET6) inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
  else if (family() == AF_INET) inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
  else return "(no address)";
  return text;
}

std::string to_string(const SockAddr& addr) {
  if (addr.family() != AF_INET6) return fmt::format("{}:{}", addr.ip(), addr.port());
  char scope[IF_NAMESIZE] = {};
  const bool scoped = addr.v6.sin6_scope_id != 0 && if_indextoname(addr.v6.sin6_scope_id, scope);
  return fmt::format("[{}{}{}]:{}", addr.ip(), scoped ? "%" : "", scoped ? scope : "", addr.port());
}

Status parse_endpoint(const std::string& text, SockAddr* out) {
  if (!text.empty() && text.front() == '[') return parse_bracketed(text, out);
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad_endpoint(text, "no host:port");
  const std::string host = text.substr(0, colon);
  if (host.find(':') != std::string::npos) return bad_endpoint(text, "an IPv6 address needs brackets");
  const uint16_t port = parse_port(text.substr(colon + 1));
  if (port == 0) return bad_endpoint(text, "the port is not a number in 1..65535");
  SockAddr a;
  if (inet_pton(AF_INET, host.c_str(), &a.v4.sin_addr) == 1) {
    a.v4.sin_family = AF_INET;
    *out = a.with_port(port);
    return Status::ok();
  }
  // A host name: its first address, as NCCL takes it.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0 || !found)
    return BRAID_ERROR(ncclInvalidArgument, "'{}': cannot resolve {}: {}", text, host,
                       rc ? gai_strerror(rc) : "no address");
  a = SockAddr::from(found->ai_addr);
  freeaddrinfo(found);
  if (!a.is_ip()) return bad_endpoint(text, "the host name resolves to neither IPv4 nor IPv6");
  if (a.family() == AF_INET6) a.v6.sin6_flowinfo = 0;
  *out = a.with_port(port);
  return Status::ok();
}

Status parse_ip(const std::string& text, SockAddr* out) {
  SockAddr a;
  if (inet_pton(AF_INET, text.c_str(), &a.v4.sin_addr) == 1) {
    a.v4.sin_family = AF_INET;
  } else if (inet_pton(AF_INET6, text.c_str(), &a.v6.sin6_addr) == 1) {
    a.v6.sin6_family = AF_INET6;
  } else {
    return BRAID_ERROR(ncclInvalidArgument, "'{}' is not a numeric IPv4 or IPv6 address", text);
  }
  *out = a;
  return Status::ok();
}

bool same_subnet(const SockAddr& a, const SockAddr& b, const SockAddr& mask) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET) {
    const uint32_t m = mask.v4.sin_addr.s_addr;
    return m != 0 && (a.v4.sin_addr.s_addr & m) == (b.v4.sin_addr.s_addr & m);
  }
  if (a.family() != AF_INET6 || a.v6.sin6_scope_id != b.v6.sin6_scope_id) return false;
  bool any_bit = false;
  for (int i = 0; i < 16; ++i) {
    const uint8_t m = mask.v6.sin6_addr.s6_addr[i];
    any_bit |= m != 0;
    if ((a.v6.sin6_addr.s6_addr[i] & m) != (b.v6.sin6_addr.s6_addr[i] & m)) return false;
  }
  return any_bit;
}

int tcp_socket_for(const SockAddr& addr, int flags) {
  return ::socket(addr.family() == AF_INET6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
}

}  // namespace braid

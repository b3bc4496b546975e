#include "src/base/net_interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <functional>

namespace braid {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Bridges whose address is the same on every host: never reachable from a peer.
bool is_local_bridge(const NetInterface& i) { return starts_with(i.name, "docker") || starts_with(i.name, "virbr"); }

bool same_subnet(const NetInterface& i, in_addr other) {
  return i.netmask.s_addr != 0 && (i.addr.s_addr & i.netmask.s_addr) == (other.s_addr & i.netmask.s_addr);
}

std::string describe(const std::vector<NetInterface>& up) {
  std::string s;
  for (const NetInterface& i : up) {
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &i.addr, ip, sizeof(ip));
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", i.name, ip);
  }
  return s.empty() ? "none" : s;
}

NetInterface loopback_fallback() {
  NetInterface lo;
  lo.name = "lo";
  lo.addr.s_addr = htonl(INADDR_LOOPBACK);
  lo.netmask.s_addr = htonl(0xff000000u);
  lo.loopback = true;
  return lo;
}

}  // namespace

bool InterfaceFilter::passes(const std::string& name) const {
  if (names.empty()) return true;
  const bool listed = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
    return exact ? name == n : starts_with(name, n.c_str());
  });
  return listed != exclude;
}

InterfaceFilter parse_interface_filter(const std::string& spec) {
  InterfaceFilter f;
  size_t pos = 0;
  if (pos < spec.size() && spec[pos] == '^') f.exclude = true, ++pos;
  if (pos < spec.size() && spec[pos] == '=') f.exact = true, ++pos;
  while (pos <= spec.size()) {
    size_t end = std::min(spec.find(',', pos), spec.size());
    std::string name = spec.substr(pos, end - pos);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (!name.empty()) f.names.push_back(name);
    pos = end + 1;
  }
  return f;
}

Status choose_interface(const std::vector<NetInterface>& up, const std::string& spec_name, const std::string& spec,
                        const in_addr* toward, NetInterface* out) {
  // The first interface of `up` that `want` accepts.
  auto first = [&](const std::function<bool(const NetInterface&)>& want) {
    for (const NetInterface& i : up)
      if (want(i)) {
        *out = i;
        return true;
      }
    return false;
  };
  if (!spec.empty()) {
    const InterfaceFilter filter = parse_interface_filter(spec);
    if (filter.names.empty())
      return BRAID_ERROR(ncclInvalidUsage, "{}='{}' names no interface (expected e.g. eth0, ^docker or =ib0,ib1)",
                         spec_name, spec);
    // Loopback only where nothing else passes: "^docker" should not pick lo.
    if (first([&](const NetInterface& i) { return filter.passes(i.name) && !i.loopback; })) return Status::ok();
    if (first([&](const NetInterface& i) { return filter.passes(i.name); })) return Status::ok();
    return BRAID_ERROR(ncclInvalidUsage, "{}={} matches no IPv4 interface that is up (up: {})", spec_name, spec,
                       describe(up));
  }
  const bool toward_remote = toward && (ntohl(toward->s_addr) >> 24) != 127;
  if (toward_remote && first([&](const NetInterface& i) { return !i.loopback && same_subnet(i, *toward); }))
    return Status::ok();
  if (first([](const NetInterface& i) { return !i.loopback && starts_with(i.name, "ib"); })) return Status::ok();
  if (first([](const NetInterface& i) { return !i.loopback && !is_local_bridge(i); })) return Status::ok();
  if (first([](const NetInterface& i) { return !i.loopback; })) return Status::ok();
  if (first([](const NetInterface& i) { return i.loopback; })) return Status::ok();
  *out = loopback_fallback();
  return Status::ok();
}

std::vector<NetInterface> up_ipv4_interfaces() {
  std::vector<NetInterface> up;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return up;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    NetInterface n;
    n.name = i->ifa_name ? i->ifa_name : "";
    n.addr = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    if (i->ifa_netmask) n.netmask = reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr;
    n.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    up.push_back(n);
  }
  freeifaddrs(list);
  return up;
}

}  // namespace braid

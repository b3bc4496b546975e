#include "src/base/net_interface.h"

#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <functional>

namespace braid {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Bridges whose address is the same on every host: never reachable from a peer.
bool is_local_bridge(const NetInterface& i) { return starts_with(i.name, "docker") || starts_with(i.name, "virbr"); }

std::string describe(const std::vector<NetInterface>& up) {
  std::string s;
  for (const NetInterface& i : up) {
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", i.name, i.addr.ip());
  }
  return s.empty() ? "none" : s;
}

NetInterface loopback_fallback(int family) {
  NetInterface lo;
  lo.name = "lo";
  lo.addr = SockAddr::loopback(family);
  lo.loopback = true;
  return lo;
}

const char* family_name(int family) {
  return family == AF_INET ? " IPv4" : family == AF_INET6 ? " IPv6" : "";
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
                        int family, const SockAddr* toward, NetInterface* out) {
  // The first address of `up` of the family that `want` accepts.
  auto first = [&](const std::function<bool(const NetInterface&)>& want) {
    for (const NetInterface& i : up)
      if ((family == AF_UNSPEC || i.addr.family() == family) && want(i)) {
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
    return BRAID_ERROR(ncclInvalidUsage, "{}={} matches no{} interface that is up (up: {})", spec_name, spec,
                       family_name(family), describe(up));
  }
  const bool toward_remote = toward && !toward->is_loopback();
  if (toward_remote &&
      first([&](const NetInterface& i) { return !i.loopback && same_subnet(i.addr, *toward, i.netmask); }))
    return Status::ok();
  if (first([](const NetInterface& i) { return !i.loopback && starts_with(i.name, "ib"); })) return Status::ok();
  if (first([](const NetInterface& i) { return !i.loopback && !is_local_bridge(i); })) return Status::ok();
  if (first([](const NetInterface& i) { return !i.loopback; })) return Status::ok();
  if (first([](const NetInterface& i) { return i.loopback; })) return Status::ok();
  *out = loopback_fallback(family);
  return Status::ok();
}

std::vector<NetInterface> data_interfaces(const std::vector<NetInterface>& up, const InterfaceFilter& filter,
                                          const SockAddr& chosen, size_t most) {
  std::vector<NetInterface> out;
  for (const NetInterface& i : up)
    if (i.addr.ip() == chosen.ip()) {
      out.push_back(i);
      break;
    }
  if (out.empty()) {  // an address set by hand (BRAID_SOCKET_ADDR): that alone
    NetInterface given;
    given.addr = chosen.with_port(0);
    return {given};
  }
  for (const NetInterface& i : up) {
    if (out.size() >= most) break;
    const bool named = std::any_of(out.begin(), out.end(), [&](const NetInterface& o) { return o.name == i.name; });
    // Not a local bridge (its address repeats on every host: a peer would dial its own).
    if (!named && i.addr.family() == chosen.family() && filter.passes(i.name) && (!i.loopback || out[0].loopback) &&
        !is_local_bridge(i))
      out.push_back(i);
  }
  return out;
}

std::vector<NetInterface> up_interfaces() {
  std::vector<NetInterface> up;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return up;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!(i->ifa_flags & IFF_UP)) continue;
    NetInterface n;
    n.addr = SockAddr::from(i->ifa_addr);
    if (!n.addr.is_ip() || n.addr.is_link_local()) continue;
    n.name = i->ifa_name ? i->ifa_name : "";
    n.netmask = SockAddr::from(i->ifa_netmask);
    n.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    up.push_back(n);
  }
  freeifaddrs(list);
  return up;
}

}  // namespace braid

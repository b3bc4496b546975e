// Which interface the sockets use (src/base/net_interface.h): NCCL's
// NCCL_SOCKET_IFNAME syntax, the default order, and the errors, on made-up
// interface lists, IPv4 and IPv6; then local_address with the variables set,
// on this machine.
#include <catch2/catch.hpp>

#include "scoped_env.h"
#include "src/base/net.h"
#include "src/base/net_interface.h"

using namespace braid;

namespace {

SockAddr ip(const char* text) {
  SockAddr a;
  REQUIRE(parse_ip(text, &a).is_ok());
  return a;
}

NetInterface iface(const char* name, const char* addr, const char* mask = "255.255.0.0") {
  NetInterface i;
  i.name = name;
  i.addr = ip(addr);
  i.netmask = ip(mask);
  i.loopback = std::string(name) == "lo";
  return i;
}

// The name choose_interface picks (or "error: <message>").
std::string pick(const std::vector<NetInterface>& up, const std::string& spec, const char* toward = nullptr,
                 int family = AF_UNSPEC) {
  SockAddr t;
  if (toward) t = ip(toward);
  NetInterface out;
  Status s = choose_interface(up, "NCCL_SOCKET_IFNAME", spec, family, toward ? &t : nullptr, &out);
  return s.is_ok() ? out.name : "error: " + s.message();
}

// The address it picks.
std::string pick_ip(const std::vector<NetInterface>& up, const std::string& spec, int family,
                    const char* toward = nullptr) {
  SockAddr t;
  if (toward) t = ip(toward);
  NetInterface out;
  Status s = choose_interface(up, "NCCL_SOCKET_IFNAME", spec, family, toward ? &t : nullptr, &out);
  return s.is_ok() ? out.addr.ip() : "error: " + s.message();
}

// A typical GPU node: loopback first, docker's and libvirt's bridges (the
// same address on every host), a management NIC and the fast network.
std::vector<NetInterface> node() {
  return {iface("lo", "127.0.0.1", "255.0.0.0"), iface("docker0", "172.17.0.1"),
          iface("virbr0", "192.168.122.1", "255.255.255.0"), iface("eno1", "10.1.0.7"), iface("ens2f0", "10.2.0.7")};
}

}  // namespace

TEST_CASE("interface filter: NCCL's prefix, exact and exclude syntax", "[net]") {
  InterfaceFilter f = parse_interface_filter("eth,enp");
  CHECK(f.names == std::vector<std::string>{"eth", "enp"});
  CHECK_FALSE(f.exclude);
  CHECK_FALSE(f.exact);
  CHECK(f.passes("eth0"));
  CHECK(f.passes("enp1s0"));
  CHECK_FALSE(f.passes("ib0"));

  f = parse_interface_filter("=eth0");
  CHECK(f.exact);
  CHECK(f.passes("eth0"));
  CHECK_FALSE(f.passes("eth01"));

  f = parse_interface_filter("^docker,lo");
  CHECK(f.exclude);
  CHECK_FALSE(f.passes("docker0"));
  CHECK_FALSE(f.passes("lo"));
  CHECK(f.passes("eth0"));

  f = parse_interface_filter("^=eth1");
  CHECK((f.exclude && f.exact));
  CHECK_FALSE(f.passes("eth1"));
  CHECK(f.passes("eth10"));

  // Blanks around names and empty entries are dropped; nothing names nothing.
  CHECK(parse_interface_filter(" eth0 ,,ib0").names == std::vector<std::string>{"eth0", "ib0"});
  CHECK(parse_interface_filter("^").names.empty());
  CHECK(parse_interface_filter("").passes("anything"));
}

TEST_CASE("interface choice: the variable picks the first match in the kernel's order", "[net]") {
  const std::vector<NetInterface> up = node();
  CHECK(pick(up, "ens") == "ens2f0");
  CHECK(pick(up, "e") == "eno1");  // two match: the first listed
  CHECK(pick(up, "=ens2f0") == "ens2f0");
  CHECK(pick(up, "^docker,lo,virbr,eno") == "ens2f0");
  CHECK(pick(up, "docker") == "docker0");  // asked for, so given
  // An exclusion that leaves loopback and a NIC takes the NIC, though lo comes first.
  CHECK(pick(up, "^docker") == "virbr0");
  CHECK(pick(up, "^docker,virbr") == "eno1");
  CHECK(pick(up, "lo") == "lo");
  CHECK(pick({iface("lo", "127.0.0.1", "255.0.0.0")}, "^docker") == "lo");
}

TEST_CASE("interface choice: a variable matching nothing is an error naming what is up", "[net]") {
  const std::vector<NetInterface> up = node();
  const std::string e = pick(up, "eth");
  CHECK(e.rfind("error: ", 0) == 0);
  CHECK(e.find("NCCL_SOCKET_IFNAME=eth matches no interface that is up") != std::string::npos);
  CHECK(e.find("eno1 10.1.0.7") != std::string::npos);
  CHECK(pick(up, "=eno").rfind("error: ", 0) == 0);  // exact: eno is not eno1
  CHECK(pick(up, " , ").find("names no interface") != std::string::npos);
  CHECK(pick({}, "eth0").find("(up: none)") != std::string::npos);
}

TEST_CASE("interface choice by default: root's subnet, then InfiniBand, then not a bridge or loopback", "[net]") {
  const std::vector<NetInterface> up = node();
  // Without a root address: the first NIC that is not a bridge or loopback.
  CHECK(pick(up, "") == "eno1");
  // The root on the fast network: the interface on its subnet.
  CHECK(pick(up, "", "10.2.3.4") == "ens2f0");
  CHECK(pick(up, "", "10.1.200.1") == "eno1");
  // A root on no local subnet, or on loopback: the usual order.
  CHECK(pick(up, "", "10.9.0.1") == "eno1");
  CHECK(pick(up, "", "127.0.0.1") == "eno1");
  // A root named on the docker bridge's subnet (NCCL_COMM_ID) is taken at its word.
  CHECK(pick(up, "", "172.17.0.1") == "docker0");
  // IPoIB before Ethernet.
  std::vector<NetInterface> ib = up;
  ib.push_back(iface("ib0", "10.3.0.7"));
  CHECK(pick(ib, "") == "ib0");
  CHECK(pick(ib, "", "10.2.0.1") == "ens2f0");  // the root's subnet still first
  // Only bridges and loopback: a bridge; only loopback, or nothing: loopback.
  CHECK(pick({up[0], up[1]}, "") == "docker0");
  CHECK(pick({up[0]}, "") == "lo");
  NetInterface out;
  REQUIRE(choose_interface({}, "", "", AF_UNSPEC, nullptr, &out).is_ok());
  CHECK(out.name == "lo");
  CHECK(out.addr.ip() == "127.0.0.1");
  // A NIC without a netmask matches no subnet.
  std::vector<NetInterface> nomask = {iface("eth0", "10.1.0.7", "0.0.0.0"), iface("eth1", "10.1.0.8")};
  CHECK(pick(nomask, "", "10.1.0.1") == "eth1");
}

// A dual-stack node as getifaddrs lists it: every IPv4 address, then the
// IPv6 ones (link-local ones are dropped before choose_interface sees them).
std::vector<NetInterface> dual_stack() {
  std::vector<NetInterface> up = node();
  for (auto [name, addr, mask] : {std::tuple{"lo", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
                                  {"eno1", "fd00:1::7", "ffff:ffff:ffff:ffff::"},
                                  {"ens2f0", "fd00:2::7", "ffff:ffff:ffff:ffff::"}})
    up.push_back(iface(name, addr, mask));
  return up;
}

TEST_CASE("interface choice: NCCL_SOCKET_FAMILY, and an IPv6 root brings its family", "[net]") {
  const std::vector<NetInterface> up = dual_stack();
  // No family asked: IPv4 first, the kernel's order, as NCCL.
  CHECK(pick_ip(up, "", AF_UNSPEC) == "10.1.0.7");
  CHECK(pick_ip(up, "ens", AF_UNSPEC) == "10.2.0.7");
  CHECK(pick_ip(up, "", AF_INET) == "10.1.0.7");
  // AF_INET6: the same steps over the IPv6 addresses.
  CHECK(pick_ip(up, "", AF_INET6) == "fd00:1::7");
  CHECK(pick_ip(up, "ens", AF_INET6) == "fd00:2::7");
  CHECK(pick_ip(up, "", AF_INET6, "fd00:2::1") == "fd00:2::7");  // the root's /64
  CHECK(pick_ip(up, "", AF_INET6, "fd00:9::1") == "fd00:1::7");  // on no local subnet
  CHECK(pick_ip(up, "", AF_INET6, "::1") == "fd00:1::7");        // root on loopback: the usual order
  // Loopback as the last resort, as for IPv4; none at all: ::1.
  CHECK(pick_ip(up, "lo", AF_INET6) == "::1");
  CHECK(pick_ip({up[0]}, "", AF_INET6) == "::1");
  // IPv4 only, and IPv6 asked for: the filter's error names the family.
  const std::string e = pick_ip(node(), "eno", AF_INET6);
  CHECK(e.find("NCCL_SOCKET_IFNAME=eno matches no IPv6 interface that is up") != std::string::npos);
  // An IPv4 root's subnet is no IPv6 interface's.
  CHECK(pick_ip(up, "", AF_INET6, "10.2.3.4") == "fd00:1::7");
}

TEST_CASE("local_address: BRAID_SOCKET_IFNAME over NCCL_SOCKET_IFNAME, BRAID_SOCKET_ADDR over both", "[net]") {
  SockAddr a;
  {
    ScopedEnv nccl("NCCL_SOCKET_IFNAME", "=no-such-interface0");
    Status s = local_address(&a);
    CHECK(s.code() == ncclInvalidUsage);
    CHECK(s.message().find("NCCL_SOCKET_IFNAME==no-such-interface0") != std::string::npos);
    // Loopback is up on every machine this runs on, with ::1 too.
    ScopedEnv braid("BRAID_SOCKET_IFNAME", "lo");
    REQUIRE(local_address(&a).is_ok());
    CHECK(a.ip() == "127.0.0.1");
    {
      ScopedEnv family("NCCL_SOCKET_FAMILY", "AF_INET6");
      REQUIRE(local_address(&a).is_ok());
      CHECK(a.ip() == "::1");
      CHECK(a.port() == 0);
    }
    {
      ScopedEnv family("NCCL_SOCKET_FAMILY", "inet6");  // not NCCL's spelling: ignored, as NCCL does
      REQUIRE(local_address(&a).is_ok());
      CHECK(a.ip() == "127.0.0.1");
    }
    const SockAddr root6 = ip("::1");
    REQUIRE(local_address(&a, &root6).is_ok());  // the root's family
    CHECK(a.ip() == "::1");
    ScopedEnv addr("BRAID_SOCKET_ADDR", "127.0.0.2");
    REQUIRE(local_address(&a).is_ok());
    CHECK(a.ip() == "127.0.0.2");
    ScopedEnv addr6("BRAID_SOCKET_ADDR", "::1");
    REQUIRE(local_address(&a).is_ok());
    CHECK(a.family() == AF_INET6);
    ScopedEnv bad("BRAID_SOCKET_ADDR", "127.0.0.2:80");
    s = local_address(&a);
    CHECK(s.code() == ncclInvalidArgument);
    CHECK(s.message().find("BRAID_SOCKET_ADDR") != std::string::npos);
  }
  REQUIRE(local_address(&a).is_ok());  // every variable unset again
}

TEST_CASE("data interfaces: the bootstrap's first, then every other the filter passes, one address each", "[net]") {
  const std::vector<NetInterface> up = {iface("lo", "127.0.0.1"),       iface("eth0", "192.168.1.5"),
                                        iface("rail0", "10.198.0.1"),   iface("rail1", "10.198.1.1"),
                                        iface("rail1", "10.198.9.1"),   iface("rail2", "fd98::1", "ffff::"),
                                        iface("virbr0", "192.168.122.1"), iface("rail3", "10.198.3.1")};
  auto names = [&](const char* spec, const char* chosen, size_t most = 8) {
    std::string out;
    for (const NetInterface& i : data_interfaces(up, parse_interface_filter(spec), ip(chosen), most)) {
      if (!out.empty()) out += ' ';
      out += i.name.empty() ? i.addr.ip() : i.name + "=" + i.addr.ip();
    }
    return out;
  };
  // rail1's second address and rail2 (IPv6) are left out.
  CHECK(names("rail", "10.198.1.1") == "rail1=10.198.1.1 rail0=10.198.0.1 rail3=10.198.3.1");
  CHECK(names("rail", "10.198.0.1", 2) == "rail0=10.198.0.1 rail1=10.198.1.1");
  CHECK(names("^eth", "10.198.0.1") == "rail0=10.198.0.1 rail1=10.198.1.1 rail3=10.198.3.1");  // not lo, virbr0
  CHECK(names("rail,virbr", "10.198.0.1") == "rail0=10.198.0.1 rail1=10.198.1.1 rail3=10.198.3.1");
  CHECK(names("virbr", "192.168.122.1") == "virbr0=192.168.122.1");  // chosen, it stays
  CHECK(names("=rail0", "10.198.0.1") == "rail0=10.198.0.1");
  CHECK(names("lo", "127.0.0.1") == "lo=127.0.0.1");
  CHECK(names("rail", "10.5.5.5") == "10.5.5.5");  // an address no interface has (BRAID_SOCKET_ADDR)
  // Where the variable is unset, or BRAID_SOCKET_ADDR is set: the bootstrap's address alone.
  CHECK(data_addresses(ip("127.0.0.1")).size() == 1);
  ScopedEnv braid("BRAID_SOCKET_IFNAME", "lo");
  CHECK(data_addresses(ip("127.0.0.1")).size() == 1);  // lo has one IPv4 address
  {
    ScopedEnv exclude("BRAID_SOCKET_IFNAME", "^docker");  // says what not to use: one interface
    const std::vector<SockAddr> one = data_addresses(ip("127.0.0.1"));
    REQUIRE(one.size() == 1);
    CHECK(one[0].ip() == "127.0.0.1");
  }
  ScopedEnv addr("BRAID_SOCKET_ADDR", "127.0.0.1");
  CHECK(data_addresses(ip("127.0.0.1")).size() == 1);
}

TEST_CASE("up_interfaces: this machine's addresses of both families, with netmasks, no link-local", "[net]") {
  const std::vector<NetInterface> up = up_interfaces();
  bool v4_lo = false, v6_lo = false;
  for (const NetInterface& i : up) {
    CHECK(i.addr.is_ip());
    CHECK_FALSE(i.addr.is_link_local());
    CHECK(i.netmask.family() == i.addr.family());
    v4_lo |= i.addr.ip() == "127.0.0.1";
    v6_lo |= i.addr.ip() == "::1";
  }
  CHECK(v4_lo);
  CHECK(v6_lo);  // braid's IPv6 tests run on ::1: a machine without it fails here first
}

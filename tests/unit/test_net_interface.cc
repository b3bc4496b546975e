// Which interface the sockets use (src/base/net_interface.h): NCCL's
// NCCL_SOCKET_IFNAME syntax, the default order, and the errors, on made-up
// interface lists; then local_ipv4 with the variables set, on this machine.
#include <arpa/inet.h>

#include <catch2/catch.hpp>

#include "scoped_env.h"
#include "src/base/net.h"
#include "src/base/net_interface.h"

using namespace braid;

namespace {

in_addr ip(const char* text) {
  in_addr a{};
  REQUIRE(inet_pton(AF_INET, text, &a) == 1);
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
std::string pick(const std::vector<NetInterface>& up, const std::string& spec, const char* toward = nullptr) {
  in_addr t{};
  if (toward) t = ip(toward);
  NetInterface out;
  Status s = choose_interface(up, "NCCL_SOCKET_IFNAME", spec, toward ? &t : nullptr, &out);
  return s.is_ok() ? out.name : "error: " + s.message();
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
  CHECK(e.find("NCCL_SOCKET_IFNAME=eth matches no IPv4 interface") != std::string::npos);
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
  REQUIRE(choose_interface({}, "", "", nullptr, &out).is_ok());
  CHECK(out.name == "lo");
  CHECK(out.addr.s_addr == htonl(INADDR_LOOPBACK));
  // A NIC without a netmask matches no subnet.
  std::vector<NetInterface> nomask = {iface("eth0", "10.1.0.7", "0.0.0.0"), iface("eth1", "10.1.0.8")};
  CHECK(pick(nomask, "", "10.1.0.1") == "eth1");
}

TEST_CASE("local_ipv4: BRAID_SOCKET_IFNAME over NCCL_SOCKET_IFNAME, BRAID_SOCKET_ADDR over both", "[net]") {
  in_addr a{};
  {
    ScopedEnv nccl("NCCL_SOCKET_IFNAME", "=no-such-interface0");
    Status s = local_ipv4(&a);
    CHECK(s.code() == ncclInvalidUsage);
    CHECK(s.message().find("NCCL_SOCKET_IFNAME==no-such-interface0") != std::string::npos);
    // Loopback is up on every machine this runs on.
    ScopedEnv braid("BRAID_SOCKET_IFNAME", "lo");
    REQUIRE(local_ipv4(&a).is_ok());
    CHECK(a.s_addr == htonl(INADDR_LOOPBACK));
    ScopedEnv addr("BRAID_SOCKET_ADDR", "127.0.0.2");
    REQUIRE(local_ipv4(&a).is_ok());
    CHECK(a.s_addr == ip("127.0.0.2").s_addr);
  }
  REQUIRE(local_ipv4(&a).is_ok());  // every variable unset again
}

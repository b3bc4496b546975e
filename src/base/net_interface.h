// Which interface and address braid's sockets use (the bootstrap and the TCP
// transport), IPv4 or IPv6.
//
// A host often has several: the network the ranks share, but also docker0
// or a libvirt bridge, whose addresses are the same on every host, so a rank
// that advertised one would send its peers to their own bridge.  The choice
// follows NCCL's, so a job that already sets NCCL_SOCKET_IFNAME behaves the same:
//
// - BRAID_SOCKET_IFNAME (else NCCL_SOCKET_IFNAME) filters by name, NCCL's
//   syntax: a comma-separated list of prefixes ("eth,enp"), "=" before the
//   list for exact names ("=eth0"), "^" before it to exclude instead
//   ("^docker,lo", "^=eth1").  The first interface (in the kernel's order)
//   that passes is used; none passing is an error naming the candidates.
// - Unset: an interface whose subnet holds the bootstrap root's address (so
//   the rank can reach the root, as NCCL does with NCCL_COMM_ID), else an
//   InfiniBand one ("ib..."), else any but docker, libvirt bridges and
//   loopback, else those, else 127.0.0.1.  (NCCL excludes docker and lo; braid
//   excludes virbr too, for the same reason.)
//
// The choice is a pure function of the interface list, so it is tested
// without the machine's interfaces (tests/unit/test_net_interface.cc).
#pragma once

#include <string>
#include <vector>

#include "src/base/sock_addr.h"
#include "src/base/status.h"

namespace braid {

struct NetInterface {
  std::string name;
  SockAddr addr;     // port 0
  SockAddr netmask;
  bool loopback = false;
};

// The parsed filter; an empty spec passes every interface.
struct InterfaceFilter {
  std::vector<std::string> names;
  bool exclude = false;  // "^": pass what matches none
  bool exact = false;    // "=": whole names, not prefixes
  bool passes(const std::string& name) const;
};
InterfaceFilter parse_interface_filter(const std::string& spec);

// Chooses among `up` (the addresses of interfaces that are up, in the
// kernel's order), keeping those of `family` unless it is AF_UNSPEC.
// `spec_name`/`spec` are the variable that set the filter, for the error
// message ("" when unset).  `toward`, if given and not loopback, is the
// bootstrap root's address.  Loopback only (or nothing) gives "lo" with
// 127.0.0.1, or ::1 for AF_INET6.
Status choose_interface(const std::vector<NetInterface>& up, const std::string& spec_name, const std::string& spec,
                        int family, const SockAddr* toward, NetInterface* out);

// The interfaces braid's TCP data connections listen on, where a filter
// (BRAID_/NCCL_SOCKET_IFNAME) names interfaces: the one at `chosen` (the
// bootstrap's) first, then every other interface of `up` the filter passes,
// of chosen's family, one address per interface, loopback only if chosen
// is, never a local bridge (docker*, virbr*), at most `most` in all.  A
// machine with a NIC per rail then spreads a rank's connections over its
// NICs (socket.cc), as NCCL's socket net spreads its channels over the
// interfaces the filter passes.
std::vector<NetInterface> data_interfaces(const std::vector<NetInterface>& up, const InterfaceFilter& filter,
                                          const SockAddr& chosen, size_t most);

// The machine's IPv4 and IPv6 addresses on interfaces that are up, in
// getifaddrs order, IPv6 link-local ones left out.
std::vector<NetInterface> up_interfaces();

}  // namespace braid

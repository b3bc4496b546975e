// Small TCP helpers shared by the bootstrap and the socket transport: the
// local address, listeners, and whole-message send/recv bounded by a Deadline.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/net_interface.h"
#include "src/base/sock_addr.h"
#include "src/base/status.h"

namespace braid {

class TlsSession;

// The address braid binds, port 0: BRAID_SOCKET_ADDR if set (IPv4 or IPv6),
// else the interface chosen as net_interface.h says (BRAID_SOCKET_IFNAME or
// NCCL_SOCKET_IFNAME, and NCCL_SOCKET_FAMILY; unset, one on the subnet of
// `toward`, the bootstrap root, if given, and of its family).
Status local_address(SockAddr* out, const SockAddr* toward = nullptr);
// The interface filter the sockets use: BRAID_SOCKET_IFNAME, else
// NCCL_SOCKET_IFNAME ("" where neither is set); *name the variable's.
std::string socket_ifname_spec(std::string* name = nullptr);
// Where braid's TCP data connections listen, given the bootstrap's address:
// that alone, or where BRAID_/NCCL_SOCKET_IFNAME names interfaces (a list
// or prefixes, not "^" exclusions) and BRAID_SOCKET_ADDR is not set,
// data_interfaces' (net_interface.h), at most kMaxDataInterfaces.
constexpr size_t kMaxDataInterfaces = 8;
std::vector<SockAddr> data_addresses(const SockAddr& bootstrap);
// The same, with each interface's name ("" where the bootstrap's address
// stands alone) and netmask: the devices of braid's TCP net (socket_net.cc).
std::vector<NetInterface> data_address_interfaces(const SockAddr& bootstrap);

// A listening socket on `addr` (port 0 picks one); *out gets the bound address.
Status listen_tcp(const SockAddr& addr, int* fd, SockAddr* bound);
// How a connect that is refused, unreachable or timed out is retried (the
// peer's listener may not be up yet).  Where NCCL_SOCKET_RETRY_CNT or
// NCCL_SOCKET_RETRY_SLEEP_MSEC is set, as NCCL 2.24+ does: after the k-th
// such failure it sleeps k x sleep_ms (default 100), and the failure after
// `count` retries (default 34: about 60 s in all) ends it, ncclRemoteError.
// Unset, braid's own: retried until the deadline, the sleeps 1, 2, 4 .. 100
// ms.  Never past the deadline either way.
struct ConnectRetries {
  bool counted = false;  // NCCL's count and linear sleeps
  int64_t count = 34;
  int64_t sleep_ms = 100;
  // From the two variables, read at each connect.
  static ConnectRetries from_env();
};
// Connects, retrying as ConnectRetries::from_env() says.
Status connect_tcp(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort, int* fd);
Status connect_tcp_with(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort,
                        const ConnectRetries& retries, int* fd);
// Connects to an address that its owner published after it started listening
// (a bootstrap table, an allgathered transport address).  A refusal then means
// the owner has closed its listener, having exited or aborted, so it fails at
// once, ncclRemoteError, instead of retrying until the deadline.
Status connect_tcp_to_listener(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort, int* fd);

// Whole-buffer I/O, through `tls` where there is one (tls_session.h).  EOF
// or an error is ncclRemoteError / ncclSystemError; running past the
// deadline or an abort is ncclSystemError.
Status send_all(int fd, const void* data, size_t bytes, Deadline deadline, const std::atomic<bool>* abort,
                TlsSession* tls = nullptr);
Status recv_all(int fd, void* data, size_t bytes, Deadline deadline, const std::atomic<bool>* abort,
                TlsSession* tls = nullptr);

// Waits until fd is readable (true) or the deadline / abort (false).
bool wait_readable(int fd, Deadline deadline, const std::atomic<bool>* abort);

// Whether errno says a non-blocking socket call would block, or was
// interrupted: try again later, no error.
bool errno_would_block();

// Whether a socket call's errno says the process or system is out of
// descriptors or memory: no retry helps, the caller fails and says so.
bool out_of_resources(int err);

void set_nonblocking(int fd);
void set_nodelay(int fd);

}  // namespace braid

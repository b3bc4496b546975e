#include "src/base/net.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net_interface.h"
#include "src/base/tls.h"

namespace braid {
namespace {

constexpr int kPollSliceMs = 100;  // how often blocked I/O rechecks abort

bool aborted(const std::atomic<bool>* abort) { return abort && abort->load(std::memory_order_relaxed); }

// With TLS on, a connection the relay closed looks like a peer that left:
// say why the relay last closed one (tls.h).
std::string tls_hint() {
  if (!tls_enabled()) return "";
  const std::string why = tls_last_failure();
  return why.empty() ? " (TLS is on)" : fmt::format(" (TLS is on; last TLS failure in this process: {})", why);
}

// Waits for `events` on fd; false on deadline or abort.
bool wait_for(int fd, short events, Deadline deadline, const std::atomic<bool>* abort) {
  for (;;) {
    if (aborted(abort) || deadline.expired()) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, std::min(kPollSliceMs, deadline.remaining_ms()));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the I/O call report the error
  }
}

// NCCL_SOCKET_FAMILY, as NCCL reads it: AF_INET or AF_INET6, else no preference.
int forced_family() {
  const std::string text = env_raw("NCCL_SOCKET_FAMILY");
  if (text.empty()) return AF_UNSPEC;
  if (text == "AF_INET") return AF_INET;
  if (text == "AF_INET6") return AF_INET6;
  static std::once_flag warned;
  std::call_once(warned, [&] {
    BRAID_WARN("NCCL_SOCKET_FAMILY={} is neither AF_INET nor AF_INET6: ignored, as NCCL does", text);
  });
  return AF_UNSPEC;
}

}  // namespace

std::string socket_ifname_spec(std::string* name) {
  std::string spec = env_string("BRAID_SOCKET_IFNAME");
  const bool braid = !spec.empty();
  if (!braid) spec = env_raw("NCCL_SOCKET_IFNAME");
  if (name) *name = braid ? "BRAID_SOCKET_IFNAME" : "NCCL_SOCKET_IFNAME";
  return spec;
}

Status local_address(SockAddr* out, const SockAddr* toward) {
  std::string forced = env_string("BRAID_SOCKET_ADDR");
  if (!forced.empty()) return std::move(parse_ip(forced, out)).context("BRAID_SOCKET_ADDR");
  std::string spec_name;
  const std::string spec = socket_ifname_spec(&spec_name);
  int family = forced_family();
  // Unforced, the root's family: a rank listening on another could not be
  // reached from an IPv6-only (or IPv4-only) peer.
  if (family == AF_UNSPEC && toward) family = toward->family();
  NetInterface chosen;
  BRAID_TRY(choose_interface(up_interfaces(), spec_name, spec, family, toward, &chosen));
  *out = chosen.addr.with_port(0);
  BRAID_INFO(kNet | kBootstrap, "using interface {} ({}){}", chosen.name, out->ip(),
             spec.empty() ? "" : fmt::format(", {}={}", spec_name, spec));
  return Status::ok();
}

std::vector<NetInterface> data_address_interfaces(const SockAddr& bootstrap) {
  const std::string spec = socket_ifname_spec();
  const InterfaceFilter filter = parse_interface_filter(spec);
  // An excluding filter ("^docker,lo") says what not to use, not which NICs to: one interface.
  if (spec.empty() || filter.exclude || !env_string("BRAID_SOCKET_ADDR").empty()) {
    NetInterface alone;
    alone.addr = bootstrap.with_port(0);
    return {alone};
  }
  std::vector<NetInterface> out = data_interfaces(up_interfaces(), filter, bootstrap, kMaxDataInterfaces);
  std::string names;
  for (NetInterface& i : out) {
    i.addr = i.addr.with_port(0);
    if (!names.empty()) names += ", ";
    names += fmt::format("{} ({})", i.name, i.addr.ip());
  }
  if (out.size() > 1) BRAID_INFO(kNet | kInit, "TCP data connections over {} interfaces: {}", out.size(), names);
  return out;
}

std::vector<SockAddr> data_addresses(const SockAddr& bootstrap) {
  std::vector<SockAddr> out;
  for (const NetInterface& i : data_address_interfaces(bootstrap)) out.push_back(i.addr);
  return out;
}

Status listen_tcp(const SockAddr& addr, int* fd, SockAddr* bound) {
  int s = tcp_socket_for(addr);
  if (s < 0) return BRAID_ERROR(ncclSystemError, "socket: {}", std::strerror(errno));
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s, &addr.sa, addr.length()) != 0 || ::listen(s, 1024) != 0) {
    int err = errno;
    ::close(s);
    return BRAID_ERROR(ncclSystemError, "cannot listen on {}: {}", to_string(addr), std::strerror(err));
  }
  SockAddr got;
  socklen_t len = sizeof(got);
  getsockname(s, &got.sa, &len);
  *bound = got;
  *fd = s;
  return Status::ok();
}

namespace {

// One connection attempt that keeps to the deadline and the abort flag: a
// blocking connect to a host that drops SYNs (gone, or firewalled) would sit
// in the kernel's SYN retries for about two minutes, deaf to both.  So the
// socket connects non-blocking, polled in slices (NCCL's ncclSocketConnect
// polls too), and is handed back blocking.  Returns 0 or the attempt's errno
// (ETIMEDOUT where the deadline or the abort ended the wait).
int connect_once(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort, int* fd) {
  int s = tcp_socket_for(addr, SOCK_NONBLOCK);
  if (s < 0) return errno;
  int err = ::connect(s, &addr.sa, addr.length()) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    err = ETIMEDOUT;
    if (wait_for(s, POLLOUT, deadline, abort)) {
      socklen_t len = sizeof(err);
      if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
  }
  if (err != 0) {
    ::close(s);
    return err;
  }
  fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
  *fd = s;
  return 0;
}

Status connect_retrying(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort,
                        bool refusal_is_final, const ConnectRetries& retries, int* fd) {
  int delay_ms = 1;
  for (int64_t failures = 1;; ++failures) {
    const int err = connect_once(addr, deadline, abort, fd);
    if (err == 0) {
      set_nodelay(*fd);
      return Status::ok();
    }
    if (out_of_resources(err))
      return BRAID_ERROR(ncclSystemError, "socket for {}: {} (the open-file limit, ulimit -n?)", to_string(addr),
                         std::strerror(err));
    if (err == ECONNREFUSED && refusal_is_final)
      return BRAID_ERROR(ncclRemoteError, "connect to {}: refused, though the peer listened there: it closed its "
                         "listener (exited or aborted), or a firewall rejects the connection", to_string(addr));
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH ||
                 err == EAGAIN || err == EINTR || err == ECONNRESET;
    if (!retry) return BRAID_ERROR(ncclSystemError, "connect to {}: {}", to_string(addr), std::strerror(err));
    if (aborted(abort)) return BRAID_ERROR(ncclSystemError, "connect to {}: aborted", to_string(addr));
    if (deadline.expired())
      return BRAID_ERROR(ncclTimeout, "connect to {}: {} until the timeout (BRAID_TIMEOUT)", to_string(addr),
                         std::strerror(err));
    if (retries.counted) {
      if (failures > retries.count)
        return BRAID_ERROR(ncclRemoteError, "connect to {}: {}, and still after {} retries "
                           "(NCCL_SOCKET_RETRY_CNT={}, NCCL_SOCKET_RETRY_SLEEP_MSEC={})", to_string(addr),
                           std::strerror(err), retries.count, retries.count, retries.sleep_ms);
      delay_ms = int(std::min<int64_t>(failures * retries.sleep_ms, 3600 * 1000));
      BRAID_INFO(kNet | kInit, "connect to {}: {}, retry {} of {} in {} ms", to_string(addr), std::strerror(err),
                 failures, retries.count, delay_ms);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(delay_ms, deadline.remaining_ms())));
    if (!retries.counted) delay_ms = std::min(delay_ms * 2, 100);
  }
}

}  // namespace

ConnectRetries ConnectRetries::from_env() {
  ConnectRetries r;
  const std::optional<int64_t> count = env_nccl_int("NCCL_SOCKET_RETRY_CNT");
  const std::optional<int64_t> sleep_ms = env_nccl_int("NCCL_SOCKET_RETRY_SLEEP_MSEC");
  r.counted = count || sleep_ms;
  if (count && *count >= 0) r.count = *count;  // NCCL: any positive value (0: no retry)
  if (sleep_ms && *sleep_ms >= 0) r.sleep_ms = *sleep_ms;
  return r;
}

Status connect_tcp(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort, int* fd) {
  return connect_retrying(addr, deadline, abort, false, ConnectRetries::from_env(), fd);
}

Status connect_tcp_with(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort,
                        const ConnectRetries& retries, int* fd) {
  return connect_retrying(addr, deadline, abort, false, retries, fd);
}

Status connect_tcp_to_listener(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort, int* fd) {
  return connect_retrying(addr, deadline, abort, true, ConnectRetries::from_env(), fd);
}

Status send_all(int fd, const void* data, size_t bytes, Deadline deadline, const std::atomic<bool>* abort,
                TlsSession* tls) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send_some(tls, fd, p, bytes);
    if (n > 0) {
      p += n;
      bytes -= size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, tls ? tls->wants() : POLLOUT, deadline, abort))
        return aborted(abort) ? BRAID_ERROR(ncclSystemError, "send: aborted")
                              : BRAID_ERROR(ncclTimeout, "send: timed out (BRAID_TIMEOUT)");
      continue;
    }
    if (tls && errno == EPROTO) return BRAID_ERROR(ncclRemoteError, "send: {}", tls->error());
    return BRAID_ERROR(ncclRemoteError, "send: connection lost ({}){}", std::strerror(errno), tls_hint());
  }
  return Status::ok();
}

Status recv_all(int fd, void* data, size_t bytes, Deadline deadline, const std::atomic<bool>* abort,
                TlsSession* tls) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = recv_some(tls, fd, p, bytes);
    if (n > 0) {
      p += n;
      bytes -= size_t(n);
      continue;
    }
    if (n == 0) return BRAID_ERROR(ncclRemoteError, "recv: the peer closed the connection{}", tls_hint());
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, tls ? tls->wants() : POLLIN, deadline, abort))
        return aborted(abort) ? BRAID_ERROR(ncclSystemError, "recv: aborted")
                              : BRAID_ERROR(ncclTimeout, "recv: timed out (BRAID_TIMEOUT)");
      continue;
    }
    if (tls && errno == EPROTO) return BRAID_ERROR(ncclRemoteError, "recv: {}", tls->error());
    return BRAID_ERROR(ncclRemoteError, "recv: connection lost ({}){}", std::strerror(errno), tls_hint());
  }
  return Status::ok();
}

bool wait_readable(int fd, Deadline deadline, const std::atomic<bool>* abort) {
  return wait_for(fd, POLLIN, deadline, abort);
}

bool out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

bool errno_would_block() { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace braid

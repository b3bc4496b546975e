// The processes of a perf run started by a launcher other than mpirun
// (scripts/cluster, a job script): each process is told its place by
// BRAID_PERF_RANK and BRAID_PERF_NRANKS, and the harness's own traffic
// (barriers, the time reductions, the device lines) goes through a star of
// TCP connections to process 0, which listens at BRAID_PERF_COORD (ip:port),
// by default NCCL_COMM_ID's (or BRAID_COMM_ID's) address with port + 1.
// The ncclUniqueId needs no sharing: with NCCL_COMM_ID set every process
// computes the same id and rank 0 hosts the bootstrap root (as NCCL does).
//
// Blocking sockets and no timeouts on the harness's calls (a row may run for
// minutes between two of them): a process that dies closes its connection,
// and the others exit on the EOF rather than wait.
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "perf/world.h"

namespace perf {
namespace {

constexpr auto kConnectPatience = std::chrono::seconds(120);

[[noreturn]] void lost(const char* what) {
  fmt::print(stderr, "perf: lost the launcher world ({}): another process failed\n", what);
  std::fflush(nullptr);
  std::_Exit(3);
}

void send_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) lost("send");
    p += w;
    bytes -= size_t(w);
  }
}

void recv_all(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t r = ::recv(fd, p, bytes, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) lost("recv");
    p += r;
    bytes -= size_t(r);
  }
}

// An IPv4 or IPv6 address with its port.
struct Endpoint {
  sockaddr_storage addr{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&addr); }
  uint16_t port() const {
    return ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port
                                            : reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
};

// NCCL_COMM_ID's forms: ip:port, host:port, [ipv6]:port, [ipv6%if]:port.
bool parse_endpoint(const std::string& text, Endpoint* out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const int port = std::atoi(text.c_str() + colon + 1);
  if (port <= 0 || port > 65535 || host.empty()) return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return false;
  std::memcpy(&out->addr, found->ai_addr, found->ai_addrlen);
  out->length = found->ai_addrlen;
  freeaddrinfo(found);
  return true;
}

class LauncherWorld final : public World {
 public:
  LauncherWorld(int proc, int procs) : proc_(proc), procs_(procs) {}
  ~LauncherWorld() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }

  // Process 0 accepts one connection from every other; they connect (and
  // retry while process 0 is not listening yet) and say who they are.
  bool connect(const Endpoint& coord, std::string* error) {
    if (proc_ == 0) {
      fds_.assign(size_t(procs_), -1);
      int lfd = ::socket(coord.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (lfd < 0 || ::bind(lfd, coord.get(), coord.length) != 0 ||
          ::listen(lfd, procs_) != 0) {
        *error = fmt::format("cannot listen at the coordinator address: {}", std::strerror(errno));
        if (lfd >= 0) ::close(lfd);
        return false;
      }
      for (int joined = 1; joined < procs_; ++joined) {
        int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR) {
            --joined;
            continue;
          }
          *error = fmt::format("accept: {}", std::strerror(errno));
          ::close(lfd);
          return false;
        }
        int32_t who = -1;
        recv_all(fd, &who, sizeof who);
        if (who <= 0 || who >= procs_ || fds_[size_t(who)] >= 0) {
          *error = fmt::format("a process said it was {} of {} (or said it twice)", who, procs_);
          ::close(fd);
          ::close(lfd);
          return false;
        }
        fds_[size_t(who)] = nodelay(fd);
      }
      ::close(lfd);
      return true;
    }
    const auto give_up = std::chrono::steady_clock::now() + kConnectPatience;
    for (;;) {
      int fd = ::socket(coord.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && ::connect(fd, coord.get(), coord.length) == 0) {
        fds_.assign(1, nodelay(fd));
        int32_t me = proc_;
        send_all(fd, &me, sizeof me);
        return true;
      }
      if (fd >= 0) ::close(fd);
      if (std::chrono::steady_clock::now() > give_up) {
        *error = fmt::format("no process 0 listening after {} s", kConnectPatience.count());
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  int procs() const override { return procs_; }
  int proc() const override { return proc_; }
  bool share_unique_id(ncclUniqueId* id) override {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) fmt::print(stderr, "ncclGetUniqueId failed: {}\n", ncclGetErrorString(r));
    // Whoever failed, all stop here together.
    return max(r == ncclSuccess ? 0 : 1) == 0;
  }
  void barrier() override { (void)sum(0); }
  double sum(double v) override {
    return combine(v, [](double a, double b) { return a + b; });
  }
  double min(double v) override {
    return combine(v, [](double a, double b) { return std::min(a, b); });
  }
  double max(double v) override {
    return combine(v, [](double a, double b) { return std::max(a, b); });
  }
  double broadcast_from_zero(double v) override {
    return combine(v, [](double a, double) { return a; });
  }
  std::string gather_text(const std::string& lines) override {
    if (proc_ != 0) {
      uint64_t len = lines.size();
      send_all(fds_[0], &len, sizeof len);
      send_all(fds_[0], lines.data(), lines.size());
      return {};
    }
    std::string all = lines;
    for (int p = 1; p < procs_; ++p) {
      uint64_t len = 0;
      recv_all(fds_[size_t(p)], &len, sizeof len);
      std::string part(len, '\0');
      recv_all(fds_[size_t(p)], part.data(), len);
      all += part;
    }
    return all;
  }
  void abort(int code) override {
    std::fflush(nullptr);
    std::_Exit(code);  // the others see their connection close
  }
  int finish(int rc) override { return int(max(double(rc))); }

 private:
  static int nodelay(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }

  // Process 0 folds every value in process order and sends the result back.
  template <typename F>
  double combine(double v, F f) {
    if (proc_ != 0) {
      send_all(fds_[0], &v, sizeof v);
      recv_all(fds_[0], &v, sizeof v);
      return v;
    }
    for (int p = 1; p < procs_; ++p) {
      double theirs = 0;
      recv_all(fds_[size_t(p)], &theirs, sizeof theirs);
      v = f(v, theirs);
    }
    for (int p = 1; p < procs_; ++p) send_all(fds_[size_t(p)], &v, sizeof v);
    return v;
  }

  const int proc_, procs_;
  std::vector<int> fds_;  // process 0: one per process (its own -1); others: the one to process 0
};

// BRAID_PERF_COORD, else the bootstrap root's address with port + 1.
bool coordinator(Endpoint* out, std::string* error) {
  if (const char* coord = std::getenv("BRAID_PERF_COORD"); coord && *coord) {
    if (parse_endpoint(coord, out)) return true;
    return *error = fmt::format("BRAID_PERF_COORD={} is not ip:port", coord), false;
  }
  const char* comm_id = std::getenv("BRAID_COMM_ID");
  if (!comm_id || !*comm_id) comm_id = std::getenv("NCCL_COMM_ID");
  if (!comm_id || !*comm_id)
    return *error = "BRAID_PERF_NRANKS is set but neither NCCL_COMM_ID nor BRAID_PERF_COORD says where process 0 is",
           false;
  if (!parse_endpoint(comm_id, out) || out->port() == 65535)
    return *error = fmt::format("NCCL_COMM_ID={} is not ip:port", comm_id), false;
  const uint16_t next = htons(uint16_t(out->port() + 1));
  if (out->addr.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&out->addr)->sin6_port = next;
  else reinterpret_cast<sockaddr_in*>(&out->addr)->sin_port = next;
  return true;
}

}  // namespace

bool launched_by_environment() { return std::getenv("BRAID_PERF_NRANKS") != nullptr; }

std::unique_ptr<World> make_launcher_world() {
  const char* nranks_text = std::getenv("BRAID_PERF_NRANKS");
  const char* rank_text = std::getenv("BRAID_PERF_RANK");
  const int procs = nranks_text ? std::atoi(nranks_text) : 0;
  const int proc = rank_text ? std::atoi(rank_text) : -1;
  if (procs < 1 || proc < 0 || proc >= procs) {
    fmt::print(stderr, "perf: BRAID_PERF_RANK={} BRAID_PERF_NRANKS={}: need 0 <= rank < nranks\n",
               rank_text ? rank_text : "(unset)", nranks_text ? nranks_text : "(unset)");
    return nullptr;
  }
  auto world = std::make_unique<LauncherWorld>(proc, procs);
  std::string error;
  Endpoint coord;
  if (procs > 1 && (!coordinator(&coord, &error) || !world->connect(coord, &error))) {
    fmt::print(stderr, "perf: process {} of {}: {}\n", proc, procs, error);
    return nullptr;
  }
  return world;
}

}  // namespace perf

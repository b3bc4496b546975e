// The RAS node of this process (ras_node.h): its start, its sockets, what
// it knows and how peers ask it.
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/base/thread_name.h"
#include "src/runtime/comm.h"
#include "src/runtime/profiler.h"
#include "src/runtime/ras_node.h"

namespace braid {
namespace {

constexpr char kMagic[4] = {'B', 'R', 'A', 'S'};
constexpr uint32_t kMaxRequest = 64u << 10;  // requests are small; an unknown sender cannot make us allocate much
constexpr uint32_t kMaxReply = 64u << 20;    // a report of thousands of communicators fits
// Connections served at once, clients and peers counted apart: idle clients
// (a client may wait 10 minutes between commands) must not shut out the
// job's own peers' queries.  More are closed, a client told why.
constexpr int kMaxSessions = 256;

std::atomic<RasNode*> g_node{nullptr};
std::atomic<bool> g_failed{false};  // tried and could not: not again
std::mutex g_start_mutex;
std::atomic<int> g_sessions[2] = {0, 0};  // [0] peers, [1] clients

// A child of fork has the parent's sockets but no node thread: it closes
// them (the parent's peers must reach the parent, not a child that never
// answers) and starts its own node if it makes a communicator.  The
// parent's node is left behind in the child, unused.
int g_fds_to_close[2] = {-1, -1};
void lock_for_fork() { g_start_mutex.lock(); }
void unlock_after_fork() { g_start_mutex.unlock(); }
void child_after_fork() {
  for (int& fd : g_fds_to_close)
    if (fd >= 0) ::close(fd), fd = -1;
  g_node = nullptr;
  g_failed = false;
  g_sessions[0] = g_sessions[1] = 0;  // the parent's session threads are not in the child
  g_start_mutex.unlock();
}

double read_timeout_factor() {
  const std::string text = env_raw("NCCL_RAS_TIMEOUT_FACTOR");
  if (text.empty()) return 1;
  char* end = nullptr;
  const double f = std::strtod(text.c_str(), &end);
  // Past 10^6 the timeouts it scales (5 s a peer) overflow the clock's nanoseconds.
  if (*end == '\0' && std::isfinite(f) && f > 0 && f <= 1e6) return f;
  BRAID_WARN("Invalid value {} for NCCL_RAS_TIMEOUT_FACTOR, using default 1.", text);
  return 1;
}

// NCCL_RAS_ADDR, or NCCL's default.
std::string client_address() {
  const std::string text = env_raw("NCCL_RAS_ADDR");
  return text.empty() ? "localhost:28028" : text;
}

// The client socket at `text` ("host:port"), shared by the host's
// processes; -1 if it cannot be had.
int listen_for_clients(const std::string& text) {
  const size_t colon = text.rfind(':');
  std::string host = colon == std::string::npos ? text : text.substr(0, colon);
  const std::string port = colon == std::string::npos ? "28028" : text.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found) {
    BRAID_INFO(kInit, "RAS failed to establish a client listening socket at {}: cannot resolve it", text);
    return -1;
  }
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) == 0 &&
            ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 128) == 0;
  const int err = errno;
  freeaddrinfo(found);
  if (ok) return fd;
  if (fd >= 0) ::close(fd);
  BRAID_INFO(kInit, "RAS failed to establish a client listening socket at {}: {}", text, std::strerror(err));
  return -1;
}

std::string host_of(const std::string& addr) { return addr.substr(0, addr.rfind(':')); }

Status read_message(int fd, uint32_t max_bytes, Deadline deadline, std::string* text) {
  uint32_t bytes = 0;
  BRAID_TRY(recv_all(fd, &bytes, sizeof bytes, deadline, nullptr));
  if (bytes > max_bytes) return BRAID_ERROR(ncclRemoteError, "RAS message of {} bytes is too long", bytes);
  text->resize(bytes);
  return recv_all(fd, text->data(), bytes, deadline, nullptr);
}

Status write_message(int fd, const std::string& text, Deadline deadline) {
  const uint32_t bytes = uint32_t(text.size());
  BRAID_TRY(send_all(fd, &bytes, sizeof bytes, deadline, nullptr));
  return send_all(fd, text.data(), text.size(), deadline, nullptr);
}

// A connect bounded by the deadline (a blocking one to a host that is down
// takes minutes); refusal is final: the process is gone.
Status connect_bounded(const SockAddr& to, Deadline deadline, int* out) {
  int fd = tcp_socket_for(to, SOCK_NONBLOCK);
  if (fd < 0) return BRAID_ERROR(ncclSystemError, "socket: {}", std::strerror(errno));
  int err = ::connect(fd, &to.sa, to.length()) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    const int waited = ::poll(&p, 1, deadline.expired() ? 0 : std::min(deadline.remaining_ms(), 1 << 30));
    socklen_t len = sizeof err;
    if (waited <= 0) err = ETIMEDOUT;
    else getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  }
  if (err == 0) {
    set_nodelay(fd);
    *out = fd;
    return Status::ok();
  }
  ::close(fd);
  if (err == ECONNREFUSED) return BRAID_ERROR(ncclRemoteError, "RAS peer {} refused: it is gone", to_string(to));
  return BRAID_ERROR(ncclTimeout, "RAS peer {}: {}", to_string(to), std::strerror(err));
}

}  // namespace

int RasCommState::counted_index(Collective c) {
  switch (c) {
    case Collective::Broadcast: return 0;
    case Collective::Reduce: return 1;
    case Collective::AllGather: return 2;
    case Collective::ReduceScatter: return 3;
    case Collective::AllReduce: return 4;
    default: return -1;
  }
}

RasNode* RasNode::get(const SockAddr& ip) {
  if (RasNode* node = g_node.load(std::memory_order_acquire)) return node;
  std::lock_guard<std::mutex> lock(g_start_mutex);
  if (RasNode* node = g_node.load()) return node;
  const std::string enable = env_raw("NCCL_RAS_ENABLE");
  if (g_failed || (!enable.empty() && std::strtoll(enable.c_str(), nullptr, 0) != 1)) return nullptr;
  auto* node = new RasNode;  // never freed: its thread serves until the process exits
  Status s = node->start(ip);
  if (!s.is_ok()) {
    BRAID_INFO(kInit, "RAS is off in this process: {}", s.to_string());
    delete node;
    g_failed = true;
    return nullptr;
  }
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(lock_for_fork, unlock_after_fork, child_after_fork); });
  g_node.store(node, std::memory_order_release);
  return node;
}

Status RasNode::start(const SockAddr& ip) {
  timeout_factor_ = read_timeout_factor();
  BRAID_TRY(listen_tcp(ip.with_port(0), &peer_fd_, &peer_addr_));
  const std::string clients = client_address();
  client_fd_ = listen_for_clients(clients);
  self_.addr = to_string(peer_addr_);
  self_.host = host_of(self_.addr);
  self_.pid = getpid();
  try {
    named_thread("braid ras", [this] { accept_loop(); }).detach();
  } catch (const std::exception& e) {
    ::close(peer_fd_);
    if (client_fd_ >= 0) ::close(client_fd_);
    return BRAID_ERROR(ncclSystemError, "RAS: cannot start its thread: {}", e.what());
  }
  g_fds_to_close[0] = peer_fd_;
  g_fds_to_close[1] = client_fd_;
  BRAID_INFO(kInit, "RAS: peers reach this process at {}, clients at {}", self_.addr,
             client_fd_ >= 0 ? clients : "(none)");
  return Status::ok();
}

void RasNode::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{peer_fd_, POLLIN, 0}, {client_fd_, POLLIN, 0}};
    if (::poll(fds, client_fd_ >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      const int fd = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::atomic<int>& sessions = g_sessions[i];
      if (sessions.fetch_add(1) >= kMaxSessions) {  // counted here, so the limit holds
        --sessions;
        if (i == 1) {
          static const char kBusy[] = "ERROR: too many RAS clients are connected to this process; try again\n";
          (void)!::send(fd, kBusy, sizeof kBusy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        ::close(fd);
        continue;
      }
      // Nothing a session throws (no memory, no thread) may end the
      // application: it only loses that session.
      try {
        named_thread("braid ras conn", [this, fd, &sessions, peer = i == 0] {
          try {
            if (peer) serve_peer(fd);
            else ras_serve_client(*this, fd);
          } catch (const std::exception& e) {
            BRAID_INFO(kInit, "RAS: a session failed: {}", e.what());
          }
          ::close(fd);
          --sessions;
        }).detach();
      } catch (const std::exception&) {
        --sessions;
        ::close(fd);
      }
    }
  }
}

void RasNode::serve_peer(int fd) {
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(int64_t(5000 * timeout_factor_)));
  char header[5];
  std::string body;
  if (!recv_all(fd, header, sizeof header, deadline, nullptr).is_ok() ||
      std::memcmp(header, kMagic, sizeof kMagic) != 0 || !read_message(fd, kMaxRequest, deadline, &body).is_ok())
    return;  // not a RAS peer, or one that went away: nothing to answer
  const nlohmann::json request = nlohmann::json::parse(body, nullptr, false);
  nlohmann::json reply = nlohmann::json::object();
  switch (RasRequest(header[4])) {
    case RasRequest::Report: reply = ras::to_json(report()); break;
    case RasRequest::Homes: {
      ras::CommId id;
      if (request.is_array() && request.size() == 3 && request[0].is_number_unsigned() &&
          request[1].is_number_unsigned() && request[2].is_number_unsigned())
        id = {request[0].get<uint64_t>(), request[1].get<uint64_t>(), request[2].get<uint64_t>()};
      reply = ras::to_json(homes(id));
      break;
    }
    case RasRequest::Ping: break;
    case RasRequest::Facts: reply = ras_facts_reply(*this); break;
    case RasRequest::Mask:
      if (!request.is_object() || !request.contains("mask") || !request["mask"].is_number_integer()) return;
      profiler_override_mask(request["mask"].get<int>());
      break;
    default: return;
  }
  (void)write_message(fd, ras::dump(reply), deadline);
}

ras::ProcessInfo& RasNode::peer_entry(const std::string& addr) {
  ras::ProcessInfo& p = peers_[addr];
  if (p.addr.empty()) {
    p.addr = addr;
    p.host = host_of(addr);
  }
  return p;
}

void RasNode::add_comm(ncclComm* comm, const std::vector<RasRank>& ranks, const ras::CommId& id,
                       const std::string& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  CommEntry entry{comm, id, {}, model};
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string addr = ranks[r].addr.port() ? to_string(ranks[r].addr) : "";
    entry.homes.push_back({int(r), addr, ranks[r].cuda_dev});
    if (addr.empty()) continue;
    ras::ProcessInfo& p = addr == self_.addr ? self_ : peer_entry(addr);
    p.pid = ranks[r].pid;
    if (ranks[r].cuda_dev >= 0 && std::find(p.cuda_devs.begin(), p.cuda_devs.end(), ranks[r].cuda_dev) ==
                                      p.cuda_devs.end()) {
      p.cuda_devs.push_back(ranks[r].cuda_dev);
      std::sort(p.cuda_devs.begin(), p.cuda_devs.end());
    }
  }
  comms_.push_back(std::move(entry));
}

void RasNode::remove_comm(const ncclComm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(comms_, [comm](const CommEntry& e) { return e.comm == comm; });
}

ras::ProcessReport RasNode::report() {
  std::lock_guard<std::mutex> lock(mutex_);
  ras::ProcessReport r;
  r.process = self_;
  for (const CommEntry& e : comms_) {
    const ncclComm* c = e.comm;
    ras::RankState s;
    s.rank = c->rank;
    s.cuda_dev = e.homes[size_t(c->rank)].cuda_dev;
    s.async_error = c->async_error.load();
    const bool failed = s.async_error != ncclSuccess && s.async_error != ncclInProgress;
    s.init_state = c->ready.load() ? ncclSuccess : failed ? s.async_error : ncclInProgress;
    s.finalize_called = c->ras.finalize_called.load();
    s.destroy_flag = c->ras.destroy_called.load();
    s.abort_flag = c->aborting.load();
    for (int k = 0; k < ras::kCounted; ++k) s.coll_counts[size_t(k)] = c->ras.launched[size_t(k)].load();
    auto same = [&](const ras::CommReport& x) { return x.id == e.id; };
    auto it = std::find_if(r.comms.begin(), r.comms.end(), same);  // thread-ranks of one communicator
    if (it == r.comms.end()) it = r.comms.insert(r.comms.end(), ras::CommReport{e.id, c->nranks, {}});
    it->ranks.push_back(s);
  }
  for (const auto& [addr, p] : peers_)
    if (!dead_.count(addr)) r.peers.push_back(p);
  return r;
}

std::vector<ras::RankHome> RasNode::homes(const ras::CommId& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const CommEntry& e : comms_)
    if (e.id == id) return e.homes;
  return {};
}

std::vector<RasLocalRank> RasNode::local_ranks() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<RasLocalRank> out;
  for (const CommEntry& e : comms_) out.push_back({e.id, e.comm->rank, e.comm->nranks, e.model});
  return out;
}

std::vector<ras::ProcessInfo> RasNode::peers() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ras::ProcessInfo> out;
  for (const auto& [addr, p] : peers_)
    if (!dead_.count(addr)) out.push_back(p);
  return out;
}

std::vector<ras::ProcessInfo> RasNode::dead() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ras::ProcessInfo> out;
  for (const std::string& addr : dead_) {
    auto it = peers_.find(addr);
    out.push_back(it != peers_.end() ? it->second : ras::ProcessInfo{addr, host_of(addr), -1, {}});
  }
  return out;
}

void RasNode::learn(const std::vector<ras::ProcessInfo>& peers) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const ras::ProcessInfo& p : peers) {
    if (p.addr == self_.addr || p.addr.empty()) continue;
    ras::ProcessInfo& known = peer_entry(p.addr);
    known.pid = p.pid;
    if (known.cuda_devs.empty()) known.cuda_devs = p.cuda_devs;
  }
}

void RasNode::mark_dead(const std::string& addr) {
  std::lock_guard<std::mutex> lock(mutex_);
  dead_.insert(addr);
}

Status ras_ask(const std::string& addr, RasRequest kind, const nlohmann::json& body, Deadline deadline,
               nlohmann::json* reply) {
  SockAddr to;
  BRAID_TRY(parse_endpoint(addr, &to));
  int fd = -1;
  BRAID_TRY(connect_bounded(to, deadline, &fd));
  std::string header(kMagic, sizeof kMagic), text;
  header += char(kind);
  Status s = send_all(fd, header.data(), header.size(), deadline, nullptr);
  if (s.is_ok()) s = write_message(fd, ras::dump(body), deadline);
  if (s.is_ok()) s = read_message(fd, kMaxReply, deadline, &text);
  ::close(fd);
  if (!s.is_ok()) return BRAID_ERROR(ncclTimeout, "RAS peer {} did not answer: {}", addr, s.to_string());
  *reply = nlohmann::json::parse(text, nullptr, false);
  if (reply->is_discarded()) return BRAID_ERROR(ncclTimeout, "RAS peer {} sent something that is not JSON", addr);
  return Status::ok();
}

std::vector<RasAnswer> ras_ask_all(const std::vector<std::string>& addrs, RasRequest kind, Deadline deadline,
                                   const nlohmann::json& body) {
  constexpr size_t kAtOnce = 64;
  std::vector<RasAnswer> answers(addrs.size());
  for (size_t first = 0; first < addrs.size(); first += kAtOnce) {
    std::vector<std::thread> threads;
    for (size_t i = first; i < std::min(addrs.size(), first + kAtOnce); ++i)
      threads.push_back(named_thread("braid ras ask", [&, i] {
        answers[i].status = ras_ask(addrs[i], kind, body, deadline, &answers[i].reply);
      }));
    for (auto& t : threads) t.join();
  }
  return answers;
}

Deadline ras_deadline(double seconds) {
  // NCCL takes any count of seconds; past ~115 days it is as good as none
  // (and past 9.2e9 s the clock's nanoseconds overflow into the past).
  if (!(seconds > 0) || seconds > 1e7) return Deadline::never();
  return Deadline::after(std::chrono::milliseconds(int64_t(seconds * 1000)));
}

std::string ras_local_time() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%F %T", &tm);
  return text;
}

bool ras_peer_address(const SockAddr& ip, SockAddr* out) {
  RasNode* node = RasNode::get(ip);
  *out = node ? node->peer_addr_ : SockAddr{};
  return node != nullptr;
}

void ras_comm_added(ncclComm* comm, const std::vector<RasRank>& ranks, uint64_t rank0_host, uint64_t rank0_pid,
                    const std::string& model) {
  if (RasNode* node = g_node.load(std::memory_order_acquire))
    node->add_comm(comm, ranks, {comm->comm_hash, rank0_host, rank0_pid}, model);
}

void ras_comm_removed(const ncclComm* comm) {
  if (RasNode* node = g_node.load(std::memory_order_acquire)) node->remove_comm(comm);
}

}  // namespace braid

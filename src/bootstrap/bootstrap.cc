// TCP bootstrap (protocol in bootstrap.h).
//
// The unique id holds {version, flags, magic, root address}.  The root is a
// detached thread that accepts connections, drops any that do not send a
// well-formed hello with the right magic within a second, and, once all
// ranks have said hello, sends each the table of rank listener addresses
// plus a random nonce (so two communicators built from one NCCL_COMM_ID
// still get different hashes).  Ranks then connect to each other lazily:
// one outgoing connection per peer for sends, the peer's connection to us
// for receives; messages are [tag, length, payload] and a message that
// arrives for another tag waits in a queue until asked for.
#include "src/bootstrap/bootstrap.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/base/thread_name.h"
#include "src/base/tls.h"
#include "src/bootstrap/bootstrap_wire.h"

namespace braid {
namespace {

using namespace wire;
constexpr auto kHelloTimeout = std::chrono::milliseconds(1000);

uint64_t random64() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^ (uint64_t(getpid()) << 16);
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::chrono::milliseconds timeout() { return std::chrono::milliseconds(env_int("BRAID_TIMEOUT") * 1000); }

// The root waits this much longer than the ranks do.  A rank's wait starts
// before its hello reaches the root, so with equal timeouts the two expire
// together, and when the root's close wins the rank could only report "the
// peer closed the connection" instead of its own, precise timeout.
constexpr auto kRootGrace = std::chrono::milliseconds(1000);

// Serves one rendezvous on listen_fd, then closes it.
void serve_root(int listen_fd, uint64_t magic, std::promise<void> started) {
  // BRAID_TIMEOUT counts time without progress: each arrival restarts it, so
  // ranks that reach init far apart (e.g. after detecting a failure at
  // different times, then shrinking) still meet.  The clock starts with the
  // first arrival, as NCCL's root waits for it without limit: a caller may do
  // slow work between ncclGetUniqueId and init (allocate and fill buffers,
  // load a model, pass the id through its launcher).
  Deadline deadline = Deadline::never();
  int nranks = -1, joined = 0;
  std::vector<int> rank_fd;
  std::vector<SockAddr> table;
  // Accepted connections whose hello is not in yet, read as its bytes come:
  // a stranger that sends part of one and goes quiet costs the rendezvous
  // nothing (a blocking read of each would hold every rank up to a second).
  struct Pending {
    int fd;
    RootHello hello;
    size_t got;
    Deadline until;
  };
  std::vector<Pending> pending;
  pending.reserve(64);
  // A process that forks while this thread is inside malloc leaves the
  // child holding the allocator's lock for good (glibc's malloc guards
  // against that, sanitizers' allocators do not), and callers do fork right
  // after ncclGetUniqueId.  So the thread's start-up allocations are over
  // before ncclGetUniqueId returns (`started`), and waiting for ranks
  // allocates nothing: `fds` is reused.
  std::vector<pollfd> fds;
  fds.reserve(16);
  started.set_value();
  auto drop = [](int fd, const char* why) {
    BRAID_INFO(kBootstrap, "bootstrap root: dropping a connection ({})", why);
    ::close(fd);
  };
  while (nranks < 0 || joined < nranks) {
    if (deadline.expired()) {
      BRAID_WARN("bootstrap root: only {} of {} ranks arrived before the timeout (BRAID_TIMEOUT)", joined,
                 nranks < 0 ? 0 : nranks);
      break;
    }
    std::erase_if(pending, [&](const Pending& p) {
      if (!p.until.expired()) return false;
      drop(p.fd, "no complete hello in time");
      return true;
    });
    fds.assign(1, pollfd{listen_fd, POLLIN, 0});
    for (const Pending& p : pending) fds.push_back({p.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0 && out_of_resources(errno)) {  // the connection stays queued: retrying would spin
        BRAID_WARN("bootstrap root: cannot accept a rank's connection: {} (the open-file limit, ulimit -n?); the "
                   "rendezvous fails", std::strerror(errno));
        break;
      }
      if (fd >= 0 && !tls_secure(&fd, TlsRole::Server).is_ok()) {
        drop(fd, "TLS could not start");
      } else if (fd >= 0) {
        set_nonblocking(fd);
        pending.push_back(Pending{fd, RootHello{}, 0, Deadline::after(kHelloTimeout + tls_hello_grace())});
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto p = std::find_if(pending.begin(), pending.end(), [&](const Pending& q) { return q.fd == fds[i].fd; });
      char* into = reinterpret_cast<char*>(&p->hello) + p->got;
      const ssize_t n = ::recv(p->fd, into, sizeof(p->hello) - p->got, 0);
      if (n > 0) p->got += size_t(n);
      else if (n == 0 || !errno_would_block()) p->got = SIZE_MAX;  // closed or failed: dropped below
      if (p->got != sizeof(p->hello) && p->got != SIZE_MAX) continue;
      const Pending done = *p;
      pending.erase(p);
      if (done.got == SIZE_MAX) {
        drop(done.fd, "no complete hello");
        continue;
      }
      const int fd = done.fd;
      const RootHello& hello = done.hello;
      if (hello.magic != magic) {
        drop(fd, "wrong magic");
        continue;
      }
      if (const char* problem = root_hello_problem(hello, magic, nranks)) {
        BRAID_WARN("bootstrap root: hello from rank {} of {} does not fit this job ({} ranks): {}; dropped",
                   hello.rank, hello.nranks, nranks, problem);
        ::close(fd);
        continue;
      }
      if (nranks < 0) {
        nranks = hello.nranks;
        rank_fd.assign(nranks, -1);
        table.resize(nranks);
      }
      if (rank_fd[hello.rank] >= 0) {
        BRAID_WARN("bootstrap root: rank {} joined twice; second one dropped", hello.rank);
        ::close(fd);
        continue;
      }
      rank_fd[hello.rank] = fd;
      table[hello.rank] = hello.listener;
      ++joined;
      deadline = Deadline::after(timeout() + kRootGrace);
    }
  }
  if (nranks > 0 && joined == nranks) {
    RootReply reply{magic, random64()};
    for (int r = 0; r < nranks; ++r) {
      Status s = send_all(rank_fd[r], &reply, sizeof(reply), deadline, nullptr);
      if (s.is_ok()) s = send_all(rank_fd[r], table.data(), table.size() * sizeof(SockAddr), deadline, nullptr);
      if (!s.is_ok()) BRAID_WARN("bootstrap root: cannot answer rank {}: {}", r, s.to_string());
    }
  }
  for (const Pending& p : pending) rank_fd.push_back(p.fd);
  tls_close(rank_fd, Deadline::after(timeout()));  // the replies arrive even if this process exits now
  ::close(listen_fd);
}

Status start_root(const SockAddr& addr, uint64_t magic, SockAddr* bound) {
  int fd = -1;
  BRAID_TRY(listen_tcp(addr, &fd, bound));
  std::promise<void> started;
  std::future<void> ready = started.get_future();
  named_thread("braid root", with_caller_env([fd, magic, started = std::move(started)]() mutable {
    serve_root(fd, magic, std::move(started));
  })).detach();
  ready.wait();
  return Status::ok();
}

class SocketBootstrap final : public Bootstrap {
 public:
  SocketBootstrap(int rank, int nranks, uint64_t key, int listen_fd, std::vector<SockAddr> table)
      : rank_(rank), nranks_(nranks), key_(key), listen_fd_(listen_fd), table_(std::move(table)),
        out_fd_(nranks, -1), in_fd_(nranks, -1) {}

  ~SocketBootstrap() override {
    std::vector<int> fds = out_fd_;
    fds.insert(fds.end(), in_fd_.begin(), in_fd_.end());
    // The last messages arrive even if this process exits now (not waited for after an abort).
    tls_close(fds, Deadline::after(aborted_.load() ? std::chrono::milliseconds(0) : timeout()));
    ::close(listen_fd_);
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  uint64_t comm_hash() const override { return mix(key_); }
  SockAddr address() const override { return table_[rank_].with_port(0); }

  Status send(int peer, int tag, const void* data, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    BRAID_TRY(check_peer(peer));
    if (peer == rank_) {
      const char* p = static_cast<const char*>(data);
      queued_[{peer, tag}].emplace_back(p, p + bytes);
      return Status::ok();
    }
    Deadline deadline = Deadline::after(timeout());
    if (out_fd_[peer] < 0) {
      int fd = -1;
      Status s = connect_tcp_to_listener(table_[peer], deadline, &aborted_, &fd);
      if (!s.is_ok()) return std::move(s).context(fmt::format("bootstrap: rank {} -> {}", rank_, peer));
      PeerHello hello{key_, rank_, 0};
      s = tls_secure(&fd, TlsRole::Client);
      if (s.is_ok()) s = send_all(fd, &hello, sizeof(hello), deadline, &aborted_);
      if (!s.is_ok()) {
        ::close(fd);
        return std::move(s).context(fmt::format("bootstrap: rank {} -> {}", rank_, peer));
      }
      std::lock_guard<std::mutex> fds(fds_mutex_);
      out_fd_[peer] = fd;
    }
    MessageHeader header{tag, 0, bytes};
    Status s = send_all(out_fd_[peer], &header, sizeof(header), deadline, &aborted_);
    if (s.is_ok()) s = send_all(out_fd_[peer], data, bytes, deadline, &aborted_);
    if (!s.is_ok()) return std::move(s).context(fmt::format("bootstrap: rank {} sending to {}", rank_, peer));
    return Status::ok();
  }

  Status recv(int peer, int tag, void* data, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    BRAID_TRY(check_peer(peer));
    Deadline deadline = Deadline::after(timeout());
    for (;;) {
      auto it = queued_.find({peer, tag});
      if (it != queued_.end() && !it->second.empty()) {
        std::vector<char> msg = std::move(it->second.front());
        it->second.pop_front();
        if (msg.size() != bytes)
          return BRAID_ERROR(ncclInternalError, "bootstrap: rank {} expected {} bytes from {} (tag {}), got {}",
                             rank_, bytes, peer, tag, msg.size());
        std::memcpy(data, msg.data(), bytes);
        return Status::ok();
      }
      if (peer == rank_)
        return BRAID_ERROR(ncclInternalError, "bootstrap: rank {} receives from itself with nothing sent", rank_);
      BRAID_TRY(std::move(read_message(peer, deadline)).context(fmt::format("bootstrap: rank {} receiving from {}", rank_, peer)));
    }
  }

  Status allgather(void* data, size_t bytes_per_rank) override {
    // Ring: in step s pass on the slice that arrived in step s-1.  The
    // messages are small (init metadata), so send-then-recv cannot stall.
    char* base = static_cast<char*>(data);
    const int next = (rank_ + 1) % nranks_, prev = (rank_ + nranks_ - 1) % nranks_;
    for (int s = 0; s < nranks_ - 1; ++s) {
      int send_slice = (rank_ - s + nranks_) % nranks_, recv_slice = (rank_ - s - 1 + nranks_) % nranks_;
      BRAID_TRY(send(next, kAllgatherTag, base + size_t(send_slice) * bytes_per_rank, bytes_per_rank));
      BRAID_TRY(recv(prev, kAllgatherTag, base + size_t(recv_slice) * bytes_per_rank, bytes_per_rank));
    }
    return Status::ok();
  }

  Status barrier() override {
    std::vector<char> bytes(nranks_);
    return allgather(bytes.data(), 1);
  }

  void abort() override {
    aborted_.store(true);
    // Wake anything blocked in poll on these sockets.  Descriptors are only
    // shut down here (closed in the destructor) so no fd is reused under a waiter.
    for (int fd : out_fd_snapshot_()) ::shutdown(fd, SHUT_RDWR);
    ::shutdown(listen_fd_, SHUT_RDWR);
  }

 private:
  static constexpr int kAllgatherTag = -0x7a11;

  // For abort(), from any thread, while the thread holding mutex_ may be
  // adding a connection.
  std::vector<int> out_fd_snapshot_() {
    std::lock_guard<std::mutex> lock(fds_mutex_);
    std::vector<int> fds;
    for (int fd : out_fd_) if (fd >= 0) fds.push_back(fd);
    for (int fd : in_fd_) if (fd >= 0) fds.push_back(fd);
    return fds;
  }

  Status check_peer(int peer) const {
    if (aborted_.load()) return BRAID_ERROR(ncclSystemError, "bootstrap: communicator aborted");
    if (peer < 0 || peer >= nranks_)
      return BRAID_ERROR(ncclInternalError, "bootstrap: peer {} out of range [0, {})", peer, nranks_);
    return Status::ok();
  }

  // Accepts peers' connections until `peer`'s is there.
  Status accept_from(int peer, Deadline deadline) {
    while (in_fd_[peer] < 0) {
      if (!wait_readable(listen_fd_, deadline, &aborted_))
        return aborted_ ? BRAID_ERROR(ncclSystemError, "rank {} never connected (aborted)", peer)
                        : BRAID_ERROR(ncclTimeout, "rank {} never connected (timed out, BRAID_TIMEOUT)", peer);
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0 && out_of_resources(errno))  // the connection stays queued: retrying would spin
        return BRAID_ERROR(ncclSystemError, "rank {}: cannot accept a peer's bootstrap connection: {} (the open-file "
                           "limit, ulimit -n?)", rank_, std::strerror(errno));
      if (fd < 0) continue;
      if (!tls_secure(&fd, TlsRole::Server).is_ok()) {
        ::close(fd);
        continue;
      }
      PeerHello hello{};
      if (!recv_all(fd, &hello, sizeof(hello), Deadline::after(kHelloTimeout + tls_hello_grace()), &aborted_).is_ok() ||
          !peer_hello_ok(hello, key_, nranks_) || in_fd_[hello.rank] >= 0) {
        BRAID_INFO(kBootstrap, "bootstrap: rank {} dropped a connection without a valid hello", rank_);
        ::close(fd);
        continue;
      }
      set_nodelay(fd);
      std::lock_guard<std::mutex> fds(fds_mutex_);
      in_fd_[hello.rank] = fd;
    }
    return Status::ok();
  }

  // Reads one message from `peer` into its (peer, tag) queue.
  Status read_message(int peer, Deadline deadline) {
    BRAID_TRY(accept_from(peer, deadline));
    MessageHeader header{};
    BRAID_TRY(recv_all(in_fd_[peer], &header, sizeof(header), deadline, &aborted_));
    BRAID_TRY(check_message_header(header));
    std::vector<char> msg(header.bytes);
    BRAID_TRY(recv_all(in_fd_[peer], msg.data(), msg.size(), deadline, &aborted_));
    queued_[{peer, header.tag}].push_back(std::move(msg));
    return Status::ok();
  }

  const int rank_, nranks_;
  const uint64_t key_;
  const int listen_fd_;
  const std::vector<SockAddr> table_;
  std::vector<int> out_fd_, in_fd_;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> queued_;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;      // one exchange at a time
  std::mutex fds_mutex_;  // out_fd_ and in_fd_ writes against abort()'s snapshot
};

Status decode_id(const ncclUniqueId& id, IdLayout* out) { return wire::decode_id(id.internal, sizeof(id), out); }


// on: the address to listen on (its port ignored), else the interface
// the sockets' rules pick.
Status create_root(ncclUniqueId* id, bool honour_comm_id, const SockAddr* on = nullptr, int grow_from = 0) {
  IdLayout layout{};
  layout.grow_from = grow_from;
  layout.version = kIdVersion;
  std::string comm_id = honour_comm_id ? env_string("BRAID_COMM_ID") : "";
  if (honour_comm_id && comm_id.empty()) comm_id = env_raw("NCCL_COMM_ID");
  if (!comm_id.empty()) {
    // Every rank computes the same id from the variable; rank 0 hosts the root.
    BRAID_TRY(std::move(parse_endpoint(comm_id, &layout.root)).context("NCCL_COMM_ID/BRAID_COMM_ID"));
    layout.flags = kRankZeroHostsRoot;
    layout.magic = mix(std::hash<std::string>()(comm_id)) | 1;
  } else {
    SockAddr addr{};
    if (on) addr = on->with_port(0);
    else BRAID_TRY(local_address(&addr));
    layout.magic = random64() | 1;
    BRAID_TRY(start_root(addr, layout.magic, &layout.root));
    BRAID_INFO(kBootstrap, "bootstrap root listening on {}", to_string(layout.root));
  }
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, &layout, sizeof(layout));
  return Status::ok();
}

}  // namespace

Status bootstrap_create_root(ncclUniqueId* id) { return create_root(id, true); }
Status bootstrap_create_private_root(const SockAddr& on, ncclUniqueId* id) { return create_root(id, false, &on); }
Status bootstrap_check_id(const ncclUniqueId& id) {
  IdLayout layout{};
  return decode_id(id, &layout);
}
Status bootstrap_create_grow_root(const SockAddr& on, int parent_nranks, ncclUniqueId* id) {
  return create_root(id, false, &on, parent_nranks);
}
Status bootstrap_grow_source(const ncclUniqueId& id, int* parent_nranks) {
  IdLayout layout{};
  BRAID_TRY(decode_id(id, &layout));
  *parent_nranks = layout.grow_from;
  return Status::ok();
}

int first_rank_of_root(int root, int nranks, int nroots) {
  return root * (nranks / nroots) + std::min(root, nranks % nroots);
}
int64_t root_stagger_us(int rank_at_root, int ranks_at_root, std::optional<int64_t> threshold,
                        std::optional<int64_t> rate) {
  const int64_t most = threshold.value_or(0) > 0 ? *threshold : 256;
  const int64_t per_second = rate.value_or(0) > 0 ? *rate : 7000;
  if (ranks_at_root <= most) return 0;
  return int64_t(rank_at_root) * 1000000 / per_second;
}

int root_of_rank(int rank, int nranks, int nroots) {
  const int per = nranks / nroots, extra = nranks % nroots;
  const int big = extra * (per + 1);  // ranks held by the roots with one more
  return rank < big ? rank / (per + 1) : extra + (rank - big) / per;
}

namespace {

// Sleeps root_stagger_us, in slices that watch the abort flag and the deadline.
Status wait_turn_at_root(int rank, int nranks, Deadline deadline, const std::atomic<bool>* abort) {
  const int64_t us = root_stagger_us(rank, nranks, env_nccl_int("NCCL_UID_STAGGER_THRESHOLD"),
                                     env_nccl_int("NCCL_UID_STAGGER_RATE"));
  if (us == 0) return Status::ok();
  BRAID_INFO(kBootstrap | kInit, "rank {}/{}: connecting to the bootstrap root {} ms late, as NCCL_UID_STAGGER_* "
             "say for more ranks at one root than the threshold", rank, nranks, us / 1000);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point turn = Clock::now() + std::chrono::microseconds(us);
  for (Clock::time_point now = Clock::now(); now < turn; now = Clock::now()) {
    if (abort && abort->load()) return BRAID_ERROR(ncclSystemError, "aborted while waiting for a turn at the root");
    if (deadline.expired()) return BRAID_ERROR(ncclTimeout, "the timeout (BRAID_TIMEOUT) came first");
    std::this_thread::sleep_for(std::min<Clock::duration>(turn - now, std::chrono::milliseconds(50)));
  }
  return Status::ok();
}

}  // namespace

Status Bootstrap::connect(const ncclUniqueId& id, int rank, int nranks, Deadline deadline,
                          std::unique_ptr<Bootstrap>* out, const std::atomic<bool>* abort) {
  IdLayout layout{};
  BRAID_TRY(decode_id(id, &layout));
  if (rank == 0 && (layout.flags & kRankZeroHostsRoot)) {
    SockAddr bound{};
    BRAID_TRY(std::move(start_root(layout.root, layout.magic, &bound)).context("starting the NCCL_COMM_ID root"));
  }
  SockAddr me{};
  BRAID_TRY(local_address(&me, &layout.root));  // an interface that reaches the root
  int listen_fd = -1;
  SockAddr listener{};
  BRAID_TRY(listen_tcp(me, &listen_fd, &listener));

  int root_fd = -1;
  RootReply reply{};
  std::vector<SockAddr> table(nranks);
  RootHello hello{layout.magic, rank, nranks, listener};
  Status s = wait_turn_at_root(rank, nranks, deadline, abort);
  if (s.is_ok()) s = connect_tcp(layout.root, deadline, abort, &root_fd);
  if (s.is_ok()) s = tls_secure(&root_fd, TlsRole::Client);
  if (s.is_ok()) s = send_all(root_fd, &hello, sizeof(hello), deadline, abort);
  if (s.is_ok()) s = recv_all(root_fd, &reply, sizeof(reply), deadline, abort);
  if (s.is_ok()) s = recv_all(root_fd, table.data(), table.size() * sizeof(SockAddr), deadline, abort);
  if (root_fd >= 0) ::close(root_fd);
  if (s.is_ok() && reply.magic != layout.magic)
    s = BRAID_ERROR(ncclSystemError, "bootstrap root answered with a foreign magic");
  if (!s.is_ok()) {
    ::close(listen_fd);
    return std::move(s).context(
        fmt::format("rank {}/{}: rendezvous with the bootstrap root at {}", rank, nranks, to_string(layout.root)));
  }
  BRAID_INFO(kBootstrap, "rank {}/{}: bootstrap done, listening on {}", rank, nranks, to_string(listener));
  *out = std::make_unique<SocketBootstrap>(rank, nranks, layout.magic ^ reply.nonce, listen_fd, std::move(table));
  return Status::ok();
}

namespace {

// A scalable bootstrap's inner block and upper bootstraps wait only on
// their own abort(), not on the caller's flag (an ncclCommAbort of a
// non-blocking init raises it): while they exchange, this thread calls
// their abort() once the flag rises, so no wait outlasts an abort.
class AbortWatcher {
 public:
  AbortWatcher(const std::atomic<bool>* abort, std::vector<Bootstrap*> watched) {
    if (!abort) return;
    thread_ = named_thread("braid abort", [this, abort, watched = std::move(watched)] {
      while (!done_.load()) {
        if (abort->load()) {
          for (Bootstrap* b : watched)
            if (b) b->abort();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~AbortWatcher() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  AbortWatcher(const AbortWatcher&) = delete;
  AbortWatcher& operator=(const AbortWatcher&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// For tests: the rank that stalls between its scalable bootstrap's
// rendezvous and its exchanges, until aborted (or the deadline).
Status scalable_test_stall(int rank, Deadline deadline, const std::atomic<bool>* abort) {
  if (env_int("BRAID_TEST_STALL_SCALABLE_RANK") != rank) return Status::ok();
  while (!(abort && abort->load()) && !deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return BRAID_ERROR(ncclInternalError, "BRAID_TEST_STALL_SCALABLE_RANK={}: this rank stalled until {}", rank,
                     abort && abort->load() ? "aborted" : "the deadline");
}

}  // namespace

Status Bootstrap::connect_scalable(const std::vector<ncclUniqueId>& ids, int rank, int nranks, Deadline deadline,
                                   std::unique_ptr<Bootstrap>* out, const std::atomic<bool>* abort) {
  const int nroots = int(ids.size());
  if (nroots < 1 || nroots > nranks)
    return BRAID_ERROR(ncclInvalidArgument, "nId {} must be in [1, nranks = {}]", nroots, nranks);
  std::vector<IdLayout> layouts(nroots);
  for (int k = 0; k < nroots; ++k)
    BRAID_TRY(std::move(decode_id(ids[k], &layouts[k])).context(fmt::format("commIds[{}]", k)));
  if (nroots == 1) return connect(ids[0], rank, nranks, deadline, out, abort);

  const int k = root_of_rank(rank, nranks, nroots);
  const int first = first_rank_of_root(k, nranks, nroots);
  const int size = first_rank_of_root(k + 1, nranks, nroots) - first;
  const int size0 = first_rank_of_root(1, nranks, nroots);
  // Block k > 0 meets at its own root; block 0 meets at root 0 together with
  // the first rank ("leader") of every other block: the upper group.
  std::unique_ptr<Bootstrap> block, upper;
  if (k > 0) BRAID_TRY(connect(ids[k], rank - first, size, deadline, &block, abort));
  const bool in_upper = k == 0 || rank == first;
  const int upper_rank = k == 0 ? rank : size0 + k - 1;
  if (in_upper) BRAID_TRY(connect(ids[0], upper_rank, size0 + nroots - 1, deadline, &upper, abort));
  const AbortWatcher watcher(abort, {block.get(), upper.get()});
  BRAID_TRY(scalable_test_stall(rank, deadline, abort));

  // The final communicator listens on its own socket.
  SockAddr me{};
  BRAID_TRY(local_address(&me, &layouts[0].root));
  int listen_fd = -1;
  SockAddr listener{};
  BRAID_TRY(listen_tcp(me, &listen_fd, &listener));
  auto fail = [&](Status s) {
    ::close(listen_fd);
    return std::move(s).context(fmt::format("rank {}/{}: scalable bootstrap over {} roots", rank, nranks, nroots));
  };

  constexpr int kTag = 0x5ca1ab1e;
  std::vector<SockAddr> blk(size);
  blk[rank - first] = listener;
  if (block) {
    Status s = block->allgather(blk.data(), sizeof(SockAddr));
    if (!s.is_ok()) return fail(std::move(s));
  }
  // Rank 0 collects every block's table, picks the nonce, sends the result
  // to the upper group; leaders pass it on to their blocks.
  std::vector<char> result(sizeof(uint64_t) + size_t(nranks) * sizeof(SockAddr));
  auto* table = reinterpret_cast<SockAddr*>(result.data() + sizeof(uint64_t));
  Status s;
  if (rank == 0) {
    table[0] = listener;
    for (int u = 1; u < size0 + nroots - 1 && s.is_ok(); ++u) {
      int from_block = u < size0 ? 0 : u - size0 + 1;
      int at = u < size0 ? u : first_rank_of_root(from_block, nranks, nroots);
      int count = u < size0 ? 1 : first_rank_of_root(from_block + 1, nranks, nroots) - at;
      s = upper->recv(u, kTag, table + at, size_t(count) * sizeof(SockAddr));
    }
    uint64_t nonce = random64();
    std::memcpy(result.data(), &nonce, sizeof(nonce));
    for (int u = 1; u < size0 + nroots - 1 && s.is_ok(); ++u) s = upper->send(u, kTag, result.data(), result.size());
  } else if (in_upper) {
    s = k == 0 ? upper->send(0, kTag, &listener, sizeof(listener))
               : upper->send(0, kTag, blk.data(), blk.size() * sizeof(SockAddr));
    if (s.is_ok()) s = upper->recv(0, kTag, result.data(), result.size());
  }
  if (s.is_ok() && block) {
    if (rank == first)
      for (int b = 1; b < size && s.is_ok(); ++b) s = block->send(b, kTag, result.data(), result.size());
    else
      s = block->recv(0, kTag, result.data(), result.size());
  }
  if (!s.is_ok()) return fail(std::move(s));
  uint64_t nonce = 0;
  std::memcpy(&nonce, result.data(), sizeof(nonce));
  std::vector<SockAddr> all(table, table + nranks);
  BRAID_INFO(kBootstrap, "rank {}/{}: bootstrap over {} roots done, listening on {}", rank, nranks, nroots,
             to_string(listener));
  *out = std::make_unique<SocketBootstrap>(rank, nranks, layouts[0].magic ^ nonce, listen_fd, std::move(all));
  return Status::ok();
}

Status Bootstrap::agree(Status local, const std::string& what) {
  std::vector<int64_t> oks(static_cast<size_t>(nranks()));
  oks[size_t(rank())] = local.is_ok();
  BRAID_TRY(std::move(allgather(oks.data(), sizeof(int64_t))).context(what));
  BRAID_TRY(std::move(local));
  for (int r = 0; r < nranks(); ++r)
    if (!oks[size_t(r)]) return BRAID_ERROR(ncclInvalidUsage, "{} failed on rank {} (its log says why)", what, r);
  return Status::ok();
}

}  // namespace braid

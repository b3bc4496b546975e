#include "src/transport/peer_processes.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "src/base/env.h"
#include "src/base/log.h"

namespace braid {
namespace {

bool has_exited(int pidfd) {
  pollfd q{pidfd, POLLIN, 0};
  return ::poll(&q, 1, 0) == 1 && (q.revents & POLLIN);
}

// shared_pidfd's, by pid.
std::mutex pidfds_mutex;
std::map<int32_t, std::weak_ptr<const UniqueFd>> pidfds_opened;

// A pidfd of process `pid` of this namespace, shared by every communicator
// that watches it: a job with many communicators holds one descriptor per
// peer process, not one per peer and communicator.  A cached one whose
// process has exited is not handed out again (the pid may name a new
// process now).  Null where none can be opened (the process is gone, or
// pidfds are missing: Linux before 5.3).
std::shared_ptr<const UniqueFd> shared_pidfd(int32_t pid) {
  // A fork waits until no thread is here, so that a child never inherits
  // the map half-changed or the mutex held.
  static const bool fork_safe =
      pthread_atfork([] { pidfds_mutex.lock(); }, [] { pidfds_mutex.unlock(); }, [] { pidfds_mutex.unlock(); }) == 0;
  (void)fork_safe;
  std::lock_guard<std::mutex> lock(pidfds_mutex);
  std::erase_if(pidfds_opened, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = pidfds_opened.find(pid); it != pidfds_opened.end())
    if (auto fd = it->second.lock(); fd && !has_exited(fd->get())) return fd;
  auto fd = std::make_shared<const UniqueFd>(int(::syscall(SYS_pidfd_open, pid, 0)));
  if (fd->get() < 0) return nullptr;
  pidfds_opened[pid] = fd;
  return fd;
}

// Whether two ranks of one host are in different pid namespaces: the same
// answer on every rank, so that all take part in the exchange, or none.
bool namespaces_differ_on_a_host(const std::vector<PeerInfo>& peers) {
  for (const PeerInfo& a : peers)
    for (const PeerInfo& b : peers)
      if (a.host_hash == b.host_hash && a.pid_ns != b.pid_ns) return true;
  return false;
}

}  // namespace

std::shared_ptr<const PeerProcesses> PeerProcesses::local(const TransportContext& ctx) {
  std::shared_ptr<PeerProcesses> p(new PeerProcesses);
  const PeerInfo& mine = ctx.peers[size_t(ctx.rank)];
  for (const PeerInfo& peer : ctx.peers) {
    p->reported_.push_back(peer.pid);
    const bool other_process = peer.host_hash == mine.host_hash && !same_process(peer, mine);
    p->pids_.push_back(other_process ? watchable_pid(peer, mine) : 0);
  }
  // Processes of this namespace are opened here (one already gone keeps
  // only its pid, which then answers ESRCH).
  p->pidfds_.resize(ctx.peers.size());
  for (size_t r = 0; r < p->pids_.size(); ++r)
    if (p->pids_[r] > 0) p->pidfds_[r] = shared_pidfd(p->pids_[r]);
  return p;
}

Status PeerProcesses::create(const TransportContext& ctx, Bootstrap& bootstrap,
                             std::shared_ptr<const PeerProcesses>* out) {
  std::shared_ptr<PeerProcesses> p = std::const_pointer_cast<PeerProcesses>(local(ctx));
  // Another namespace's processes pass their own.
  if (namespaces_differ_on_a_host(ctx.peers)) {
    UniqueFd own(int(::syscall(SYS_pidfd_open, ::getpid(), 0)));
    if (own.get() < 0) BRAID_INFO(kInit, "rank {}: no pidfd of this process ({})", ctx.rank, std::strerror(errno));
    const int mine[1] = {own.get()};  // every rank takes part, with one or without: the exchange is collective
    std::vector<std::vector<UniqueFd>> theirs;
    Status s = exchange_fds(ctx, bootstrap, std::span<const int>(mine, own.get() >= 0 ? 1 : 0), &theirs,
                            Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT"))));
    if (!s.is_ok())
      BRAID_WARN("rank {}: passing pidfds failed ({}): peers of other pid namespaces are not watched", ctx.rank,
                 s.to_string());
    for (size_t r = 0; r < theirs.size() && s.is_ok(); ++r)
      if (theirs[r].size() == 1 && !p->pidfds_[r])
        p->pidfds_[r] = std::make_shared<const UniqueFd>(std::move(theirs[r][0]));
  }
  const size_t watched = size_t(std::count_if(p->pidfds_.begin(), p->pidfds_.end(), [](const auto& fd) { return fd; }));
  BRAID_INFO(kInit, "rank {}: {} peer processes of this host watched through pidfds", ctx.rank, watched);
  *out = std::move(p);
  return Status::ok();
}

bool PeerProcesses::exited(int rank) const {
  if (const auto& fd = pidfds_[size_t(rank)]) return has_exited(fd->get());
  const int32_t pid = pids_[size_t(rank)];
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

std::vector<WatchedProcess> PeerProcesses::watchable() const {
  std::vector<WatchedProcess> out;
  for (size_t r = 0; r < reported_.size(); ++r)
    if (pidfds_[r] || pids_[r] > 0)
      out.push_back({.rank = int(r), .pid = reported_[r], .pidfd = pidfds_[r] ? pidfds_[r]->get() : -1});
  return out;
}

}  // namespace braid

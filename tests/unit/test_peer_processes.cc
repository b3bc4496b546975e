// PeerProcesses (src/transport/peer_processes.h): whether a peer's process
// has exited, asked of its pidfd: at its exit, zombie or not; one descriptor
// per process however many communicators watch it; and no answer from a
// pid that does not name the peer here.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "src/base/host_identity.h"
#include "src/transport/peer_processes.h"

using namespace braid;

namespace {

PeerInfo peer(int32_t pid, uint64_t host = 1, uint64_t pid_ns = pid_namespace()) {
  PeerInfo p;
  p.pid = pid;
  p.host_hash = host;
  p.pid_ns = pid_ns;
  return p;
}

TransportContext context(std::vector<PeerInfo> peers) {
  TransportContext ctx;
  ctx.rank = 0;
  ctx.nranks = int(peers.size());
  ctx.peers = std::move(peers);
  return ctx;
}

// A child that exits when `release` is written to (or closed).
struct Child {
  pid_t pid = -1;
  int release = -1;
  Child() {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid = ::fork();
    if (pid == 0) {
      char c;
      ::close(fds[1]);
      (void)!::read(fds[0], &c, 1);
      ::_exit(0);
    }
    ::close(fds[0]);
    release = fds[1];
  }
  void exit() {
    ::close(release);
    release = -1;
  }
  ~Child() {
    if (release >= 0) ::close(release);
    ::waitpid(pid, nullptr, 0);
  }
};

int open_descriptors() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (::readdir(d)) ++n;
  ::closedir(d);
  return n;
}

bool exits_within(const PeerProcesses& p, int rank, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!p.exited(rank)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("peer processes: a peer is alive until its exit, and exited from then on, reaped or not",
          "[peer_processes]") {
  Child child;
  auto p = PeerProcesses::local(context({peer(::getpid()), peer(child.pid)}));
  CHECK_FALSE(p->exited(0));
  CHECK_FALSE(p->exited(1));
  REQUIRE(p->watchable().size() == 1);
  CHECK(p->watchable()[0].rank == 1);
  CHECK(p->watchable()[0].pid == child.pid);
  CHECK(p->watchable()[0].pidfd >= 0);
  child.exit();
  CHECK(exits_within(*p, 1, std::chrono::seconds(10)));
  CHECK(::kill(child.pid, 0) == 0);  // a zombie: still found by its pid
  CHECK(::waitpid(child.pid, nullptr, 0) == child.pid);
  CHECK(p->exited(1));
  CHECK_FALSE(p->exited(0));
}

TEST_CASE("peer processes: one descriptor per peer process, however many communicators watch it", "[peer_processes]") {
  Child child;
  const int before = open_descriptors();
  std::vector<std::shared_ptr<const PeerProcesses>> comms;
  for (int i = 0; i < 20; ++i) comms.push_back(PeerProcesses::local(context({peer(::getpid()), peer(child.pid)})));
  CHECK(open_descriptors() == before + 1);
  for (const auto& p : comms) CHECK(p->watchable()[0].pidfd == comms[0]->watchable()[0].pidfd);
  comms.clear();
  CHECK(open_descriptors() == before);
}

TEST_CASE("peer processes: this process's ranks, other hosts' and other pid namespaces' are not watched by pid",
          "[peer_processes]") {
  Child child;  // its pid, as each peer below reports it
  auto p = PeerProcesses::local(context({
      peer(::getpid()),                         // this rank
      peer(::getpid()),                         // a thread of this process
      peer(child.pid, /*host=*/2),              // a process of another host
      peer(child.pid, 1, pid_namespace() + 1),  // a process of another pid namespace
  }));
  CHECK(p->watchable().empty());
  child.exit();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int r = 0; r < 4; ++r) CHECK_FALSE(p->exited(r));  // that pid does not name any of them
  CHECK(p->pid(3) == child.pid);
}

// Passing file descriptors between processes (src/transport/fd_passing.h),
// with real forked ranks on a real bootstrap: what arrives maps the sender's
// memory (its bytes, and what the receiver writes the sender sees), every
// rank of the host gets every other process's descriptors, and ranks said to
// be of another host or of one process pass nothing to each other.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "src/base/host_identity.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/fd_passing.h"
#include "src/transport/host_memory.h"

using namespace braid;

namespace {

// The ranks' peer table as the bootstrap gathers it; `adjust` then changes
// what a test wants to pretend (the same on every rank).
using Adjust = std::function<void(std::vector<PeerInfo>&)>;

// Runs `body` on n forked ranks with a bootstrap and peer table; returns the
// number of ranks that failed.  The root starts after the fork, in the
// parent, and its id reaches the children through pipes (as mp::fork_ranks
// does: no thread runs while this process forks).
int run_fd_ranks(int n, const Adjust& adjust, const std::function<bool(const TransportContext&, Bootstrap&)>& body) {
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  std::vector<int> writers;
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) break;
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(60);
      for (int w : writers) close(w);
      close(fds[1]);
      ncclUniqueId id;
      if (read(fds[0], &id, sizeof id) != ssize_t(sizeof id)) _exit(3);
      std::unique_ptr<Bootstrap> bs;
      if (!Bootstrap::connect(id, r, n, Deadline::after(std::chrono::seconds(30)), &bs).is_ok()) _exit(2);
      TransportContext comm;
      comm.rank = r;
      comm.nranks = n;
      comm.peers.resize(size_t(n));
      comm.peers[size_t(r)].host_hash = host_hash();
      comm.peers[size_t(r)].pid = int32_t(getpid());
      if (!bs->allgather(comm.peers.data(), sizeof(PeerInfo)).is_ok()) _exit(2);
      if (adjust) adjust(comm.peers);
      const bool ok = body(comm, *bs);
      std::fflush(nullptr);
      _exit(ok ? 0 : 1);
    }
    close(fds[0]);
    writers.push_back(fds[1]);
    pids.push_back(pid);
  }
  ncclUniqueId id;
  const bool rooted = bootstrap_create_root(&id).is_ok();
  for (int w : writers) {
    if (rooted) (void)!write(w, &id, sizeof id);
    close(w);
  }
  int bad = n - int(pids.size());
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  return bad;
}

// Rank r's memory: `fds` memfds of one page, byte k of memfd i = 'a' + r + i.
struct RankMemory {
  std::vector<void*> pages;
  std::vector<int> fds;
  RankMemory(int rank, int count) {
    for (int i = 0; i < count; ++i) {
      void* p = nullptr;
      if (!host_shared_alloc(4096, &p).is_ok()) continue;
      std::memset(p, 'a' + rank + i, 4096);
      pages.push_back(p);
      fds.push_back(host_shared_handle(p, 1).fd);
    }
  }
  ~RankMemory() {
    for (void* p : pages) host_shared_free(p);
  }
};

// Whether `fd` maps a page that peer `rank`'s memfd `i` filled.
bool holds_page_of(int fd, int rank, int i) {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  const char* c = static_cast<const char*>(p);
  const bool ok = c[0] == char('a' + rank + i) && c[4095] == char('a' + rank + i);
  munmap(p, 4096);
  return ok;
}

}  // namespace

TEST_CASE("fd passing: every process of the host gets every other's descriptors, which map its memory",
          "[unit][fd_passing]") {
  for (int n : {2, 3, 5}) {
    INFO(n << " ranks");
    CHECK(run_fd_ranks(n, {}, [&](const TransportContext& comm, Bootstrap& bs) {
            RankMemory mine(comm.rank, 2);
            if (mine.fds.size() != 2) return false;
            std::vector<std::vector<UniqueFd>> theirs;
            if (!exchange_fds(comm, bs, mine.fds, &theirs, Deadline::after(std::chrono::seconds(20))).is_ok())
              return false;
            for (int r = 0; r < comm.nranks; ++r) {
              if (r == comm.rank) {
                if (!theirs[size_t(r)].empty()) return false;
                continue;
              }
              if (theirs[size_t(r)].size() != 2) return false;
              for (int i = 0; i < 2; ++i)
                if (!holds_page_of(theirs[size_t(r)][size_t(i)].get(), r, i)) return false;
            }
            // What one rank writes through a passed descriptor, its owner reads.
            void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
                           theirs[size_t((comm.rank + 1) % comm.nranks)][0].get(), 0);
            if (p == MAP_FAILED) return false;
            static_cast<char*>(p)[comm.rank + 8] = 'W';
            munmap(p, 4096);
            if (!bs.barrier().is_ok()) return false;
            const int from = (comm.rank + comm.nranks - 1) % comm.nranks;
            return static_cast<const char*>(mine.pages[0])[from + 8] == 'W';
          }) == 0);
  }
}

TEST_CASE("fd passing: ranks of another host or of one process pass nothing, and a rank may pass none",
          "[unit][fd_passing]") {
  // Rank 0 pretends to be on another host; ranks 2 and 3 pretend to be one
  // process; rank 1 has no descriptors to pass.
  CHECK(run_fd_ranks(
            4,
            [](std::vector<PeerInfo>& peers) {
              peers[0].host_hash ^= 1;
              peers[3].pid = peers[2].pid;
            },
            [&](const TransportContext& comm, Bootstrap& bs) {
              RankMemory mine(comm.rank, comm.rank == 1 ? 0 : 1);
              std::vector<std::vector<UniqueFd>> theirs;
              if (!exchange_fds(comm, bs, mine.fds, &theirs, Deadline::after(std::chrono::seconds(20))).is_ok())
                return false;
              auto passed = [&](int from) { return theirs[size_t(from)].size(); };
              switch (comm.rank) {
                case 0:
                  return passed(1) == 0 && passed(2) == 0 && passed(3) == 0;
                case 1:
                  return passed(0) == 0 && passed(2) == 1 && passed(3) == 1 &&
                         holds_page_of(theirs[2][0].get(), 2, 0) && holds_page_of(theirs[3][0].get(), 3, 0);
                case 2:
                  return passed(0) == 0 && passed(1) == 0 && passed(3) == 0;
                default:
                  return passed(0) == 0 && passed(1) == 0 && passed(2) == 0;
              }
            }) == 0);
  // Nobody has a peer in another process of its host: nothing is exchanged,
  // and nothing waits.
  CHECK(run_fd_ranks(
            3, [](std::vector<PeerInfo>& peers) { peers[1].host_hash ^= 1, peers[2].host_hash ^= 2; },
            [&](const TransportContext& comm, Bootstrap& bs) {
              RankMemory mine(comm.rank, 1);
              std::vector<std::vector<UniqueFd>> theirs;
              return exchange_fds(comm, bs, mine.fds, &theirs, Deadline::after(std::chrono::seconds(5))).is_ok() &&
                     theirs.size() == 3 && theirs[0].empty() && theirs[1].empty() && theirs[2].empty();
            }) == 0);
}

TEST_CASE("fd passing: too many descriptors are refused before anything is sent", "[unit][fd_passing]") {
  CHECK(run_fd_ranks(2, {}, [&](const TransportContext& comm, Bootstrap& bs) {
          std::vector<int> many(kMaxPassedFds + 1, 0);
          std::vector<std::vector<UniqueFd>> theirs;
          Status s = exchange_fds(comm, bs, many, &theirs, Deadline::after(std::chrono::seconds(5)));
          return !s.is_ok() && s.message().find("more than") != std::string::npos;
        }) == 0);
}

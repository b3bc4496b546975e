// A process may fork right after ncclGetUniqueId (a launcher that makes the
// id, then forks its ranks).  The id starts the bootstrap root's thread; a
// fork while that thread is inside malloc leaves the child holding the
// allocator's lock for good.  glibc's malloc guards against it, sanitizer
// allocators do not, so this test has teeth in the ASan build: there, before
// ncclGetUniqueId waited for the thread's start-up, forked children hung in
// their first allocation (the socket-interface test did, once in CI).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "nccl.h"

TEST_CASE("fork right after ncclGetUniqueId: the children can allocate", "[mp][bootstrap][fork]") {
  constexpr int kRounds = 40, kChildren = 2;
  int hung_or_failed = 0;
  for (int round = 0; round < kRounds; ++round) {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    std::fflush(nullptr);
    std::vector<pid_t> pids;
    for (int c = 0; c < kChildren; ++c) {
      pid_t pid = fork();
      if (pid == 0) {
        alarm(20);  // a child stuck on the allocator's lock dies of SIGALRM
        std::vector<std::string> words;
        for (int i = 0; i < 1000; ++i) words.push_back(std::string(size_t(64 + i % 512), 'x'));
        _exit(words.size() == 1000 ? 0 : 1);
      }
      REQUIRE(pid > 0);
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++hung_or_failed;
    }
  }
  CHECK(hung_or_failed == 0);
}

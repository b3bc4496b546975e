// A forked child for cross-memory-attach tests (src/transport/cross_memory.h):
// it fills a buffer (inherited from the parent, at the same address),
// publishes its CMA probe through a pipe and waits until killed.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "src/transport/cross_memory.h"

namespace mp {

struct CmaChild {
  pid_t pid = -1;
  braid::CmaProbe probe;
  CmaChild(std::vector<char>& buf, char pattern) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::memset(buf.data(), pattern, buf.size());
      braid::CmaProbe p = braid::cma_probe_of_this_process();
      (void)!write(fds[1], &p, sizeof p);
      pause();
      _exit(0);
    }
    close(fds[1]);
    REQUIRE(read(fds[0], &probe, sizeof probe) == ssize_t(sizeof probe));
    close(fds[0]);
  }
  void end() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~CmaChild() { end(); }
};

// Whether this machine lets a process read its child (seccomp, Yama or a
// container may not); says so in the test's output when it does not.
inline bool cma_works_here() {
  std::vector<char> b(64, 0);
  CmaChild c(b, 1);
  if (braid::cma_can_read(c.pid, c.probe)) return true;
  WARN("process_vm_readv is not permitted here: nothing to test");
  return false;
}

}  // namespace mp

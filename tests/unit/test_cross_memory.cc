// Cross-memory attach (src/core/cross_memory.h) against real processes:
// what a child wrote is what the parent reads, and failures say why.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "src/core/cross_memory.h"

namespace {

// A forked child that fills `buf` with `pattern`, takes its probe, reports
// the probe through a pipe and waits until killed.
struct Child {
  pid_t pid = -1;
  braid::CmaProbe probe;
  Child(std::vector<char>& buf, char pattern) {
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
  ~Child() { end(); }
};

// Whether this machine lets a parent read its child (seccomp may not).
bool cma_available() {
  std::vector<char> b(64, 0);
  Child c(b, 1);
  return braid::cma_can_read(c.pid, c.probe);
}

}  // namespace

TEST_CASE("cross memory: a read returns the other process's bytes, not ours", "[unit][cma]") {
  if (!cma_available()) {
    WARN("process_vm_readv is not permitted here: nothing to test");
    return;
  }
  std::vector<char> buf(3 << 20, 'p');  // same address in the child, its own copy after the write
  Child child(buf, 'c');
  std::vector<char> got(buf.size() - 100, 0);
  REQUIRE(braid::cma_read(child.pid, got.data(), reinterpret_cast<uint64_t>(buf.data()) + 100, got.size()).is_ok());
  CHECK(std::count(got.begin(), got.end(), 'c') == ptrdiff_t(got.size()));
  CHECK(buf[0] == 'p');
  CHECK(braid::cma_can_read(child.pid, child.probe));
  // Our own probe is not the child's: a reader can tell the processes apart.
  braid::CmaProbe mine = braid::cma_probe_of_this_process();
  CHECK(mine.value != child.probe.value);
  CHECK_FALSE(braid::cma_can_read(child.pid, braid::CmaProbe{child.probe.address, child.probe.value + 1}));
}

TEST_CASE("cross memory: unmapped ranges and dead processes are errors that say so", "[unit][cma]") {
  if (!cma_available()) {
    WARN("process_vm_readv is not permitted here: nothing to test");
    return;
  }
  std::vector<char> buf(4096);
  Child child(buf, 'x');
  char one = 0;
  braid::Status s = braid::cma_read(child.pid, &one, 16, 1);
  CHECK(s.code() == ncclRemoteError);
  CHECK(s.message().find("not mapped") != std::string::npos);
  const pid_t gone = child.pid;
  child.end();
  s = braid::cma_read(gone, &one, reinterpret_cast<uint64_t>(buf.data()), 1);
  CHECK(s.code() == ncclRemoteError);
  CHECK(s.message().find("gone") != std::string::npos);
  CHECK_FALSE(braid::cma_can_read(gone, child.probe));
}

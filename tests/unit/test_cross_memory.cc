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

#include "cma_child.h"
#include "src/core/cross_memory.h"

using mp::CmaChild;

TEST_CASE("cross memory: a read returns the other process's bytes, not ours", "[unit][cma]") {
  if (!mp::cma_works_here()) return;
  std::vector<char> buf(3 << 20, 'p');  // same address in the child, its own copy after the write
  CmaChild child(buf, 'c');
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
  if (!mp::cma_works_here()) return;
  std::vector<char> buf(4096);
  CmaChild child(buf, 'x');
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

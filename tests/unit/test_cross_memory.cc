// Cross-memory attach (src/transport/cross_memory.h) against real processes:
// what a child wrote is what the parent reads, what the parent writes lands
// in the child only, and failures say why.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cma_child.h"
#include "src/transport/cross_memory.h"

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

TEST_CASE("cross memory: a write lands in the other process only, and a read-only range is refused",
          "[unit][cma]") {
  if (!mp::cma_works_here()) return;
  std::vector<char> buf(3 << 20, 'p');
  // Read-only in the child as in the parent (inherited at the same address).
  void* ro = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(ro != MAP_FAILED);
  CmaChild child(buf, 'c');
  const uint64_t at = reinterpret_cast<uint64_t>(buf.data());
  std::vector<char> ours(buf.size() - 300, 'w');
  REQUIRE(braid::cma_write(child.pid, at + 100, ours.data(), ours.size()).is_ok());
  std::vector<char> theirs(buf.size(), 0);
  REQUIRE(braid::cma_read(child.pid, theirs.data(), at, theirs.size()).is_ok());
  CHECK(std::count(theirs.begin(), theirs.begin() + 100, 'c') == 100);
  CHECK(std::count(theirs.begin() + 100, theirs.end() - 200, 'w') == ptrdiff_t(ours.size()));
  CHECK(std::count(theirs.end() - 200, theirs.end(), 'c') == 200);
  CHECK(std::count(buf.begin(), buf.end(), 'p') == ptrdiff_t(buf.size()));  // ours untouched
  braid::Status s = braid::cma_write(child.pid, reinterpret_cast<uint64_t>(ro), ours.data(), 64);
  CHECK(s.code() == ncclRemoteError);
  CHECK(s.message().find("writable") != std::string::npos);
  s = braid::cma_write(child.pid, 16, ours.data(), 1);
  CHECK(s.code() == ncclRemoteError);
  const pid_t gone = child.pid;
  child.end();
  s = braid::cma_write(gone, at, ours.data(), 1);
  CHECK(s.code() == ncclRemoteError);
  CHECK(s.message().find("gone") != std::string::npos);
  munmap(ro, 4096);
}

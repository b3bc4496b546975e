// this_process() (src/base/host_identity.h): with the pid, what tells ranks
// in one address space from ranks in another.  Forked children in pid
// namespaces of their own all have pid 2, so the value must differ between
// them although their parent drew it before forking (once a real bug: such
// ranks took each other for threads of one process and loaded each other's
// addresses).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "src/base/host_identity.h"

using braid::this_process;

TEST_CASE("this_process: one value for every thread, a new one in every forked child", "[host_identity]") {
  const uint64_t mine = this_process();
  CHECK(mine != 0);
  std::vector<uint64_t> seen(4);
  std::vector<std::thread> threads;
  for (auto& s : seen) threads.emplace_back([&s] { s = this_process(); });
  for (auto& t : threads) t.join();
  for (uint64_t s : seen) CHECK(s == mine);

  std::set<uint64_t> values{mine};
  for (int i = 0; i < 3; ++i) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t child = ::fork();
    if (child == 0) {
      const uint64_t v = this_process();
      const bool stable = this_process() == v;
      (void)!::write(fds[1], &v, sizeof v);
      ::_exit(stable ? 0 : 1);
    }
    ::close(fds[1]);
    uint64_t v = 0;
    CHECK(::read(fds[0], &v, sizeof v) == sizeof v);
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    values.insert(v);
  }
  CHECK(values.size() == 4);  // the parent's and three children's, all different
  CHECK(this_process() == mine);
}

// ShmSegment (src/transport/shm_segment.h): named segments, one mapping per
// process, so ranks that are threads share addresses.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "src/transport/shm_segment.h"

using braid::ShmSegment;
using Mode = ShmSegment::Mode;
using Opened = ShmSegment::Opened;

namespace {

std::string unique_name(const char* what) {
  static std::atomic<int> n{0};
  return "/braid-test-" + std::to_string(::getpid()) + "-" + what + "-" + std::to_string(n++);
}

}  // namespace

TEST_CASE("shm segment: opens of one name in a process share one mapping", "[shm]") {
  const std::string name = unique_name("share");
  std::shared_ptr<ShmSegment> a, b;
  Opened how;
  REQUIRE(ShmSegment::open(name, 4096, Mode::CreateOrAttach, &a, &how).is_ok());
  REQUIRE(a);
  CHECK(how == Opened::Created);
  CHECK(static_cast<const char*>(a->base())[100] == 0);  // zero-filled
  REQUIRE(ShmSegment::open(name, 4096, Mode::CreateOrAttach, &b, &how).is_ok());
  REQUIRE(b);
  CHECK(how == Opened::Shared);
  CHECK(a->base() == b->base());
  // Asking for more than the mapping holds is an error, not an overrun.
  std::shared_ptr<ShmSegment> c;
  CHECK(ShmSegment::open(name, 8192, Mode::Attach, &c, &how).code() == ncclInternalError);
  // A name that exists cannot be created again.
  CHECK(ShmSegment::open(name, 4096, Mode::Create, &c, &how).code() == ncclSystemError);
  ShmSegment::unlink(name);
}

TEST_CASE("shm segment: attach waits for a name, and after unlink the next open is a new object", "[shm]") {
  const std::string name = unique_name("attach");
  std::shared_ptr<ShmSegment> a, b;
  Opened how;
  REQUIRE(ShmSegment::open(name, 4096, Mode::Attach, &a, &how).is_ok());
  CHECK(!a);  // nothing yet: try again later
  REQUIRE(ShmSegment::open(name, 4096, Mode::Create, &a, &how).is_ok());
  REQUIRE(a);
  static_cast<char*>(a->base())[0] = 7;
  ShmSegment::unlink(name);
  ShmSegment::unlink(name);  // already gone: fine
  CHECK(static_cast<char*>(a->base())[0] == 7);  // the mapping outlives the name
  REQUIRE(ShmSegment::open(name, 4096, Mode::Attach, &b, &how).is_ok());
  CHECK(!b);
  REQUIRE(ShmSegment::open(name, 4096, Mode::CreateOrAttach, &b, &how).is_ok());
  REQUIRE(b);
  CHECK(how == Opened::Created);
  CHECK(b->base() != a->base());
  CHECK(static_cast<char*>(b->base())[0] == 0);
  ShmSegment::unlink(name);
}

TEST_CASE("shm segment: another process maps the same bytes", "[shm]") {
  const std::string name = unique_name("fork");
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Created by the parent after the fork: the child maps it on its own.
    std::shared_ptr<ShmSegment> b;
    Opened how = Opened::Shared;
    for (int tries = 0; tries < 10000 && !b; ++tries) {
      if (!ShmSegment::open(name, 4096, Mode::Attach, &b, &how).is_ok()) ::_exit(2);
      if (!b) ::usleep(1000);
    }
    if (!b || how != Opened::Mapped) ::_exit(1);
    static_cast<std::atomic<uint32_t>*>(b->base())->store(42);
    ::_exit(0);
  }
  std::shared_ptr<ShmSegment> a;
  Opened how;
  REQUIRE(ShmSegment::open(name, 4096, Mode::Create, &a, &how).is_ok());
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(static_cast<std::atomic<uint32_t>*>(a->base())->load() == 42);
  ShmSegment::unlink(name);
}

TEST_CASE("shm segment: resident_bytes counts the pages allocated, by whichever process", "[shm]") {
  const std::string name = unique_name("resident");
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  constexpr size_t kBytes = 1 << 20;
  std::shared_ptr<ShmSegment> a;
  Opened how;
  REQUIRE(ShmSegment::open(name, kBytes, Mode::Create, &a, &how, page).is_ok());
  REQUIRE(a);
  CHECK(a->resident_bytes() == page);  // the reserve alone
  REQUIRE(a->populate(64 * 1024, 128 * 1024).is_ok());
  CHECK(a->resident_bytes() == page + 128 * 1024);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child's own mapping, none of whose pages it touched, sees the same; then it allocates 8 pages more.
    a.reset();  // the mapping inherited from the parent goes: the open below maps the segment anew
    std::shared_ptr<ShmSegment> b;
    if (!ShmSegment::open(name, kBytes, Mode::Attach, &b, &how).is_ok() || !b || how != Opened::Mapped) ::_exit(1);
    if (b->resident_bytes() != page + 128 * 1024) ::_exit(2);
    if (!b->populate(512 * 1024, 8 * page).is_ok()) ::_exit(3);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(a->resident_bytes() == 9 * page + 128 * 1024);
  ShmSegment::unlink(name);
}

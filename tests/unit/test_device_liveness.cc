// DeviceLiveness (src/runtime/device_liveness.h): the word 2.29's and 2.30's
// devComms carry as abortFlag, raised with the first reason by a fault (a
// caller's, or the watch seeing an LSA peer's process exit), or with none by
// a deliberate stop; the watch ends promptly when the object goes while
// every peer lives.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "src/runtime/device_liveness.h"
#include "sleeper.h"

using namespace braid;

namespace {

bool raised(const DeviceLiveness& l) { return __atomic_load_n(l.device_flag(), __ATOMIC_ACQUIRE) != 0; }

}  // namespace

TEST_CASE("device liveness: raise keeps the first reason and sets the word", "[device][liveness]") {
  std::unique_ptr<DeviceLiveness> l;
  REQUIRE(DeviceLiveness::create(host_device_api_memory(), {}, &l).is_ok());
  CHECK_FALSE(raised(*l));
  CHECK(l->reason().is_ok());
  l->raise(Status::error(ncclInvalidUsage, "first"));
  l->raise(Status::error(ncclRemoteError, "second"));
  CHECK(raised(*l));
  CHECK(l->reason().code() == ncclInvalidUsage);
  CHECK(l->reason().message() == "first");
}

TEST_CASE("device liveness: a deliberate stop raises the word and reports no fault", "[device][liveness]") {
  std::unique_ptr<DeviceLiveness> l;
  REQUIRE(DeviceLiveness::create(host_device_api_memory(), {}, &l).is_ok());
  l->stop();
  CHECK(raised(*l));
  CHECK(l->reason().is_ok());
}

TEST_CASE("device liveness: a watched process that exits raises the word, naming its rank", "[device][liveness]") {
  const pid_t peer = sleeper();
  REQUIRE(peer > 0);
  std::unique_ptr<DeviceLiveness> l;
  REQUIRE(DeviceLiveness::create(host_device_api_memory(), {{5, int(peer)}}, &l).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(raised(*l));  // alive: nothing yet
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!raised(*l) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(raised(*l));
  CHECK(l->reason().code() == ncclRemoteError);
  CHECK_THAT(l->reason().message(), Catch::Contains("rank 5 (process"));
}

TEST_CASE("device liveness: the watch ends when the object goes, its peers alive", "[device][liveness]") {
  const pid_t peer = sleeper();
  REQUIRE(peer > 0);
  const auto start = std::chrono::steady_clock::now();
  {
    std::unique_ptr<DeviceLiveness> l;
    REQUIRE(DeviceLiveness::create(host_device_api_memory(), {{1, int(peer)}}, &l).is_ok());
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
}

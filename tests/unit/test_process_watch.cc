// ProcessWatch (src/base/process_watch.h): each watched process that exits
// is reported once, naming its rank, even while it is an unreaped zombie;
// one already gone is reported at once; the watch ends promptly, reporting
// nothing, when it goes while its processes live.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "src/base/process_watch.h"
#include "sleeper.h"

using namespace braid;

namespace {

// What on_exit was called with, from the watch's thread.
struct Exits {
  std::mutex mu;
  std::vector<std::pair<int, Status>> seen;
  ProcessWatch::OnExit callback() {
    return [this](int rank, const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace_back(rank, s);
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size();
  }
  bool wait_for(size_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return count() >= n;
  }
};

}  // namespace

TEST_CASE("process watch: each exit is reported once naming its rank even as a zombie", "[process_watch]") {
  const pid_t a = sleeper(), b = sleeper();
  REQUIRE(a > 0);
  REQUIRE(b > 0);
  Exits exits;
  std::unique_ptr<ProcessWatch> w;
  REQUIRE(ProcessWatch::start({{3, int(a)}, {7, int(b)}}, "test", exits.callback(), &w).is_ok());
  CHECK(w->watched() == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(exits.count() == 0);  // both alive
  ::kill(b, SIGKILL);         // not reaped yet: kill(b, 0) would still say it lives
  REQUIRE(exits.wait_for(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(exits.count() == 1);  // b once, though its pidfd stays readable
  ::kill(a, SIGKILL);
  REQUIRE(exits.wait_for(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  w.reset();
  REQUIRE(exits.count() == 2);
  CHECK(exits.seen[0].first == 7);
  CHECK(exits.seen[0].second.code() == ncclRemoteError);
  CHECK_THAT(exits.seen[0].second.message(), Catch::Contains("rank 7 (process " + std::to_string(b) + ") exited"));
  CHECK(exits.seen[1].first == 3);
  CHECK_THAT(exits.seen[1].second.message(), Catch::Contains("rank 3 (process " + std::to_string(a) + ") exited"));
  ::waitpid(a, nullptr, 0);
  ::waitpid(b, nullptr, 0);
}

TEST_CASE("process watch: ends promptly and reports nothing while its processes live", "[process_watch]") {
  const pid_t peer = sleeper();
  REQUIRE(peer > 0);
  Exits exits;
  const auto start = std::chrono::steady_clock::now();
  {
    std::unique_ptr<ProcessWatch> w;
    REQUIRE(ProcessWatch::start({{1, int(peer)}}, "test", exits.callback(), &w).is_ok());
    CHECK(w->watched() == 1);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(exits.count() == 0);
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
}

TEST_CASE("process watch: a process already gone is reported at once", "[process_watch]") {
  const pid_t gone = sleeper();
  REQUIRE(gone > 0);
  ::kill(gone, SIGKILL);
  ::waitpid(gone, nullptr, 0);  // reaped: its pid names no process
  Exits exits;
  std::unique_ptr<ProcessWatch> w;
  REQUIRE(ProcessWatch::start({{2, int(gone)}}, "test", exits.callback(), &w).is_ok());
  CHECK(w->watched() == 0);
  REQUIRE(exits.count() == 1);
  CHECK(exits.seen[0].first == 2);
  CHECK(exits.seen[0].second.code() == ncclRemoteError);
}

// ProcessWatch (src/base/process_watch.h): the first watched process to
// exit is reported once, naming its rank, even while it is an unreaped
// zombie; a process that cannot be watched is skipped; the watch ends
// promptly, reporting nothing, when it goes while its processes live.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/base/process_watch.h"

using namespace braid;

namespace {

// A process that lives until it is killed.
pid_t sleeper() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  return pid;
}

// What on_end was called with, from the watch's thread.
struct Ends {
  std::mutex mu;
  std::vector<Status> seen;
  ProcessWatch::OnEnd callback() {
    return [this](const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(s);
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size();
  }
  bool wait_for_one() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count() == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return count() > 0;
  }
};

}  // namespace

TEST_CASE("process watch: an exit is reported once naming its rank even as a zombie", "[process_watch]") {
  const pid_t a = sleeper(), b = sleeper();
  REQUIRE(a > 0);
  REQUIRE(b > 0);
  Ends ends;
  std::unique_ptr<ProcessWatch> w;
  REQUIRE(ProcessWatch::start({{3, int(a)}, {7, int(b)}}, "test", ends.callback(), &w).is_ok());
  CHECK(w->watched() == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(ends.count() == 0);  // both alive
  ::kill(b, SIGKILL);        // not reaped yet: kill(b, 0) would still say it lives
  REQUIRE(ends.wait_for_one());
  ::kill(a, SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  w.reset();
  REQUIRE(ends.count() == 1);  // the first exit only
  CHECK(ends.seen[0].code() == ncclRemoteError);
  CHECK_THAT(ends.seen[0].message(), Catch::Contains("rank 7 (process " + std::to_string(b) + ") exited"));
  ::waitpid(a, nullptr, 0);
  ::waitpid(b, nullptr, 0);
}

TEST_CASE("process watch: ends promptly and reports nothing while its processes live", "[process_watch]") {
  const pid_t peer = sleeper();
  REQUIRE(peer > 0);
  Ends ends;
  const auto start = std::chrono::steady_clock::now();
  {
    std::unique_ptr<ProcessWatch> w;
    REQUIRE(ProcessWatch::start({{1, int(peer)}}, "test", ends.callback(), &w).is_ok());
    CHECK(w->watched() == 1);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(ends.count() == 0);
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
}

TEST_CASE("process watch: a process already gone is skipped, not reported", "[process_watch]") {
  const pid_t gone = sleeper();
  REQUIRE(gone > 0);
  ::kill(gone, SIGKILL);
  ::waitpid(gone, nullptr, 0);  // reaped: its pid names no process
  Ends ends;
  std::unique_ptr<ProcessWatch> w;
  REQUIRE(ProcessWatch::start({{2, int(gone)}}, "test", ends.callback(), &w).is_ok());
  CHECK(w->watched() == 0);
  w.reset();
  CHECK(ends.count() == 0);
}

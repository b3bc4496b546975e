// BRAID_STRAGGLER=eager's arrival board on ranks as threads: attaching to a
// segment that exists but is not sized yet (the window that killed ranks with
// SIGBUS), and agreement on the missing rank over many calls.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "board_setups.h"
#include "src/plan/arrival_board.h"

using namespace braid;

using board_test::setup_for;

namespace {

std::string board_name(const char* what) { return board_test::board_name("arrivals", what); }

}  // namespace

TEST_CASE("arrival board: a rank attaching before rank 0 sized the segment waits for it", "[stragglar][eager]") {
  const std::string name = board_name("unsized");
  // Rank 0 between shm_open and ftruncate: the name exists with 0 bytes.
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::unique_ptr<ArrivalBoard> attached;
  Status attach_status;
  std::thread rank1([&] { attach_status = ArrivalBoard::open(setup_for(name, 1, 2, std::chrono::seconds(20)), &attached); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 1 polls the 0-byte object meanwhile
  // Rank 0 comes back; the stand-in object goes so its O_EXCL create works.
  ::shm_unlink(name.c_str());
  std::unique_ptr<ArrivalBoard> creator;
  Status create_status = ArrivalBoard::open(setup_for(name, 0, 2, std::chrono::seconds(20)), &creator);
  rank1.join();
  REQUIRE(create_status.is_ok());
  REQUIRE(attach_status.is_ok());
  // Two ranks: the first arrival names the other.
  int named0 = -1, named1 = -1;
  REQUIRE(creator->straggler_of_call(0, &named0).is_ok());
  REQUIRE(attached->straggler_of_call(0, &named1).is_ok());
  CHECK(named0 == 1);
  CHECK(named1 == 1);
  // Both attached, so the name is gone already.
  CHECK(::shm_open(name.c_str(), O_RDWR, 0600) < 0);
}

TEST_CASE("arrival board: a rank that never comes is an error after the timeout", "[stragglar][eager]") {
  const std::string name = board_name("alone");
  std::unique_ptr<ArrivalBoard> board;
  REQUIRE(ArrivalBoard::open(setup_for(name, 0, 3, std::chrono::milliseconds(200)), &board).is_ok());
  int named = -1;
  Status s = board->straggler_of_call(0, &named);  // only 1 of the 2 needed arrivals
  CHECK(s.code() == ncclRemoteError);
  board.reset();
  CHECK(::shm_open(name.c_str(), O_RDWR, 0600) < 0);  // the creator removed the name
}

TEST_CASE("arrival board: every rank names the same straggler, call by call", "[stragglar][eager]") {
  const std::string name = board_name("calls");
  for (int n : {2, 3, 5, 8}) {
    INFO("n=" << n);
    constexpr int kCalls = 60;
    // named[call][rank]
    std::vector<std::vector<int>> named(kCalls, std::vector<int>(size_t(n), -2));
    std::vector<std::unique_ptr<std::latch>> others_done;
    for (int c = 0; c < kCalls; ++c) others_done.push_back(std::make_unique<std::latch>(n - 1));
    // Stands in for the collective itself: nobody leaves call k before all
    // entered it, so no rank runs more than one call ahead on the board.
    std::barrier call_done(n);
    std::atomic<int> failures{0};
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r)
      ranks.emplace_back([&, r] {
        // After a failure every rank still takes part in the latches and the
        // barrier, but leaves the board alone, so the test ends promptly.
        std::unique_ptr<ArrivalBoard> board;
        if (!ArrivalBoard::open(setup_for(name, r, n, std::chrono::seconds(10)), &board).is_ok()) ++failures;
        for (int c = 0; c < kCalls; ++c) {
          const int late = c % (n + 1) - 1;  // -1: nobody in particular
          // The late rank enters only once the others have their answer, so
          // it is the last arrival however the threads are scheduled.
          if (r == late) others_done[size_t(c)]->wait();
          if (failures.load() == 0 && !board->straggler_of_call(uint64_t(c), &named[size_t(c)][size_t(r)]).is_ok())
            ++failures;
          if (late >= 0 && r != late) others_done[size_t(c)]->count_down();
          call_done.arrive_and_wait();
        }
      });
    for (std::thread& t : ranks) t.join();
    REQUIRE(failures.load() == 0);
    for (int c = 0; c < kCalls; ++c) {
      const int late = c % (n + 1) - 1;
      INFO("call " << c);
      CHECK(named[size_t(c)][0] >= 0);
      CHECK(named[size_t(c)][0] < n);
      if (late >= 0) CHECK(named[size_t(c)][0] == late);
      for (int r = 1; r < n; ++r) CHECK(named[size_t(c)][size_t(r)] == named[size_t(c)][0]);
    }
  }
}

TEST_CASE("arrival board: a dead rank process ends the wait long before the timeout", "[stragglar][eager]") {
  // A pid that surely names no process: a child that exited and was reaped.
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const auto start = std::chrono::steady_clock::now();
  const auto timeout = std::chrono::seconds(60);

  SECTION("rank 0 died before creating the board") {
    BoardSetup s = setup_for(board_name("dead-creator"), 1, 2, timeout, {int32_t(child), int32_t(::getpid())});
    std::unique_ptr<ArrivalBoard> board;
    CHECK(ArrivalBoard::open(s, &board).code() == ncclRemoteError);
  }
  SECTION("two of three ranks died before the call") {
    BoardSetup s =
        setup_for(board_name("dead-peers"), 0, 3, timeout, {int32_t(::getpid()), int32_t(child), int32_t(child)});
    std::unique_ptr<ArrivalBoard> board;
    REQUIRE(ArrivalBoard::open(s, &board).is_ok());
    int named = -1;
    CHECK(board->straggler_of_call(0, &named).code() == ncclRemoteError);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("arrival board: arrive and poll, one thread driving every rank", "[stragglar][eager]") {
  // What a group's task does (src/exec/host/straggler_task.h): no call
  // blocks, so one thread can hold several ranks' arrivals.
  const std::string name = board_name("polled");
  constexpr int n = 3;
  std::vector<std::unique_ptr<ArrivalBoard>> boards(n);
  std::vector<Status> opened(n);
  auto open = [&](int r) {
    opened[r] = ArrivalBoard::open(setup_for(name, r, n, std::chrono::seconds(10)), &boards[r]);
  };
  std::thread creator(open, 0);  // the others wait for rank 0's segment
  for (int r = 1; r < n; ++r) open(r);
  creator.join();
  for (const Status& s : opened) REQUIRE(s.is_ok());
  // Calls 0..7 reuse every slot twice; rank (call % n) arrives last.
  for (uint64_t call = 0; call < 8; ++call) {
    INFO("call " << call);
    const int late = int(call % n), first = (late + 1) % n, second = (late + 2) % n;
    int named = -1;
    bool ready = true;
    boards[first]->arrive(call);
    REQUIRE(boards[first]->poll(call, &named, &ready).is_ok());
    CHECK_FALSE(ready);  // one arrival of the two needed
    boards[second]->arrive(call);
    for (int r : {first, second}) {
      named = -1;
      REQUIRE(boards[r]->poll(call, &named, &ready).is_ok());
      CHECK(ready);
      CHECK(named == late);
    }
    boards[late]->arrive(call);
    REQUIRE(boards[late]->poll(call, &named, &ready).is_ok());
    CHECK(ready);
    CHECK(named == late);
  }
}

TEST_CASE("arrival board: polling notices dead ranks", "[stragglar][eager]") {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  BoardSetup s = setup_for(board_name("dead-polled"), 0, 3, std::chrono::seconds(60),
                           {int32_t(::getpid()), int32_t(child), int32_t(child)});
  std::unique_ptr<ArrivalBoard> board;
  REQUIRE(ArrivalBoard::open(s, &board).is_ok());
  board->arrive(0);
  Status status;
  bool ready = false;
  int named = -1;
  for (int polls = 0; polls < 100000 && status.is_ok() && !ready; ++polls) status = board->poll(0, &named, &ready);
  CHECK_FALSE(ready);
  CHECK(status.code() == ncclRemoteError);
}

// BRAID_STRAGGLER=auto on a device backend (src/plan/duration_board.h): the
// board its kernels stamp, fed here by CPU producers that stamp exactly as
// the kernels do (duration_stamp.h), and the tracker deciding from it with
// kDeviceLag calls of lag.  Ranks as threads and as processes.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "board_setups.h"
#include "scoped_env.h"
#include "src/plan/duration_board.h"
#include "src/plan/straggler.h"

using namespace braid;

namespace {

constexpr int64_t kMs = 1'000'000;

std::string board_name(const char* what) { return board_test::board_name("durations", what); }
using board_test::setup_for;

// What a rank's two stamp kernels do around tracked call `call`, on a clock
// of the test's own: arrival at `start`, completion `duration` later.
void stamp(DurationEntry* e, uint64_t call, uint64_t start, int64_t duration) {
  stamp_arrival(e, start);
  stamp_completion(e, call, start + uint64_t(duration));
}

// Opens every rank's board on threads (rank 0 creates, the others wait for it).
std::vector<std::unique_ptr<DurationBoard>> open_boards(const std::string& name, int n,
                                                        std::chrono::milliseconds timeout) {
  std::vector<std::unique_ptr<DurationBoard>> boards(static_cast<size_t>(n));
  std::vector<std::thread> ranks;
  std::vector<int> failed(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      failed[size_t(r)] = !DurationBoard::open(setup_for(name, r, n, timeout), &boards[size_t(r)]).is_ok();
    });
  for (std::thread& t : ranks) t.join();
  for (int f : failed) REQUIRE(f == 0);
  return boards;
}

// The communicator a tracker sees: ranks of one host.
TransportContext comm_of(uint64_t hash, int rank, int n) {
  TransportContext c;
  c.comm_hash = hash;
  c.rank = rank;
  c.nranks = n;
  c.peers.resize(size_t(n));
  for (PeerInfo& p : c.peers) {
    p.host_hash = 1;
    p.pid = ::getpid();
  }
  return c;
}

// The late rank of tracked call c in the tracker tests: rank 2, then rank 1.
int late_of(int c) { return c < 15 ? 2 : 1; }
// Every rank's stay in call c: the late one arrives 50 ms after the others.
int64_t duration_of(int c, int r) { return 2 * kMs + (r == late_of(c) ? 0 : 50 * kMs) + r * 1000; }

// One rank's tracked calls on a device backend, its device emulated: plan
// the call (its decision recorded), then stamp it as the kernels would.
// `launched`, when given, stands in for the collective: nobody's call
// completes before every rank has launched it.
Status run_rank(StragglerTracker& st, int rank, int calls, std::barrier<>* launched, std::vector<int>* decisions) {
  for (int c = 0; c < calls; ++c) {
    int straggler = -2;
    uint64_t call = 0;
    BRAID_TRY(st.plan_device_call(64 << 20, &straggler, &call));
    if (call != uint64_t(c)) return BRAID_ERROR(ncclInternalError, "tracked call {} numbered {}", c, call);
    decisions->push_back(straggler);
    if (launched) launched->arrive_and_wait();
    stamp(st.duration_board()->entry(call), call, 1000 * kMs * uint64_t(c), duration_of(c, rank));
  }
  return Status::ok();
}

// What every rank must decide, call by call: tracked call t sees the calls
// up to t - kDeviceLag; persist_calls = release_calls = 3.  Rank 2 is late
// from call 0, so it is picked at call 2 + lag; rank 1 from call 15, picked
// at call 17 + lag (rank 2's three misses end it at the same call).
std::vector<int> expected_decisions(int calls) {
  const int lag = int(StragglerTracker::kDeviceLag);
  std::vector<int> want;
  for (int t = 0; t < calls; ++t) want.push_back(t < 2 + lag ? -1 : t < 17 + lag ? 2 : 1);
  return want;
}

}  // namespace

TEST_CASE("duration board: every rank reads what each device stamped, slot by slot", "[stragglar][auto][device]") {
  const int n = 3;
  auto boards = open_boards(board_name("slots"), n, std::chrono::seconds(10));
  // Two rounds over every slot; each rank reads a call once all stamped it,
  // as the tracker does at its lag.
  for (uint64_t call = 0; call < 2 * DurationBoard::kSlots; ++call) {
    for (int r = 0; r < n; ++r) stamp(boards[size_t(r)]->entry(call), call, 7 * call, int64_t(100 * r + call));
    for (int r = 0; r < n; ++r) {
      std::vector<int64_t> got;
      REQUIRE(boards[size_t(r)]->gather(call, &got).is_ok());
      CHECK(got == std::vector<int64_t>{int64_t(call), int64_t(100 + call), int64_t(200 + call)});
    }
  }
}

TEST_CASE("duration board: a rank whose device never completes the call is named after the timeout",
          "[stragglar][auto][device]") {
  const int n = 3;
  auto boards = open_boards(board_name("missing"), n, std::chrono::milliseconds(300));
  stamp(boards[0]->entry(0), 0, 0, 5);
  stamp_arrival(boards[2]->entry(0), 0);  // arrived, never completed
  const auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> got;
  Status s = boards[1]->gather(0, &got);
  CHECK(s.code() == ncclRemoteError);
  CHECK_THAT(s.message(), Catch::Contains("rank(s) 1, 2 did not complete tracked call 0"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("duration board: an entry stamped for a later call is a broken protocol, not a wait",
          "[stragglar][auto][device]") {
  auto boards = open_boards(board_name("reused"), 2, std::chrono::seconds(10));
  stamp(boards[0]->entry(0), 0, 0, 5);
  stamp(boards[1]->entry(DurationBoard::kSlots), DurationBoard::kSlots, 0, 5);  // the same slot, one round on
  std::vector<int64_t> got;
  Status s = boards[0]->gather(0, &got);
  CHECK(s.code() == ncclInternalError);
  CHECK_THAT(s.message(), Catch::Contains("rank 1 posted tracked call 16 over call 0 unread"));
}

TEST_CASE("duration board: a dead rank process ends the wait long before the timeout", "[stragglar][auto][device]") {
  const std::string name = board_name("dead");
  // Rank 1 attaches, stamps call 0's arrival only, and dies.
  pid_t child = ::fork();
  if (child == 0) {
    std::unique_ptr<DurationBoard> board;
    if (DurationBoard::open(setup_for(name, 1, 2, std::chrono::seconds(10)), &board).is_ok())
      stamp_arrival(board->entry(0), 0);
    ::_exit(0);
  }
  REQUIRE(child > 0);
  // As the communicator's init learns them.
  BoardSetup setup = setup_for(name, 0, 2, std::chrono::seconds(60), {int32_t(::getpid()), int32_t(child)});
  std::unique_ptr<DurationBoard> mine;
  REQUIRE(DurationBoard::open(setup, &mine).is_ok());
  REQUIRE(::waitpid(child, nullptr, 0) == child);  // reaped: kill(pid, 0) says it is gone
  stamp(mine->entry(0), 0, 0, 5);
  const auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> got;
  Status s = mine->gather(0, &got);
  CHECK(s.code() == ncclRemoteError);
  CHECK_THAT(s.message(), Catch::Contains("rank 1 died before completing tracked call 0"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("auto on a device backend: every rank decides alike from stamps kDeviceLag calls old, threads",
          "[stragglar][auto][device][threads]") {
  ScopedEnv e("BRAID_STRAGGLER", "auto");
  const int n = 4, calls = 30;
  std::vector<std::unique_ptr<StragglerTracker>> trackers;
  for (int r = 0; r < n; ++r) trackers.push_back(std::make_unique<StragglerTracker>(n, r));
  std::vector<std::vector<int>> decisions(static_cast<size_t>(n));
  std::vector<Status> results(static_cast<size_t>(n));
  std::barrier launched(n);
  const uint64_t hash = 0x5ad0000ull + uint64_t(::getpid());
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      StragglerTracker& st = *trackers[size_t(r)];
      results[size_t(r)] = st.open_duration_board(comm_of(hash, r, n), nullptr);
      if (results[size_t(r)].is_ok()) results[size_t(r)] = run_rank(st, r, calls, &launched, &decisions[size_t(r)]);
    });
  for (std::thread& t : ranks) t.join();
  for (const Status& s : results) REQUIRE(s.to_string() == Status::ok().to_string());
  const std::vector<int> want = expected_decisions(calls);
  for (int r = 0; r < n; ++r) CHECK(decisions[size_t(r)] == want);
}

TEST_CASE("auto on a device backend: every rank decides alike, processes", "[stragglar][auto][device][processes]") {
  ScopedEnv e("BRAID_STRAGGLER", "auto");
  const int n = 3, calls = 30;
  const uint64_t hash = 0x5ad1000ull + uint64_t(::getpid());
  // Each process writes its decisions to its pipe, then exits 0 (or 1 on an error).
  std::vector<int> pipes;
  std::vector<pid_t> children;
  for (int r = 0; r < n; ++r) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid_t child = ::fork();
    if (child == 0) {
      ::close(fds[0]);
      StragglerTracker st(n, r);
      std::vector<int> decisions;
      Status s = st.open_duration_board(comm_of(hash, r, n), nullptr);
      if (s.is_ok()) s = run_rank(st, r, calls, nullptr, &decisions);
      if (!s.is_ok()) std::fprintf(stderr, "rank %d: %s\n", r, s.to_string().c_str());
      const ssize_t bytes = ssize_t(decisions.size() * sizeof(int));
      const bool written = ::write(fds[1], decisions.data(), size_t(bytes)) == bytes;
      ::_exit(s.is_ok() && written ? 0 : 1);
    }
    REQUIRE(child > 0);
    ::close(fds[1]);
    pipes.push_back(fds[0]);
    children.push_back(child);
  }
  const std::vector<int> want = expected_decisions(calls);
  for (int r = 0; r < n; ++r) {
    int status = -1;
    REQUIRE(::waitpid(children[size_t(r)], &status, 0) == children[size_t(r)]);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    std::vector<int> got(static_cast<size_t>(calls), -9);
    CHECK(::read(pipes[size_t(r)], got.data(), got.size() * sizeof(int)) == ssize_t(got.size() * sizeof(int)));
    ::close(pipes[size_t(r)]);
    CHECK(got == want);
  }
}

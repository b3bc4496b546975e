// Communicators made from communicators: ncclCommSplit (colors, key order,
// NOCOLOR, config inheritance), ncclCommShrink (exclusions, the abort flag,
// a dead excluded rank), ncclCommRevoke, an abort of the parent during the
// new communicator's init, and ncclCommInitRankScalable with
// several roots.  Every new communicator proves itself with an exact
// allreduce of rank numbers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>

#include "collective_check.h"
#include "scoped_env.h"

using namespace mp;

namespace {

// Sum over the new communicator of `weight(new rank)`; checks every element.
void check_allreduce(ncclComm_t comm, int expect_n, const std::function<int(int)>& weight, Failures& f,
                     const std::string& what) {
  int n = -1, r = -1;
  MP_NCCL(f, ncclCommCount(comm, &n));
  MP_NCCL(f, ncclCommUserRank(comm, &r));
  if (n != expect_n) return f.fail(fmt::format("{}: {} ranks, want {}", what, n, expect_n));
  std::vector<int32_t> in(1000, weight(r)), out(1000, -1);
  MP_NCCL(f, ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comm, nullptr));
  int32_t want = 0;
  for (int i = 0; i < n; ++i) want += weight(i);
  if (std::count(out.begin(), out.end(), want) != ptrdiff_t(out.size()))
    f.fail(fmt::format("{}: rank {} got {} want {}", what, r, out[0], want));
}

}  // namespace

TEST_CASE("split: colors, key order, NOCOLOR gives NULL", "[mp][split][threads]") {
  CHECK(run_ranks_as_threads(6, [](int rank, int n, ncclComm_t comm, Failures& f) {
          // Two colors by parity; rank 5 opts out; keys reverse the order.
          int color = rank == 5 ? NCCL_SPLIT_NOCOLOR : rank % 2;
          ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
          MP_NCCL(f, ncclCommSplit(comm, color, 100 - rank, &child, nullptr));
          if (rank == 5) {
            if (child != nullptr) f.fail("NOCOLOR rank got a communicator");
            check_allreduce(comm, n, [](int r) { return r; }, f, "parent after split");
            return;
          }
          if (!child) return f.fail("no child communicator");
          int size = rank % 2 == 0 ? 3 : 2;  // evens {0,2,4}, odds {1,3}
          int child_rank = -1;
          MP_NCCL(f, ncclCommUserRank(child, &child_rank));
          // Keys decrease with parent rank, so new rank order is reversed.
          std::vector<int> members = rank % 2 == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{3, 1};
          int want = int(std::find(members.begin(), members.end(), rank) - members.begin());
          if (child_rank != want) f.fail(fmt::format("rank {} -> child rank {}, want {}", rank, child_rank, want));
          check_allreduce(child, size, [&](int r) { return members[r] * 10 + 1; }, f, "split child");
          // Parent still works next to the child.
          check_allreduce(comm, n, [](int r) { return r; }, f, "parent after split");
          MP_NCCL(f, ncclCommDestroy(child));
        }) == 0);
}

TEST_CASE("split: equal keys keep parent order, children of children, processes", "[mp][split]") {
  CHECK(run_ranks_as_processes(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          ncclComm_t all = nullptr, half = nullptr;
          MP_NCCL(f, ncclCommSplit(comm, 7, 0, &all, nullptr));
          if (!all) return;
          int r = -1;
          MP_NCCL(f, ncclCommUserRank(all, &r));
          if (r != rank) f.fail(fmt::format("equal keys: rank {} became {}", rank, r));
          MP_NCCL(f, ncclCommSplit(all, rank / 2, 0, &half, nullptr));
          if (half) check_allreduce(half, 2, [&](int x) { return (rank / 2) * 2 + x; }, f, "grandchild");
          if (half) MP_NCCL(f, ncclCommDestroy(half));
          MP_NCCL(f, ncclCommDestroy(all));
        }) == 0);
}

TEST_CASE("split: a NULL config inherits the parent's, an explicit one wins", "[mp][split][nonblocking][threads]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          // Parent is blocking: the child inherits blocking, returns success.
          ncclComm_t child = nullptr;
          MP_NCCL(f, ncclCommSplit(comm, 0, rank, &child, nullptr));
          if (child) MP_NCCL(f, ncclCommDestroy(child));
          // Explicit non-blocking config: the split returns InProgress and
          // completes in the background.
          ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
          config.blocking = 0;
          ncclResult_t r = ncclCommSplit(comm, 0, rank, &child, &config);
          if (r != ncclSuccess && r != ncclInProgress) return f.fail(fmt::format("nonblocking split -> {}", int(r)));
          ncclResult_t state = ncclInProgress;
          for (int i = 0; i < 20000 && state == ncclInProgress; ++i) {
            MP_NCCL(f, ncclCommGetAsyncError(child, &state));
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          if (state != ncclSuccess) return f.fail(fmt::format("nonblocking child state {}", int(state)));
          // Its grandchild (NULL config) inherits non-blocking.  The split of
          // a non-blocking parent returns at once; *newcomm is set once the
          // parent's state says the split is over.
          ncclComm_t grand = nullptr;
          r = ncclCommSplit(child, 0, rank, &grand, nullptr);
          if (r != ncclInProgress) f.fail(fmt::format("inherited non-blocking split returned {}", int(r)));
          state = ncclInProgress;
          for (int i = 0; i < 20000 && state == ncclInProgress; ++i) {
            MP_NCCL(f, ncclCommGetAsyncError(child, &state));
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          if (state != ncclSuccess || !grand) f.fail(fmt::format("the split of child: state {}", int(state)));
          if (grand) MP_NCCL(f, ncclCommDestroy(grand));  // waits for its init
          MP_NCCL(f, ncclCommDestroy(child));
        }) == 0);
}

TEST_CASE("shrink: excluded ranks leave, the rest renumber in order", "[mp][shrink][threads]") {
  CHECK(run_ranks_as_threads(5, [](int rank, int n, ncclComm_t comm, Failures& f) {
          int exclude[] = {1, 3};
          if (rank == 1 || rank == 3) {
            // Excluded ranks do not take part; calling is an error for them.
            ncclComm_t none = nullptr;
            if (ncclCommShrink(comm, exclude, 2, &none, nullptr, NCCL_SHRINK_DEFAULT) != ncclInvalidArgument)
              f.fail("excluded rank calling shrink was not rejected");
            return;
          }
          ncclComm_t small = nullptr;
          MP_NCCL(f, ncclCommShrink(comm, exclude, 2, &small, nullptr, NCCL_SHRINK_DEFAULT));
          if (!small) return;
          const int members[] = {0, 2, 4};
          int r = -1;
          MP_NCCL(f, ncclCommUserRank(small, &r));
          if (r != rank / 2) f.fail(fmt::format("rank {} -> {}", rank, r));
          check_allreduce(small, 3, [&](int x) { return members[x] + 1; }, f, "shrunk");
          MP_NCCL(f, ncclCommDestroy(small));
        }) == 0);
}

TEST_CASE("shrink with NCCL_SHRINK_ABORT after a rank died mid-collective", "[mp][shrink][faults]") {
  // Rank 2 is killed while the others are inside an allreduce; they see an
  // error within BRAID_TIMEOUT, shrink it away with the abort flag and carry on.
  CHECK(run_ranks_as_processes(
            4,
            [](int rank, int n, ncclComm_t comm, Failures& f) {
              if (rank == 2) {
                std::this_thread::sleep_for(std::chrono::milliseconds(300));
                raise(SIGKILL);
              }
              std::vector<float> in(1 << 16, 1.f), out(1 << 16);
              ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
              if (r == ncclSuccess) f.fail("allreduce with a dead rank succeeded");
              // Survivors noticed the death up to one timeout apart (more on a
              // loaded machine): give the shrink's rendezvous room for that.
              setenv("BRAID_TIMEOUT", "30", 1);
              int exclude = 2;
              ncclComm_t small = nullptr;
              MP_NCCL(f, ncclCommShrink(comm, &exclude, 1, &small, nullptr, NCCL_SHRINK_ABORT));
              if (!small) return;
              const int members[] = {0, 1, 3};
              check_allreduce(small, 3, [&](int x) { return members[x]; }, f, "after shrink");
              MP_NCCL(f, ncclCommDestroy(small));
              // The parent is revoked now: collectives refuse, abort is prompt.
              if (ncclAllReduce(in.data(), out.data(), 1, ncclFloat, ncclSum, comm, nullptr) != ncclInvalidUsage)
                f.fail("collective on the shrunk-with-abort parent was not refused");
            },
            60, [](int) { setenv("BRAID_TIMEOUT", "3", 1); }) == 1);  // exactly the killed rank fails
}

// Across hosts no survivor sees a death another saw, and most are not next
// to the dead rank: each waits on a survivor.  The survivors that saw it
// shrink with the abort flag, whose revoke ends their connections, so those
// waiting on them fail at once and shrink too, not one BRAID_TIMEOUT later
// each (the shrink's rendezvous then timed out on every survivor).
TEST_CASE("shrink with NCCL_SHRINK_ABORT after a rank died mid-collective, every rank a host", "[mp][shrink][faults]") {
  CHECK(run_ranks_as_processes(
            4,
            [](int rank, int, ncclComm_t comm, Failures& f) {
              if (rank == 1)  // killed amid the calls, its connections made
                std::thread([] {
                  std::this_thread::sleep_for(std::chrono::milliseconds(300));
                  raise(SIGKILL);
                }).detach();
              std::vector<float> data(1 << 18, 1.f);
              ncclResult_t r = ncclSuccess;
              for (int i = 0; i < 100000 && r == ncclSuccess; ++i)
                r = ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclMax, comm, nullptr);
              if (r == ncclSuccess) f.fail("allreduces with a dead rank succeeded");
              const auto start = std::chrono::steady_clock::now();
              int exclude = 1;
              ncclComm_t small = nullptr;
              MP_NCCL(f, ncclCommShrink(comm, &exclude, 1, &small, nullptr, NCCL_SHRINK_ABORT));
              if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10))
                f.fail(fmt::format("rank {}: the shrink took more than 10 s", rank));
              if (!small) return;
              const int members[] = {0, 2, 3};
              check_allreduce(small, 3, [&](int x) { return members[x]; }, f, "after shrink");
              MP_NCCL(f, ncclCommDestroy(small));
            },
            60, [](int rank) {
              setenv("BRAID_TIMEOUT", "20", 1);
              setenv("BRAID_HOSTID", fmt::format("host{}", rank).c_str(), 1);
            }) == 1);  // exactly the killed rank fails
}

TEST_CASE("split: a first member that cannot start the new root fails every member at once", "[mp][split][faults]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  ScopedEnv no_root("BRAID_TEST_FAIL_DERIVE_ROOT_RANK", "0");
  CHECK(run_ranks_as_processes(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          // Rank 0 cannot start the new root.
          const auto start = std::chrono::steady_clock::now();
          ncclComm_t child = nullptr;
          const ncclResult_t split = ncclCommSplit(comm, 0, rank, &child, nullptr);
          const std::string why = ncclGetLastError(comm);
          if (split == ncclSuccess || child) f.fail(fmt::format("rank {}: the split succeeded", rank));
          if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10))
            f.fail(fmt::format("rank {}: the failed split took more than 10 s ({})", rank, why));
          const std::string says =
              rank == 0 ? "BRAID_TEST_FAIL_DERIVE_ROOT_RANK=0" : "rank 0, the new communicator's first, could not start";
          if (why.find(says) == std::string::npos) f.fail(fmt::format("rank {}: the error says '{}'", rank, why));
          // Every rank met the failure in step: the parent goes on.
          check_allreduce(comm, n, [](int x) { return x; }, f, "the parent after the failed split");
        }) == 0);
}

TEST_CASE("one thread splits all its ranks in a group: the splits meet at ncclGroupEnd", "[mp][split]") {
  // NCCL's way for a thread that drives several ranks (ncclCommInitAll's):
  // each rank's split inside one group, run together at its end.
  constexpr int n = 4;
  ncclComm_t comms[n] = {};
  REQUIRE(ncclCommInitAll(comms, n, nullptr) == ncclSuccess);
  ncclComm_t halves[n] = {};
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;  // copied at the call: the group may end after it is gone
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) CHECK(ncclCommSplit(comms[r], r % 2, -r, &halves[r], r == 0 ? &config : nullptr) == 0);
  CHECK(halves[0] == nullptr);  // set at the group's end, as NCCL's grouped calls
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(1000, -1));
  std::vector<int32_t> in(1000, 1);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    REQUIRE(halves[r]);
    int size = 0, rank = -1;
    CHECK(ncclCommCount(halves[r], &size) == ncclSuccess);
    CHECK(ncclCommUserRank(halves[r], &rank) == ncclSuccess);
    CHECK(size == 2);
    CHECK(rank == 1 - r / 2);  // keys -r: the higher parent rank first
    CHECK(ncclAllReduce(in.data(), out[r].data(), in.size(), ncclInt32, ncclSum, halves[r], nullptr) == 0);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < n; ++r) CHECK(out[r][999] == 2);
  for (int r = 0; r < n; ++r) {
    CHECK(ncclCommDestroy(halves[r]) == ncclSuccess);
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }
}

TEST_CASE("one thread splits its non-blocking ranks in a group: the children finish in the background",
          "[mp][split][nonblocking]") {
  constexpr int n = 4;
  auto settle = [](ncclComm_t comm) {
    ncclResult_t state = ncclInProgress;
    for (int i = 0; i < 60000 && state == ncclInProgress; ++i) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return state;
  };
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comms[n] = {};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) CHECK(ncclCommInitRankConfig(&comms[r], n, id, r, &config) == ncclSuccess);
  const ncclResult_t started = ncclGroupEnd();
  CHECK((started == ncclSuccess || started == ncclInProgress));
  for (int r = 0; r < n; ++r) REQUIRE(settle(comms[r]) == ncclSuccess);
  ncclComm_t halves[n] = {};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) CHECK(ncclCommSplit(comms[r], r % 2, r, &halves[r], nullptr) == ncclSuccess);
  const ncclResult_t split = ncclGroupEnd();
  CHECK((split == ncclSuccess || split == ncclInProgress));
  for (int r = 0; r < n; ++r) CHECK(settle(comms[r]) == ncclSuccess);  // the group, the parents' work
  for (int r = 0; r < n; ++r) {
    REQUIRE(halves[r]);
    CHECK(settle(halves[r]) == ncclSuccess);  // each child's own init
    int size = 0;
    CHECK(ncclCommCount(halves[r], &size) == ncclSuccess);
    CHECK(size == 2);
  }
  for (int r = 0; r < n; ++r) {
    CHECK(ncclCommDestroy(halves[r]) == ncclSuccess);
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }
}

TEST_CASE("revoke: later ops are ncclInvalidUsage, split still works", "[mp][revoke][threads]") {
  CHECK(run_ranks_as_threads(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          if (ncclCommRevoke(comm, 1) != ncclInvalidArgument) f.fail("bad revokeFlags accepted");
          MP_NCCL(f, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
          ncclResult_t state = ncclInternalError;
          MP_NCCL(f, ncclCommGetAsyncError(comm, &state));
          if (state != ncclSuccess) f.fail(fmt::format("idle revoked comm state {}", int(state)));
          float x = 1, y = 0;
          if (ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr) != ncclInvalidUsage)
            f.fail("allreduce on a revoked comm was not ncclInvalidUsage");
          if (std::string(ncclGetLastError(comm)).find("revoked") == std::string::npos)
            f.fail(fmt::format("last error does not say revoked: {}", ncclGetLastError(comm)));
          if (ncclSend(&x, 1, ncclFloat, 0, comm, nullptr) != ncclInvalidUsage) f.fail("send on revoked comm");
          // NCCL's codes: finalize after a revoke, and a second revoke, are ncclInvalidArgument.
          if (ncclCommFinalize(comm) != ncclInvalidArgument) f.fail("finalize after revoke accepted");
          if (ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) != ncclInvalidArgument) f.fail("second revoke accepted");
          ncclComm_t fresh = nullptr;
          MP_NCCL(f, ncclCommSplit(comm, 0, rank, &fresh, nullptr));
          if (fresh) check_allreduce(fresh, n, [](int r) { return r + 1; }, f, "split of revoked");
          if (fresh) MP_NCCL(f, ncclCommDestroy(fresh));
        }) == 0);
}

TEST_CASE("revoke from another thread releases a rank blocked in a collective", "[mp][revoke][faults][threads]") {
  // Rank 1 never joins the allreduce; rank 0's watchdog revokes after 300 ms.
  std::atomic<bool> released{false};
  CHECK(run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, Failures& f) {
          if (rank == 1) {
            while (!released) std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return;
          }
          std::thread watchdog([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            MP_NCCL(f, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
          });
          auto start = std::chrono::steady_clock::now();
          std::vector<float> in(4096, 1.f), out(4096);
          ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
          auto took = std::chrono::steady_clock::now() - start;
          watchdog.join();
          if (r != ncclInvalidUsage) f.fail(fmt::format("revoked allreduce returned {}", int(r)));
          if (took > std::chrono::seconds(10)) f.fail("revoke did not release the collective promptly");
          ncclResult_t state = ncclInProgress;
          for (int i = 0; i < 1000 && state == ncclInProgress; ++i) MP_NCCL(f, ncclCommGetAsyncError(comm, &state));
          if (state != ncclSuccess) f.fail(fmt::format("revoked comm never quiescent: {}", int(state)));
          released = true;
        }) == 0);
}

TEST_CASE("an abort of the parent stops a shrink, split or grow whose new communicator waits for a rank",
          "[mp][shrink][split][faults][threads]") {
  // Ranks 0-2 make a communicator that rank 3 should join and never does;
  // each rank's watchdog aborts its parent after 300 ms: the call and the
  // abort return at once, not at BRAID_TIMEOUT (NCCL's childAbortFlag).
  ScopedEnv timeout("BRAID_TIMEOUT", "60");
  for (const std::string what : {"shrink", "split", "grow"}) {
    INFO(what);
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    const int n = 4;
    std::atomic<int> returned{0};
    std::vector<Failures> failures(n);
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < n; ++rank)
      ranks.emplace_back([&, rank] {
        Failures& f = failures[size_t(rank)];
        ncclComm_t comm = nullptr;
        MP_NCCL(f, ncclCommInitRank(&comm, n, id, rank));
        if (!comm) return;
        if (rank == 3) {  // its comm ends after the others' aborts
          while (returned.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          MP_NCCL(f, ncclCommDestroy(comm));
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        std::chrono::steady_clock::duration abort_took{};
        std::thread watchdog([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          const auto at = std::chrono::steady_clock::now();
          MP_NCCL(f, ncclCommAbort(comm));
          abort_took = std::chrono::steady_clock::now() - at;
        });
        ncclComm_t made = nullptr;
        ncclResult_t r = ncclSuccess;
        if (what == "shrink") {
          int excluded = 1;  // rank 1 leaves; rank 3 stays a member and never comes
          if (rank != 1) r = ncclCommShrink(comm, &excluded, 1, &made, nullptr, NCCL_SHRINK_DEFAULT);
          else std::this_thread::sleep_for(std::chrono::milliseconds(400));
        } else if (what == "split") {
          r = ncclCommSplit(comm, 0, rank, &made, nullptr);
        } else {
          ncclUniqueId grow_id;
          if (rank == 0) MP_NCCL(f, ncclCommGetUniqueId(comm, &grow_id));
          r = ncclCommGrow(comm, n + 1, rank == 0 ? &grow_id : nullptr, -1, &made, nullptr);
        }
        const auto took = std::chrono::steady_clock::now() - start;
        returned.fetch_add(1);
        watchdog.join();
        if (rank != 1 || what != "shrink") {
          if (r == ncclSuccess || made) f.fail(fmt::format("rank {}: the {} succeeded", rank, what));
          if (took > std::chrono::seconds(10)) f.fail(fmt::format("rank {}: the {} was not stopped", rank, what));
        }
        if (abort_took > std::chrono::seconds(10)) f.fail(fmt::format("rank {}: the abort waited", rank));
      });
    for (auto& t : ranks) t.join();
    for (const Failures& f : failures) CHECK(f.count == 0);
  }
}

TEST_CASE("revoke of a non-blocking communicator whose group waits: ncclInProgress, then ncclSuccess",
          "[mp][revoke][nonblocking][threads]") {
  // As NCCL's commRevokeAsync: once the work it interrupted has stopped, the
  // communicator reports ncclSuccess, not the interrupted group's failure.
  std::atomic<bool> released{false};
  auto nonblocking = [](ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(comm, nranks, id, rank, &config);
    ncclResult_t state = r;
    while (r == ncclInProgress && state == ncclInProgress) ncclCommGetAsyncError(*comm, &state);
    return r == ncclInProgress ? state : r;
  };
  CHECK(run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, Failures& f) {
          if (rank == 1) {  // never joins the allreduce
            while (!released) std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return;
          }
          std::vector<float> in(4096, 1.f), out(4096);
          ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
          if (r != ncclInProgress) f.fail(fmt::format("the waiting allreduce returned {}", int(r)));
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          MP_NCCL(f, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
          ncclResult_t state = ncclInProgress;
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (state == ncclInProgress && std::chrono::steady_clock::now() < until) {
            MP_NCCL(f, ncclCommGetAsyncError(comm, &state));
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          if (state != ncclSuccess) f.fail(fmt::format("revoked non-blocking comm reports {}", int(state)));
          released = true;
        }, nonblocking) == 0);
}

TEST_CASE("init with several roots (ncclCommInitRankScalable)", "[mp][scalable][threads]") {
  for (int nroots : {1, 2, 3, 7}) {
    const int n = 7;
    INFO("roots " << nroots);
    std::vector<ncclUniqueId> ids(nroots);
    for (auto& id : ids) REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    std::vector<std::thread> threads;
    std::vector<Failures> f(n);
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        ncclComm_t comm = nullptr;
        MP_NCCL(f[r], ncclCommInitRankScalable(&comm, n, r, nroots, ids.data(), nullptr));
        if (!comm) return;
        check_allreduce(comm, n, [](int x) { return x * x; }, f[r], "scalable");
        MP_NCCL(f[r], ncclCommDestroy(comm));
      });
    for (auto& t : threads) t.join();
    int bad = 0;
    for (auto& x : f) bad += x.count;
    CHECK(bad == 0);
  }
}

TEST_CASE("scalable init across processes, and its argument checks", "[mp][scalable]") {
  std::vector<pid_t> pids = fork_ranks(5, 60, 2, [](int r, const std::vector<ncclUniqueId>& ids) {
    Failures f;
    ncclComm_t comm = nullptr;
    MP_NCCL(f, ncclCommInitRankScalable(&comm, 5, r, 2, const_cast<ncclUniqueId*>(ids.data()), nullptr));
    if (comm) check_allreduce(comm, 5, [](int x) { return 3 * x + 1; }, f, "scalable processes");
    if (comm) MP_NCCL(f, ncclCommDestroy(comm));
    return f.count ? 1 : 0;
  });
  REQUIRE(pids.size() == 5);
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  std::vector<ncclUniqueId> ids(2);  // well-formed ids for the argument checks
  for (auto& id : ids) REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRankScalable(&comm, 4, 0, 0, ids.data(), nullptr) == ncclInvalidArgument);
  CHECK(ncclCommInitRankScalable(&comm, 1, 0, 2, ids.data(), nullptr) == ncclInvalidArgument);
  CHECK(ncclCommInitRankScalable(&comm, 4, 0, 2, nullptr, nullptr) == ncclInvalidArgument);
  CHECK(ncclCommInitRankScalable(nullptr, 4, 0, 2, ids.data(), nullptr) == ncclInvalidArgument);
  ncclUniqueId bad[2] = {ids[0], ids[1]};
  std::memset(bad[1].internal, 0x77, 32);
  CHECK(ncclCommInitRankScalable(&comm, 4, 0, 2, bad, nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("commIds[1]") != std::string::npos);
}

// ncclCommGrow with ncclCommGetUniqueId (NCCL 2.29): ranks join a live
// communicator, in threads and in processes, and Grow/Shrink round trips
// give exact collectives on every communicator they make.  Also the id's
// rules: one grow at a time per coordinator, an id is used once, the
// existing ranks must agree.
#include <catch2/catch.hpp>

#include <future>

#include "collective_check.h"
#include "scoped_env.h"

using namespace mp;

namespace {

// An exact allreduce of (rank + 1) * 3 on `comm`, which must have `n` ranks
// with this rank at `rank`.
void check_comm(ncclComm_t comm, int n, int rank, Failures& f, const std::string& what) {
  int size = -1, me = -1;
  MP_NCCL(f, ncclCommCount(comm, &size));
  MP_NCCL(f, ncclCommUserRank(comm, &me));
  if (size != n || me != rank) return f.fail(fmt::format("{}: rank {}/{}, want {}/{}", what, me, size, rank, n));
  std::vector<int64_t> in(4099, int64_t(rank + 1) * 3), out(in.size(), -1);
  MP_NCCL(f, ncclAllReduce(in.data(), out.data(), in.size(), ncclInt64, ncclSum, comm, nullptr));
  const int64_t want = int64_t(n) * (n + 1) / 2 * 3;
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != want) return f.fail(fmt::format("{}: rank {} out[{}] = {}, want {}", what, rank, i, out[i], want));
  // And every other collective, through the crafted inputs of values.h.
  for (Coll c : {Coll::AllGather, Coll::Broadcast, Coll::AlltoAll}) {
    CollCase cc;
    cc.coll = c;
    cc.count = 1000;
    cc.type = ncclInt32;
    cc.root = n - 1;
    run_and_check(cc, rank, n, comm, f);
  }
}

// Existing rank `rank` of `old_n`: grows to `new_n` (rank 0 coordinates and
// publishes the id), checks the grown communicator, shrinks it back to the
// old ranks and checks that too.
void existing_rank(ncclComm_t comm, int rank, int old_n, int new_n, const std::function<void(const ncclUniqueId&)>& publish,
                   Failures& f) {
  ncclUniqueId id{};
  if (rank == 0) {
    MP_NCCL(f, ncclCommGetUniqueId(comm, &id));
    // One grow at a time: a second id before the first is consumed is refused.
    ncclUniqueId again{};
    if (ncclCommGetUniqueId(comm, &again) != ncclInvalidUsage) f.fail("a second unconsumed grow id was handed out");
    publish(id);
  }
  ncclComm_t grown = nullptr;
  MP_NCCL(f, ncclCommGrow(comm, new_n, rank == 0 ? &id : nullptr, -1, &grown, nullptr));
  if (!grown) return f.fail("no grown communicator");
  check_comm(grown, new_n, rank, f, "grown");
  check_comm(comm, old_n, rank, f, "the parent after the grow");  // the parent stays usable
  std::vector<int> leaving;
  for (int r = old_n; r < new_n; ++r) leaving.push_back(r);
  ncclComm_t shrunk = nullptr;
  MP_NCCL(f, ncclCommShrink(grown, leaving.data(), int(leaving.size()), &shrunk, nullptr, NCCL_SHRINK_DEFAULT));
  if (shrunk) {
    check_comm(shrunk, old_n, rank, f, "shrunk back");
    MP_NCCL(f, ncclCommDestroy(shrunk));
  }
  // The grow consumed the id: the coordinator may hand out another.
  if (rank == 0) {
    ncclUniqueId next{};
    MP_NCCL(f, ncclCommGetUniqueId(comm, &next));
  }
  MP_NCCL(f, ncclCommDestroy(grown));
}

void joining_rank(const ncclUniqueId& id, int rank, int new_n, Failures& f) {
  ncclComm_t grown = nullptr;
  MP_NCCL(f, ncclCommGrow(nullptr, new_n, &id, rank, &grown, nullptr));
  if (!grown) return f.fail("no communicator for a joining rank");
  check_comm(grown, new_n, rank, f, "grown (joined)");
  MP_NCCL(f, ncclCommDestroy(grown));  // the others shrink it away; this rank just leaves
}

}  // namespace

TEST_CASE("grow 2 -> 4 ranks and shrink back, threads", "[mp][grow][threads]") {
  constexpr int kOld = 2, kNew = 4;
  std::promise<ncclUniqueId> published;
  std::shared_future<ncclUniqueId> grow_id = published.get_future().share();
  std::vector<Failures> joiners(kNew - kOld);
  std::vector<std::thread> threads;
  for (int r = kOld; r < kNew; ++r)
    threads.emplace_back([&, r] {
      if (grow_id.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
        return joiners[r - kOld].fail("no grow id published");
      joining_rank(grow_id.get(), r, kNew, joiners[r - kOld]);
    });
  const int bad = run_ranks_as_threads(kOld, [&](int rank, int n, ncclComm_t comm, Failures& f) {
    existing_rank(comm, rank, n, kNew, [&](const ncclUniqueId& id) { published.set_value(id); }, f);
  });
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
  for (auto& f : joiners) CHECK(f.count == 0);
}

TEST_CASE("grow 3 -> 5 ranks and shrink back, processes", "[mp][grow]") {
  constexpr int kOld = 3, kNew = 5;
  // Pipes from the coordinator (rank 0) to each joining process.
  std::vector<std::array<int, 2>> pipes(kNew - kOld);
  for (auto& p : pipes) REQUIRE(pipe(p.data()) == 0);
  std::vector<pid_t> pids = fork_ranks(kNew, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    Failures f;
    if (r < kOld) {
      ncclComm_t comm = nullptr;
      MP_NCCL(f, ncclCommInitRank(&comm, kOld, ids[0], r));
      if (comm) {
        existing_rank(comm, r, kOld, kNew, [&](const ncclUniqueId& id) {
          for (auto& p : pipes) (void)!write(p[1], &id, sizeof(id));
        }, f);
        MP_NCCL(f, ncclCommDestroy(comm));
      }
    } else {
      ncclUniqueId id{};
      if (read(pipes[r - kOld][0], &id, sizeof(id)) != ssize_t(sizeof(id))) return 2;
      joining_rank(id, r, kNew, f);
    }
    return f.count ? 1 : 0;
  });
  for (auto& p : pipes) close(p[0]), close(p[1]);
  int bad = int(kNew - pids.size());
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  CHECK(bad == 0);
}

TEST_CASE("grow: the existing ranks must agree, and an id is used once", "[mp][grow][errors][threads]") {
  ScopedEnv quick("BRAID_TIMEOUT", "3");
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          auto expect = [&](ncclResult_t got, ncclResult_t want, const char* what) {
            if (got != want) f.fail(fmt::format("rank {} {}: got {} want {}", rank, what, int(got), int(want)));
          };
          // Nobody coordinates: every existing rank passes NULL.
          ncclComm_t grown = nullptr;
          expect(ncclCommGrow(comm, 3, nullptr, -1, &grown, nullptr), ncclInvalidUsage, "no coordinator");
          // They disagree on the size.
          ncclUniqueId id{};
          if (rank == 0) MP_NCCL(f, ncclCommGetUniqueId(comm, &id));
          expect(ncclCommGrow(comm, rank == 0 ? 3 : 4, rank == 0 ? &id : nullptr, -1, &grown, nullptr),
                 ncclInvalidUsage, "sizes differ");
          // That grow consumed the id: it cannot coordinate another.
          if (rank == 0)
            expect(ncclCommGrow(comm, 3, &id, -1, &grown, nullptr), ncclInvalidArgument, "consumed id reused");
          check_comm(comm, n, rank, f, "the parent after failed grows");
        }) == 0);
}

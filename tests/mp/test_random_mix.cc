// Random mixes of calls on real ranks, every result exact (random_calls.h).
// A failure names its seed and call; BRAID_TEST_SEED=s reruns the cases with
// seed s instead of their fixed ones, to search further.
#include <catch2/catch.hpp>

#include "random_calls.h"
#include "scoped_env.h"

using namespace mp;
using mp::random_calls::run_sequence;
using mp::random_calls::seeds;

namespace {

RankBody sequences(std::vector<uint64_t> seed_list, int ncalls, size_t max_bytes) {
  return [=](int rank, int n, ncclComm_t comm, Failures& f) {
    for (uint64_t seed : seed_list)
      if (!f.count) run_sequence(seed, ncalls, max_bytes, rank, n, comm, f);
  };
}

}  // namespace

TEST_CASE("random mixes of calls on threads, 2 to 8 ranks", "[mp][threads][random]") {
  for (int n : {2, 3, 5, 8}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_threads(n, sequences(seeds({uint64_t(n), 100 + uint64_t(n)}), 60, 1 << 20)) == 0);
  }
}

TEST_CASE("random mixes of calls on processes, 2 to 4 ranks", "[mp][processes][random]") {
  for (int n : {2, 3, 4}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_processes(n, sequences(seeds({200 + uint64_t(n), 300 + uint64_t(n)}), 100, 8 << 20), 240) == 0);
  }
}

TEST_CASE("random mixes of calls between hosts: shared memory within, sockets across",
          "[mp][processes][socket][random]") {
  // Four processes as two hosts of two ranks each.
  auto two_hosts = [](int rank) {
    setenv("BRAID_HOSTID", fmt::format("test-host-{}", rank / 2).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank / 2 + 1).c_str(), 1);
  };
  CHECK(run_ranks_as_processes(4, sequences(seeds({400, 401}), 80, 4 << 20), 240, two_hosts) == 0);
}

TEST_CASE("random mixes of calls under BRAID_DETERMINISTIC", "[mp][processes][deterministic][random]") {
  for (int n : {3, 4}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_processes(n, sequences(seeds({500 + uint64_t(n)}), 100, 8 << 20), 240,
                                 [](int) { setenv("BRAID_DETERMINISTIC", "1", 1); }) == 0);
  }
}

TEST_CASE("random mixes of calls on buffers in symmetric windows", "[mp][processes][random]") {
  // Every call's buffers are carved from one ncclMemAlloc window per rank,
  // at the same offsets on every rank: calls of 32 KiB and more take the
  // single-copy path, loading and storing peers' buffers directly.
  constexpr size_t kWindowBytes = size_t(48) << 20;
  for (int n : {2, 3}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_processes(n, [&](int rank, int nr, ncclComm_t comm, Failures& f) {
            void* base = nullptr;
            ncclWindow_t window = nullptr;
            MP_NCCL(f, ncclMemAlloc(&base, kWindowBytes));
            if (base) MP_NCCL(f, ncclCommWindowRegister(comm, base, kWindowBytes, &window, NCCL_WIN_COLL_SYMMETRIC));
            if (window) {
              const random_calls::Arena arena{static_cast<char*>(base), kWindowBytes};
              for (uint64_t seed : seeds({600 + uint64_t(n), 700 + uint64_t(n)}))
                if (!f.count) run_sequence(seed, 100, 8 << 20, rank, nr, comm, f, arena);
              MP_NCCL(f, ncclCommWindowDeregister(comm, window));
            }
            if (base) MP_NCCL(f, ncclMemFree(base));
          }, 240) == 0);
  }
}

TEST_CASE("random mixes of calls over sockets, ranks as threads", "[mp][threads][socket][random]") {
  ScopedEnv socket("BRAID_TRANSPORT", "socket");
  CHECK(run_ranks_as_threads(3, sequences(seeds({800, 801}), 60, 1 << 20)) == 0);
}

namespace {

// Random mixes on a communicator and on a split of it interleaved: each
// rank's child holds the ranks of its parity, renumbered in reverse, and
// runs a sequence of its own; at every step all ranks take the parent's
// next group, their child's, or both in one group.
RankBody parent_and_child(uint64_t seed, int ncalls, size_t max_bytes) {
  return [=](int rank, int n, ncclComm_t comm, Failures& f) {
    ncclComm_t child = nullptr;
    MP_NCCL(f, ncclCommSplit(comm, rank % 2, n - rank, &child, nullptr));
    int child_rank = -1, child_n = 0;
    if (child) MP_NCCL(f, ncclCommUserRank(child, &child_rank));
    if (child) MP_NCCL(f, ncclCommCount(child, &child_n));
    if (f.count) return;
    if (child_rank != (n - 1 - rank) / 2) f.fail(fmt::format("rank {} is rank {} of its child", rank, child_rank));
    random_calls::Sequence parent(seed, ncalls, max_bytes, rank, n, comm);
    random_calls::Sequence own(seed * 31 + uint64_t(rank % 2) + 1, ncalls, max_bytes, child_rank, child_n, child);
    for (uint64_t step = 0; !f.count && !(parent.done() && own.done()); ++step) {
      const uint64_t pick = mix(seed ^ step) % 4;  // the same on every rank
      std::vector<random_calls::Sequence*> now;
      if (pick != 2 && !parent.done()) now.push_back(&parent);
      if (pick >= 2 && !own.done()) now.push_back(&own);
      if (now.size() == 1) now[0]->run_group(f);
      if (now.size() == 2) random_calls::run_together(now, f);
    }
    MP_NCCL(f, ncclCommDestroy(child));
  };
}

}  // namespace

TEST_CASE("random mixes of calls on a communicator and a split of it, processes", "[mp][processes][random]") {
  for (uint64_t seed : seeds({900, 901})) {
    INFO("seed " << seed);
    CHECK(run_ranks_as_processes(4, parent_and_child(seed, 60, 2 << 20), 240) == 0);
  }
}

TEST_CASE("random mixes of calls on a communicator and a split of it, threads", "[mp][threads][random]") {
  for (uint64_t seed : seeds({900, 901})) {
    INFO("seed " << seed);
    CHECK(run_ranks_as_threads(5, parent_and_child(seed, 40, 1 << 20)) == 0);
  }
}

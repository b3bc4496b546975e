// StragglAR on real ranks: a late rank (sleeping before each call) joins a
// schedule the others started without it; results are checked exactly for
// several rank counts (odd included), straggler ranks, counts and placements.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "collective_check.h"
#include "scoped_env.h"

using namespace mp;

namespace {

// AllReduce of each count, both placements; `late` sleeps `delay_ms` first.
RankBody late_allreduce(int late, int delay_ms, std::vector<size_t> counts,
                        std::vector<ncclDataType_t> types = {ncclFloat}, ncclRedOp_t op = ncclSum) {
  return [=](int rank, int n, ncclComm_t comm, Failures& f) {
    for (ncclDataType_t type : types)
      for (size_t count : counts)
        for (bool in_place : {false, true}) {
          if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          CollCase c;
          c.count = count;
          c.type = type;
          c.op = op;
          c.in_place = in_place;
          run_and_check(c, rank, n, comm, f);
        }
  };
}

}  // namespace

TEST_CASE("BRAID_STRAGGLER=<rank>: large AllReduce with a late rank, threads", "[mp][threads][stragglar]") {
  for (int n : {2, 3, 4, 5, 7, 8})
    for (int late : {0, n / 2, n - 1}) {
      ScopedEnv env("BRAID_STRAGGLER", std::to_string(late));
      INFO("n=" << n << " straggler=" << late);
      // 70001 floats: above the small-message cutoff, so StragglAR replaces
      // ring; not a multiple of n-1, so chunks are uneven.
      CHECK(run_ranks_as_threads(n, late_allreduce(late, 3, {70001})) == 0);
    }
}

TEST_CASE("BRAID_STRAGGLAR_LANES=compact (the CUDA backend's layout) on the host, threads and processes",
          "[mp][processes][stragglar]") {
  // The schedule the CUDA backend runs by default, checked exactly on the
  // host executor, which interprets the same records the kernels do.
  for (int n : {2, 3, 4, 8})
    for (int late : {0, n - 1}) {
      ScopedEnv lanes("BRAID_STRAGGLAR_LANES", "compact");
      ScopedEnv env("BRAID_STRAGGLER", std::to_string(late));
      INFO("threads n=" << n << " straggler=" << late);
      CHECK(run_ranks_as_threads(n, late_allreduce(late, 3, {70001, 3})) == 0);
    }
  auto setup = [](int) {
    setenv("BRAID_STRAGGLAR_LANES", "compact", 1);
    setenv("BRAID_STRAGGLER", "1", 1);
  };
  CHECK(run_ranks_as_processes(4, late_allreduce(1, 20, {300007}), 90, setup) == 0);
}

TEST_CASE("BRAID_ALGO=stragglar: tiny and uneven counts, every type class", "[mp][threads][stragglar]") {
  ScopedEnv algo("BRAID_ALGO", "allreduce=stragglar");
  for (int n : {1, 2, 3, 4, 6, 7}) {
    ScopedEnv env("BRAID_STRAGGLER", std::to_string(n > 2 ? 1 : 0));
    INFO("n=" << n);
    // Counts below n-1 leave some chunks empty.
    CHECK(run_ranks_as_threads(n, late_allreduce(n > 2 ? 1 : 0, 1, {1, 2, 5, 1031},
                                                 {ncclFloat, ncclInt32, ncclFloat64, ncclBfloat16})) == 0);
    CHECK(run_ranks_as_threads(n, late_allreduce(0, 0, {37}, {ncclFloat}, ncclAvg)) == 0);
    CHECK(run_ranks_as_threads(n, late_allreduce(0, 0, {37}, {ncclInt32}, ncclMax)) == 0);
  }
}

TEST_CASE("BRAID_STRAGGLER=<rank>: forked processes, many fragments", "[mp][processes][stragglar]") {
  for (int n : {3, 4, 5}) {
    INFO("n=" << n);
    const int late = n == 4 ? 0 : n - 2;
    auto setup = [late](int) { setenv("BRAID_STRAGGLER", std::to_string(late).c_str(), 1); };
    // 300007 floats = 1.2 MB: several fragments per chunk, so phase 0 runs
    // ahead over tiles while phase 1 waits for the straggler.
    CHECK(run_ranks_as_processes(n, late_allreduce(late, 20, {300007}), 90, setup) == 0);
  }
}

TEST_CASE("BRAID_STRAGGLER=<rank> over sockets (ranks as separate hosts)", "[mp][processes][socket][stragglar]") {
  auto setup = [](int rank) {
    setenv("BRAID_STRAGGLER", "2", 1);
    setenv("BRAID_HOSTID", fmt::format("stragglar-host-{}", rank).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank + 1).c_str(), 1);
  };
  CHECK(run_ranks_as_processes(3, late_allreduce(2, 10, {1, 100003}), 90, setup) == 0);
}

TEST_CASE("BRAID_STRAGGLER=auto: results stay exact while the late rank changes", "[mp][processes][stragglar]") {
  // Rank 1 is late for 10 calls, then rank 3 for 10, then nobody: auto
  // switches to StragglAR, to the other straggler and back to ring on every
  // rank alike (a disagreement would hang until the alarm or corrupt results).
  auto setup = [](int) { setenv("BRAID_STRAGGLER", "auto", 1); };
  CHECK(run_ranks_as_processes(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          for (int call = 0; call < 28; ++call) {
            int late = call < 10 ? 1 : call < 20 ? 3 : -1;
            if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(15));
            CollCase c;
            c.count = 200003;
            c.in_place = call % 2;
            run_and_check(c, rank, n, comm, f);
          }
        }, 120, setup) == 0);
}

// As processes, this used to hang now and then: an attaching rank mapped the
// arrival board before rank 0 had sized it and died of SIGBUS, and the others
// waited for it (see src/plan/arrival_board.cc).
TEST_CASE("BRAID_STRAGGLER=eager: whoever comes last is the straggler, call by call",
          "[eager-processes][mp][processes][stragglar]") {
  // The late rank changes every call (and sometimes nobody is late): the
  // first n-1 arrivals run phase 0, the shared arrival word names the last.
  for (int n : {2, 3, 5}) {
    INFO("n=" << n);
    auto setup = [](int) { setenv("BRAID_STRAGGLER", "eager", 1); };
    CHECK(run_ranks_as_processes(n, [](int rank, int nr, ncclComm_t comm, Failures& f) {
            for (int call = 0; call < 12; ++call) {
              int late = call % (nr + 1) - 1;  // -1: nobody
              if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(10));
              CollCase c;
              c.count = 100003;
              c.in_place = call % 2;
              run_and_check(c, rank, nr, comm, f);
              c.count = 5;  // small calls stay off the board (rd), interleaved
              run_and_check(c, rank, nr, comm, f);
            }
          }, 90, setup) == 0);
  }
}

TEST_CASE("BRAID_STRAGGLER=eager on ranks as threads", "[mp][threads][stragglar]") {
  ScopedEnv env("BRAID_STRAGGLER", "eager");
  CHECK(run_ranks_as_threads(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          for (int call = 0; call < 10; ++call) {
            if (rank == (call * 3) % n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
            CollCase c;
            c.count = 70001;
            c.in_place = call % 2;
            run_and_check(c, rank, n, comm, f);
          }
        }) == 0);
}

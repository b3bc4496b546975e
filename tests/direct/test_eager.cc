// Eager rooted collectives (src/exec/host/eager.h): exact results for
// Broadcast, Reduce, Gather and Scatter over datatypes, ops, roots, in and
// out of place and NULL where NCCL allows it; many calls in a row so every
// slot is reused, mixed with one-shot and schedule calls; a root that runs
// ahead of a rank that has not called yet, and waits for it beyond the
// board's depth; on forked processes and threads.
// The communicator's own count of eager calls proves which path ran.
// Faults (a dead peer, an abort) are in tests/mp/test_faults.cc.
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "collective_check.h"
#include "fast_path_cases.h"
#include "harness.h"
#include "src/exec/host/host_backend.h"
#include "src/runtime/comm.h"
#include "src/exec/host/eager.h"

using namespace mp;

namespace {

// The host backend's board counters (it runs every communicator here).
braid::BoardCounts boards(ncclComm_t comm) {
  return static_cast<braid::HostBackend&>(*comm->backend).board_counts();
}

constexpr Coll kRooted[] = {Coll::Broadcast, Coll::Reduce, Coll::Gather, Coll::Scatter};

// Runs `c` and checks that it did (or did not) go eager.
void check_eager(const CollCase& c, int rank, int n, ncclComm_t comm, Failures& f, bool eager) {
  const uint64_t before = boards(comm).eager;
  run_and_check(c, rank, n, comm, f);
  if ((boards(comm).eager - before == 1) != eager)
    f.fail(describe(c, rank, n) + (eager ? ": did not run eager" : ": ran eager"));
}

// Each rooted collective at 1 element, 13, the most eager takes (4096 bytes
// for the largest writer), and one more, which runs the schedule.
void rooted_body(int rank, int n, ncclComm_t comm, Failures& f) {
  for (Coll coll : kRooted)
    for (TypeOp to : {TypeOp{ncclFloat, ncclSum}, TypeOp{ncclFloat64, ncclAvg}, TypeOp{ncclFloat8e4m3, ncclMax},
                      TypeOp{ncclInt32, ncclProd}}) {
      const size_t most = 4096 / type_size(to.type) / (coll == Coll::Scatter ? size_t(n) : 1);
      for (size_t count : {size_t(1), size_t(13), most, most + 1})
        for (bool in_place : {false, true})
          check_eager({.coll = coll,
                       .count = count,
                       .type = to.type,
                       .op = to.op,
                       .root = int(count % size_t(n)),
                       .in_place = in_place,
                       .null_unused = !in_place},
                      rank, n, comm, f, count <= most);
    }
  // Many calls of every kind, roots moving, so every slot is reused several
  // times, with one-shot and schedule calls in between.
  for (int i = 0; i < 5 * braid::kEagerDepth && f.count == 0; ++i) {
    CollCase c{.coll = kRooted[i % 4], .count = size_t(1 + i % 29), .root = i % n, .in_place = i % 3 == 0};
    if (i % 7 == 6) c.coll = Coll::AllReduce;  // one-shot
    if (i % 11 == 10) c.count = 5000;           // schedule
    check_eager(c, rank, n, comm, f, c.coll != Coll::AllReduce && c.count < 5000);
  }
  // Inside a group it runs eager too (a step at a time, beside the group's
  // other work): whether a rank grouped it must not change its path.
  MP_NCCL(f, ncclGroupStart());
  std::vector<float> a(8, float(rank));
  const uint64_t before = boards(comm).eager;
  MP_NCCL(f, ncclBroadcast(a.data(), a.data(), 8, ncclFloat, 0, comm, nullptr));
  MP_NCCL(f, ncclGroupEnd());
  if (boards(comm).eager != before + 1) f.fail("a grouped Broadcast did not run eager");
  if (a[7] != 0.f) f.fail("grouped Broadcast: wrong value");
}

}  // namespace

TEST_CASE("eager Broadcast, Reduce, Gather, Scatter: exact, slots reused, across processes", "[eager][processes]") {
  set_board_env();
  for (int n : {2, 3, 4}) {
    INFO(n << " processes");
    CHECK(run_ranks_as_processes(n, rooted_body, 120) == 0);
  }
}

TEST_CASE("eager rooted collectives: ranks as threads", "[eager][threads]") {
  set_board_env();
  CHECK(run_ranks_as_threads(4, rooted_body) == 0);
}

TEST_CASE("eager Broadcast: the root runs a board's depth of calls ahead of a rank that has not called",
          "[eager][threads]") {
  set_board_env();
  static std::atomic<bool> root_done{false};
  root_done = false;
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          std::vector<int32_t> v(4);
          // The first call maps the board on every rank, so both make it.
          v.assign(4, rank == 0 ? 7 : 0);
          MP_NCCL(f, ncclBroadcast(v.data(), v.data(), 4, ncclInt32, 0, comm, nullptr));
          if (v[3] != 7) f.fail("first Broadcast: wrong value");
          if (rank == 0) {
            for (int k = 1; k <= boards(comm).eager_depth; ++k) {
              v.assign(4, k);
              MP_NCCL(f, ncclBroadcast(v.data(), v.data(), 4, ncclInt32, 0, comm, nullptr));
            }
            root_done = true;  // all returned with rank 1 still waiting below
            return;
          }
          // Waits for the root to finish all its calls (bounded: a root that
          // blocked on this rank would wait forever otherwise).
          auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (!root_done && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          if (!root_done) f.fail("the root blocked on a rank that had not called yet");
          for (int k = 1; k <= boards(comm).eager_depth; ++k) {
            MP_NCCL(f, ncclBroadcast(nullptr, v.data(), 4, ncclInt32, 0, comm, nullptr));
            if (v[0] != k || v[3] != k) f.fail(fmt::format("Broadcast {} read {} after the root ran ahead", k, v[0]));
          }
          (void)n;
        }) == 0);
}

TEST_CASE("eager Broadcast: a root a board's depth ahead waits for the slowest reader, then all read exact values",
          "[eager][threads]") {
  set_board_env();
  static std::atomic<int> root_returned{0};  // the last call the root returned from
  // Rank 0 is the root, the last rank reads late, any other keeps up: the
  // root must wait for the slowest reader, not the fastest.
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    std::vector<int32_t> v(4);
    auto broadcast = [&](int k) {
      v.assign(4, rank == 0 ? k : -1);
      MP_NCCL(f, ncclBroadcast(v.data(), v.data(), 4, ncclInt32, 0, comm, nullptr));
      if (v[0] != k || v[3] != k) f.fail(fmt::format("rank {}: Broadcast {} gave {}", rank, k, v[0]));
    };
    broadcast(1);  // opens the board, mapped by every rank once it returns
    const int depth = boards(comm).eager_depth;
    const int last = 2 * depth + 3;  // slots reused twice, so the root must wait twice
    if (rank < n - 1) {
      for (int k = 2; k <= last && f.count == 0; ++k) {
        broadcast(k);
        if (rank == 0) root_returned = k;
      }
      return;
    }
    // Call depth + 2 reuses call 2's slot, which this rank has not read:
    // the root may return from calls up to depth + 1, no further.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (root_returned > depth + 1)
      f.fail(fmt::format("the root returned from call {} with a reader at call 1 (depth {})", root_returned.load(),
                         depth));
    for (int k = 2; k <= depth + 2 && f.count == 0; ++k) broadcast(k);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (f.count == 0 && root_returned > 2 * depth + 2)
      f.fail(fmt::format("the root returned from call {} with a reader at call {} (depth {})", root_returned.load(),
                         depth + 2, depth));
    for (int k = depth + 3; k <= last && f.count == 0; ++k) broadcast(k);
  };
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    root_returned = 0;
    CHECK(run_ranks_as_threads(n, body) == 0);
  }
}

// Payloads larger than a header's line go in the writer's data ring, which
// holds fewer of the largest than the board's depth: the root runs exactly
// as many calls ahead as the ring holds, and payloads of a size that does
// not divide the ring skip its end and come out exact, for every rooted
// collective.
TEST_CASE("eager: a root runs as far ahead as its data ring holds, and payloads skip the ring's end exactly",
          "[eager][threads]") {
  set_board_env();
  setenv("BRAID_ONESHOT_MAX_BYTES", "65536", 1);
  static std::atomic<int> root_returned{0};
  root_returned = 0;
  CHECK(run_ranks_as_threads(2, [](int rank, int, ncclComm_t comm, Failures& f) {
          // Call k's element i holds k * 100000 + i, so a stale or misplaced payload shows.
          auto broadcast = [&](int k, size_t bytes) {
            std::vector<int32_t> v(bytes / 4, -1);
            if (rank == 0)
              for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t(k * 100000 + int(i));
            MP_NCCL(f, ncclBroadcast(v.data(), v.data(), v.size(), ncclInt32, 0, comm, nullptr));
            for (size_t i = 0; i < v.size() && f.count == 0; ++i)
              if (v[i] != int32_t(k * 100000 + int(i)))
                f.fail(fmt::format("rank {}: Broadcast {} of {} B: element {} is {}", rank, k, bytes, i, v[i]));
          };
          broadcast(1, 16);  // opens the board: inline, no ring bytes
          const int fit = int(boards(comm).eager_ring_bytes / 65536);
          if (fit < 2 || fit >= boards(comm).eager_depth) f.fail(fmt::format("{} 64 KiB payloads fit the ring", fit));
          const int calls = 3 * fit;
          if (rank == 0) {
            for (int k = 2; k <= calls && f.count == 0; ++k) {
              broadcast(k, 65536);
              root_returned = k;
            }
          } else {
            // Call fit + 2 needs the bytes of call 2, which this rank has not read.
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            if (root_returned != fit + 1)
              f.fail(fmt::format("the root returned from call {} with a {}-payload ring and a reader at call 1",
                                 root_returned.load(), fit));
            for (int k = 2; k <= calls && f.count == 0; ++k) broadcast(k, 65536);
          }
          // 40000 B payloads do not divide the ring; both ranks keep pace,
          // the reader sometimes late, over several laps of the ring.
          for (int k = calls + 1; k <= calls + 5 * fit && f.count == 0; ++k) {
            if (rank == 1 && k % 13 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            broadcast(k, k % 3 == 0 ? 40 : 40000);
          }
          // Gather (every non-root writes), Scatter (the root writes every
          // block) and Reduce (every rank writes) over several laps too.
          for (int k = 0; k < 5 * fit && f.count == 0; ++k) {
            const Coll coll = kRooted[1 + k % 3];
            const size_t count = coll == Coll::Scatter ? 5000 : 10000;  // 40000 B for each writer
            check_eager({.coll = coll, .count = count, .type = ncclInt32, .root = k % 2, .in_place = k % 4 == 1}, rank,
                        2, comm, f, true);
          }
        }) == 0);
  unsetenv("BRAID_ONESHOT_MAX_BYTES");
}

// None of them has a ring: "ring" pins none of them (until 2026-12-07 it
// pinned them to their default schedules, off the board, with a warning).
TEST_CASE("eager: BRAID_ALGO=ring pins no rooted collective (none has a ring algorithm), all stay eager",
          "[eager][processes][algo]") {
  set_board_env();
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          for (Coll coll : kRooted) check_eager({.coll = coll, .count = 100}, rank, n, comm, f, true);
        }, 60, [](int) { setenv("BRAID_ALGO", "ring", 1); }) == 0);
}

TEST_CASE("eager: BRAID_ALGO for Broadcast keeps it on its schedule, Reduce still eager", "[eager][processes]") {
  set_board_env();
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          check_eager({.coll = Coll::Broadcast, .count = 100}, rank, n, comm, f, false);
          check_eager({.coll = Coll::Reduce, .count = 100}, rank, n, comm, f, true);
        }, 60, [](int) { setenv("BRAID_ALGO", "broadcast=binomial", 1); }) == 0);
}

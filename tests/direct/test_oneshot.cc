// One-shot small collectives (src/exec/host/oneshot.h): exact results for
// AllReduce, ReduceScatter, AllGather and AlltoAll, datatypes and ops, in and out of place, over many calls in
// a row (the two slots per rank are reused) mixed with calls that run
// schedules, on forked processes and on threads; and the communicator's own
// count of one-shot calls proves which path ran.  Faults are in
// tests/mp/test_faults.cc.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "collective_check.h"
#include "fast_path_cases.h"
#include "harness.h"
#include "src/exec/host/host_backend.h"
#include "src/plan/host_tuning.h"
#include "src/runtime/comm.h"

using namespace mp;

namespace {

// The host backend's board counters (it runs every communicator here).
braid::BoardCounts boards(ncclComm_t comm) {
  return static_cast<braid::HostBackend&>(*comm->backend).board_counts();
}

constexpr TypeOp kTypeOps[] = {{ncclFloat, ncclSum},    {ncclInt32, ncclMax},   {ncclBfloat16, ncclSum},
                               {ncclFloat64, ncclAvg},  {ncclUint8, ncclMin},   {ncclFloat16, ncclProd},
                               {ncclInt64, ncclSum},    {ncclFloat8e4m3, ncclMax}};

// Runs `c` and checks that it did (or did not) go one-shot.
void check_path(const CollCase& c, int rank, int n, ncclComm_t comm, Failures& f, bool oneshot) {
  const uint64_t before = boards(comm).oneshot;
  run_and_check(c, rank, n, comm, f);
  if ((boards(comm).oneshot - before == 1) != oneshot)
    f.fail(describe(c, rank, n) + (oneshot ? ": did not run one-shot" : ": ran one-shot"));
}

void oneshot_body(int rank, int n, ncclComm_t comm, Failures& f) {
  // 4096 bytes is the default limit: 1024 floats go one-shot, 1025 do not.
  for (const TypeOp& to : kTypeOps)
    for (size_t count : {size_t(1), size_t(13), size_t(4096 / type_size(to.type))})
      for (bool in_place : {false, true})
        check_path({.count = count, .type = to.type, .op = to.op, .in_place = in_place}, rank, n, comm, f, true);
  // Slot reuse and interleaving with the executor: alternate sizes for a while.
  for (int i = 0; i < 300 && f.count == 0; ++i) {
    CollCase c;
    c.count = i % 3 == 2 ? 1025 : size_t(1 + i % 40);
    c.in_place = i % 2 == 1;
    check_path(c, rank, n, comm, f, c.count <= 1024);
  }
  // Inside a group it takes the board too, a step at a time beside the
  // group's other work: whether a rank grouped it must not change its path.
  const uint64_t before = boards(comm).oneshot;
  std::vector<float> a(8, float(rank)), b(8);
  MP_NCCL(f, ncclGroupStart());
  MP_NCCL(f, ncclAllReduce(a.data(), b.data(), 8, ncclFloat, ncclSum, comm, nullptr));
  MP_NCCL(f, ncclGroupEnd());
  if (boards(comm).oneshot != before + 1) f.fail("a grouped AllReduce did not run one-shot");
  if (b[7] != float(n * (n - 1) / 2)) f.fail("grouped AllReduce: wrong sum");
}

// ReduceScatter, AllGather and AlltoAll at 1 element, 13, and the most
// one-shot takes (4096 bytes of input per rank); one element more runs the
// schedule.  Rooted collectives never run one-shot (they run eager: test_eager.cc).
void collectives_body(int rank, int n, ncclComm_t comm, Failures& f) {
  const Coll colls[] = {Coll::ReduceScatter, Coll::AllGather, Coll::AlltoAll};
  for (Coll coll : colls) {
    const bool multi_block_input = coll == Coll::ReduceScatter || coll == Coll::AlltoAll;
    for (const TypeOp& to : {kTypeOps[0], kTypeOps[3], kTypeOps[7]}) {
      const size_t most = 4096 / type_size(to.type) / (multi_block_input ? size_t(n) : 1);
      for (size_t count : {size_t(1), size_t(13), most, most + 1})
        for (bool in_place : {false, true})
          check_path({.coll = coll, .count = count, .type = to.type, .op = to.op, .in_place = in_place}, rank, n,
                     comm, f, count <= most);
    }
  }
  for (Coll coll : {Coll::Reduce, Coll::Broadcast, Coll::Gather, Coll::Scatter}) {
    CollCase c;
    c.coll = coll;
    c.count = 13;
    c.root = n - 1;
    c.null_unused = true;
    check_path(c, rank, n, comm, f, false);
  }
  // Calls of every kind, one after another, on the same two slots.
  for (int i = 0; i < 160 && f.count == 0; ++i) {
    CollCase c;
    c.coll = i % 4 == 3 ? Coll::AllReduce : colls[i % 3];
    c.count = size_t(1 + i % 17);
    c.in_place = i % 3 == 0;
    check_path(c, rank, n, comm, f, true);
  }
}

}  // namespace

TEST_CASE("one-shot AllReduce: exact for every type and op, slots reused, across processes", "[oneshot][processes]") {
  set_board_env();
  for (int n : {2, 3, 4}) {
    INFO(n << " processes");
    CHECK(run_ranks_as_processes(n, oneshot_body, 120) == 0);
  }
}

TEST_CASE("one-shot AllReduce: ranks as threads", "[oneshot][threads]") {
  set_board_env();
  CHECK(run_ranks_as_threads(5, oneshot_body) == 0);
}

TEST_CASE("one-shot ReduceScatter, AllGather, AlltoAll: exact, and rooted collectives not one-shot",
          "[oneshot][processes]") {
  set_board_env();
  for (int n : {2, 3}) {
    INFO(n << " processes");
    CHECK(run_ranks_as_processes(n, collectives_body, 120) == 0);
  }
  CHECK(run_ranks_as_threads(4, collectives_body) == 0);
}

TEST_CASE("one-shot: BRAID_ALGO for one collective keeps that one on its schedule, the others one-shot",
          "[oneshot][processes]") {
  set_board_env();
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          CollCase c;
          c.count = 100;
          c.coll = Coll::AllGather;
          check_path(c, rank, n, comm, f, false);
          c.coll = Coll::AllReduce;
          check_path(c, rank, n, comm, f, true);
        }, 60, [](int) { setenv("BRAID_ALGO", "allgather=ring", 1); }) == 0);
}

// "ring" pins what has a ring; AlltoAll has none, and keeps its board (until
// 2026-12-07 it was pinned to its default schedule, with a warning).
TEST_CASE("one-shot: BRAID_ALGO=ring pins only the collectives with a ring algorithm, AlltoAll stays one-shot",
          "[oneshot][processes][algo]") {
  set_board_env();
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          CollCase c;
          c.count = 100;
          for (Coll coll : {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter}) {
            c.coll = coll;
            check_path(c, rank, n, comm, f, false);
          }
          c.coll = Coll::AlltoAll;
          check_path(c, rank, n, comm, f, true);
        }, 60, [](int) { setenv("BRAID_ALGO", "ring", 1); }) == 0);
}

// The board is none of NCCL's algorithms: a list of names keeps a call off
// it, an exclusion does not.
TEST_CASE("one-shot: NCCL_ALGO=^ring keeps the board, NCCL_ALGO=ring does not", "[oneshot][processes][nccl_algo]") {
  set_board_env();
  for (const std::string value : {"^ring", "ring"}) {
    INFO("NCCL_ALGO=" << value);
    CHECK(run_ranks_as_processes(2, [&](int rank, int n, ncclComm_t comm, Failures& f) {
            for (Coll coll : {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter})
              check_path({.coll = coll, .count = 100}, rank, n, comm, f, value == "^ring");
          }, 60, [&](int) { setenv("NCCL_ALGO", value.c_str(), 1); }) == 0);
  }
}

TEST_CASE("one-shot AllReduce: off with BRAID_ONESHOT_MAX_BYTES=0 and with BRAID_ALGO", "[oneshot][processes]") {
  set_board_env();
  for (auto [var, value] : {std::pair{"BRAID_ONESHOT_MAX_BYTES", "0"}, std::pair{"BRAID_ALGO", "allreduce=rd"}}) {
    INFO(var << "=" << value);
    CHECK(run_ranks_as_processes(2, [var = var, value = value](int rank, int n, ncclComm_t comm, Failures& f) {
            CollCase c;
            c.count = 100;
            check_path(c, rank, n, comm, f, false);
          }, 60, [var = var, value = value](int) { setenv(var, value, 1); }) == 0);
  }
}

TEST_CASE("one-shot AllReduce: not between hosts (BRAID_HOSTID differs)", "[oneshot][processes]") {
  set_board_env();
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          CollCase c;
          c.count = 100;
          check_path(c, rank, n, comm, f, false);
        }, 60, [](int rank) { setenv("BRAID_HOSTID", fmt::format("host-{}", rank).c_str(), 1); }) == 0);
}

// BRAID_ONESHOT_MAX_BYTES=auto (unset): the boards take calls up to 8 KiB
// on 2 ranks with a core each, or where ranks outnumber the host's cores up
// to 64 KiB, and 256 KiB for Broadcast and Gather; a rank that sets a number
// decides for all and every collective (the smallest wins, auto above any).
// Runs the oversubscribed case where cores + 1 ranks are at most 8; the rule
// for more ranks with a core each is tests/unit/test_host_tuning.cc's.
TEST_CASE("boards: auto takes larger calls where ranks outnumber cores, Broadcast and Gather most, a set value wins",
          "[oneshot][eager][processes]") {
  set_board_env();
  unsetenv("BRAID_ONESHOT_MAX_BYTES");
  static uint64_t limit = 0, broadcast_gather_limit = 0;
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    // Each collective just at and just past every limit (its largest
    // writer's bytes; a Gather's is one block).
    for (Coll coll : {Coll::AllReduce, Coll::AlltoAll, Coll::Broadcast, Coll::Gather, Coll::Reduce, Coll::Scatter}) {
      const bool copies = coll == Coll::Broadcast || coll == Coll::Gather;
      const uint64_t mine = copies ? broadcast_gather_limit : limit;
      const size_t blocks = coll == Coll::AlltoAll || coll == Coll::Scatter ? size_t(n) : 1;
      for (uint64_t bytes : {uint64_t(4096), uint64_t(8192), uint64_t(65536), uint64_t(262144)})
        for (size_t count : {size_t(bytes / 4 / blocks), size_t(bytes / 4 / blocks + 1)}) {
          const bool rooted = coll != Coll::AllReduce && coll != Coll::AlltoAll;
          const braid::BoardCounts before = boards(comm);
          run_and_check({.coll = coll, .count = count, .root = n - 1}, rank, n, comm, f);
          const braid::BoardCounts after = boards(comm);
          const bool on_board = (rooted ? after.eager - before.eager : after.oneshot - before.oneshot) == 1;
          if (on_board != (count * 4 * blocks <= mine))
            f.fail(fmt::format("{} of {} B with a {} B limit: {}", describe({.coll = coll, .count = count}, rank, n),
                               count * 4 * blocks, mine, on_board ? "on a board" : "not on a board"));
        }
    }
  };
  const int cores = braid::host_usable_cores();
  struct Case {
    int n;
    const char* rank0_value;  // nullptr: every rank on auto
    uint64_t limit, broadcast_gather_limit;
  };
  const bool one_core = cores == 1;  // 2 ranks outnumber it
  std::vector<Case> cases = {{2, nullptr, one_core ? 65536u : 8192u, one_core ? 262144u : 8192u},
                             {2, "16384", 16384, 16384}};
  if (cores + 1 <= 8) cases.push_back({cores + 1, nullptr, 65536, 262144});
  else WARN("no oversubscribed case: " << cores << " cores");
  for (const Case& c : cases) {
    INFO(c.n << " processes on " << cores << " cores, rank 0's value " << (c.rank0_value ? c.rank0_value : "auto"));
    limit = c.limit;
    broadcast_gather_limit = c.broadcast_gather_limit;
    const char* value = c.rank0_value;
    CHECK(run_ranks_as_processes(c.n, body, 120, [value](int rank) {
            if (rank == 0 && value) setenv("BRAID_ONESHOT_MAX_BYTES", value, 1);
          }) == 0);
  }
}

// One-sided schedules (algorithms/one_sided.cc) on the host backend's
// executor: ranks as threads (loads and stores) and as processes (CMA, and
// loads and stores in shareable memory mapped once: src/exec/host/peer_reach.h),
// every collective they serve, both placements, exact results, and the
// executor's counters prove the one-sided schedule is what ran and which way
// it reached the peers.  Where the ranks cannot reach each other (CMA off),
// BRAID_ALGO naming one falls back to the default schedule, still exact.
#include <catch2/catch.hpp>

#include <functional>

#include "collective_check.h"
#include "harness.h"
#include "scoped_env.h"
#include "src/exec/host/collective_task.h"

using namespace mp;

namespace {

constexpr const char* kOneShot =
    "allreduce=oneshot,allgather=oneshot,reducescatter=oneshot,broadcast=oneshot,"
    "alltoall=oneshot";
// Two-shot AllReduce alone: ReduceScatter pinned to ring, since on 2 ranks
// the size rule would run its one-shot too.
constexpr const char* kTwoShot = "allreduce=twoshot,reducescatter=ring";
constexpr Coll kServed[] = {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::Broadcast, Coll::AlltoAll};

uint64_t one_sided() { return braid::one_sided_calls().load(); }
uint64_t cma_ops() { return braid::one_sided_cma_ops().load(); }
uint64_t opens() { return braid::peer_memory_opens().load(); }

// Every served collective at each count, both placements, every root for
// Broadcast; AllReduce also in other types and ops; in `given` buffers if
// set (else fresh heap buffers).  Returns the calls that ran (count > 0).
size_t sweep(int rank, int n, ncclComm_t comm, Failures& f, std::initializer_list<size_t> counts,
             const Buffers* given = nullptr) {
  size_t calls = 0;
  for (size_t count : counts)
    for (Coll coll : kServed)
      for (int root = 0; root < (coll == Coll::Broadcast ? n : 1); ++root)
        for (bool in_place : {false, true}) {
          run_and_check(CollCase{.coll = coll, .count = count, .root = root, .in_place = in_place}, rank, n, comm, f,
                        given);
          calls += count > 0;  // a call of count 0 returns at once
        }
  for (auto [type, op] : {std::pair{ncclInt8, ncclProd},
                          {ncclFloat16, ncclMax},
                          {ncclBfloat16, ncclMin},
                          {ncclDouble, ncclAvg},
                          {ncclUint64, ncclSum}}) {
    run_and_check(CollCase{.count = 1031, .type = type, .op = op, .in_place = true}, rank, n, comm, f, given);
    ++calls;
  }
  return calls;
}

// The one-sided calls a sweep of `calls` over `counts` (none 0) runs with
// BRAID_ALGO set to `algo`: all of them with kOneShot; with two-shot only
// AllReduce's, both placements at each count and the type sweep.
uint64_t one_sided_calls_of(const char* algo, size_t calls, size_t counts) {
  return algo == kOneShot ? calls : counts * 2 + 5;
}

// Runs body(algo, rank, n, comm, f) on 2, 3 and 4 processes that reach each
// other (CMA allowed), with BRAID_ALGO naming the one-shot schedules, then
// two-shot AllReduce.
void on_processes(const std::function<void(const char*, int, int, ncclComm_t, Failures&)>& body) {
  ScopedEnv backend("BRAID_BACKEND", "host"), cma("BRAID_CMA", "auto");
  for (const char* algo : {kOneShot, kTwoShot}) {
    ScopedEnv forced("BRAID_ALGO", algo);
    for (int n : {2, 3, 4}) {
      INFO(algo << ", " << n << " ranks");
      CHECK(run_ranks_as_processes(
                n, [&](int rank, int nr, ncclComm_t comm, Failures& f) { body(algo, rank, nr, comm, f); }, 120) == 0);
    }
  }
}

}  // namespace

TEST_CASE("one-sided: one-shot and two-shot schedules on threads are exact", "[direct][one_sided][threads]") {
  ScopedEnv backend("BRAID_BACKEND", "host");
  for (const char* algo : {kOneShot, kTwoShot}) {
    ScopedEnv forced("BRAID_ALGO", algo);
    for (int n : {1, 2, 3, 4, 5, 8}) {
      INFO(algo << ", " << n << " ranks");
      std::atomic<size_t> calls{0};
      const uint64_t before = one_sided();
      CHECK(run_ranks_as_threads(n, [&](int rank, int nr, ncclComm_t comm, Failures& f) {
              calls += sweep(rank, nr, comm, f, {0, 1, 7, 1031, 70001});
            }) == 0);
      // Every call of every rank ran one: all five collectives are one-sided
      // with the first setting; only AllReduce (a sixth of the calls, plus
      // the type sweep) with the second.  One rank has no peers to reach.
      const uint64_t ran = one_sided() - before;
      if (n == 1)
        CHECK(ran == 0);
      else if (algo == kOneShot)
        CHECK(ran == calls.load());
      else
        CHECK(ran == size_t(n) * (4 * 2 + 5));  // AllReduce at the four counts above 0, both placements
    }
  }
}

TEST_CASE("one-sided: the size rule runs the one-shot ReduceScatter on 2 ranks, exact",
          "[direct][one_sided][threads]") {
  ScopedEnv backend("BRAID_BACKEND", "host");
  const uint64_t before = one_sided();
  CHECK(run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, Failures& f) {
          for (size_t count : {1031, 70001})  // messages of 8 KiB and 547 KiB: only the second
            for (bool in_place : {false, true})
              run_and_check(CollCase{.coll = Coll::ReduceScatter, .count = count, .in_place = in_place}, rank, n,
                            comm, f);
        }) == 0);
  CHECK(one_sided() - before == 4);  // 2 ranks, both placements
}

TEST_CASE("one-sided: processes reach each other's buffers with CMA and are exact", "[direct][one_sided][processes]") {
  on_processes([](const char* algo, int rank, int n, ncclComm_t comm, Failures& f) {
    const uint64_t before = one_sided();
    const size_t calls = sweep(rank, n, comm, f, {1, 4099, 300001});
    const uint64_t ran = one_sided() - before, want = one_sided_calls_of(algo, calls, 3);
    if (ran != want) f.fail(fmt::format("rank {}: {} one-sided calls, expected {}", rank, ran, want));
  });
}

TEST_CASE("one-sided: without peer access BRAID_ALGO falls back to the default and stays exact",
          "[direct][one_sided][processes]") {
  ScopedEnv backend("BRAID_BACKEND", "host"), cma("BRAID_CMA", "off"), forced("BRAID_ALGO", kOneShot);
  CHECK(run_ranks_as_processes(3, [&](int rank, int n, ncclComm_t comm, Failures& f) {
          const uint64_t before = one_sided();
          sweep(rank, n, comm, f, {1, 4099});
          if (one_sided() != before) f.fail(fmt::format("rank {} ran a one-sided schedule without CMA", rank));
        }) == 0);
}

// One-shot AllReduce and AlltoAll put into the peers' scratch, which is
// shareable memory: between processes they need no CMA even on heap
// buffers.  On ncclMemAlloc buffers nothing does, and the peers' memory is
// mapped on the first calls only: a second sweep on the same buffers opens
// nothing.
TEST_CASE("one-sided: processes load and store each other's shareable memory and map it once",
          "[direct][one_sided][processes]") {
  on_processes([](const char* algo, int rank, int n, ncclComm_t comm, Failures& f) {
    if (algo == kOneShot) {
      const uint64_t cma_before = cma_ops();
      for (Coll coll : {Coll::AllReduce, Coll::AlltoAll})
        for (bool in_place : {false, true})
          run_and_check(CollCase{.coll = coll, .count = 70001, .in_place = in_place}, rank, n, comm, f);
      if (cma_ops() != cma_before)
        f.fail(fmt::format("rank {}: {} CMA ops putting into scratch", rank, cma_ops() - cma_before));
    }
    const size_t bytes = size_t(n) * 300001 * sizeof(double);
    Buffers shared{nullptr, nullptr, bytes};
    MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&shared.main), bytes));
    MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&shared.send), bytes));
    if (!shared.main || !shared.send) return;
    const uint64_t cma_before = cma_ops();
    for (int round = 0; round < 2; ++round) {
      const uint64_t ran_before = one_sided(), opens_before = opens();
      const size_t calls = sweep(rank, n, comm, f, {1, 4099, 300001}, &shared);
      const uint64_t ran = one_sided() - ran_before, want = one_sided_calls_of(algo, calls, 3);
      if (ran != want) f.fail(fmt::format("rank {}: {} one-sided calls, expected {}", rank, ran, want));
      if (round == 1 && opens() != opens_before)
        f.fail(fmt::format("rank {}: {} peer allocations opened again on the same buffers", rank,
                           opens() - opens_before));
    }
    if (cma_ops() != cma_before)
      f.fail(fmt::format("rank {}: {} CMA ops on ncclMemAlloc buffers", rank, cma_ops() - cma_before));
    MP_NCCL(f, ncclMemFree(shared.main));
    MP_NCCL(f, ncclMemFree(shared.send));
  });
}

// Which user outputs the host paths stream (src/plan/output_stores.h): every
// call, on the schedule executor and on the single-copy path, streams exactly
// when the rule says so for this machine's cache (braid's counters tell),
// and the results are exact either way.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "collective_check.h"
#include "harness.h"
#include "src/exec/host/collective_task.h"
#include "src/exec/host/single_copy.h"
#include "stream_rule.h"

using namespace mp;

namespace {

// 1 MB blocks fit any cache; 12 MB blocks overflow this project's 32 MB
// out of place (2 ranks x (12 + 12) MB for AllReduce), and in place too
// where the buffer has n blocks (2 x 24 MB for AllGather).
// `streamed` counts this process's calls that streamed on the path under
// test.  Returns the number of calls made.
int run_sizes(int rank, int n, ncclComm_t comm, Failures& f, const Buffers* bufs,
              const std::atomic<uint64_t>& streamed) {
  int calls = 0;
  for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::AlltoAll})
    for (size_t count : {size_t(1) << 18, size_t(3) << 20})
      for (bool in_place : {false, true}) {
        // An in-place AlltoAll never runs direct (it would overwrite input a peer has not read).
        if (bufs && coll == Coll::AlltoAll && in_place) continue;
        const uint64_t before = streamed.load();
        run_and_check(CollCase{.coll = coll, .count = count, .in_place = in_place}, rank, n, comm, f, bufs);
        ++calls;
        const bool did = streamed.load() != before;
        if (did != rule_streams(coll, n, count, in_place))
          f.fail(fmt::format("rank {}: {} of {} floats{}: output {}streamed, the rule says otherwise", rank,
                             coll_name(coll), count, in_place ? " in place" : "", did ? "" : "not "));
      }
  return calls;
}

void set_env() {
  setenv("BRAID_BACKEND", "host", 1);
  setenv("BRAID_CMA", "off", 1);  // plain buffers through the slots
  setenv("BRAID_LLC_BYTES", "33554432", 1);  // both sides of the rule at the sizes below, on any machine
}

}  // namespace

TEST_CASE("output stores: executor calls stream their output as the cache rule says, exact either way",
          "[direct][output_stores][processes]") {
  set_env();
  const braid::CacheShare share = braid::cache_share(2);
  INFO("last-level cache " << (share.bytes >> 20) << " MB shared by " << share.ranks << " of 2 ranks");
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          run_sizes(rank, n, comm, f, nullptr, braid::streamed_output_calls());
        }, 120) == 0);
}

TEST_CASE("output stores: direct calls (windows) stream their outputs as the cache rule says, exact either way",
          "[direct][output_stores][processes]") {
  set_env();
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const size_t bytes = size_t(2 * 12) << 20;  // an AllGather's output of 12 MB blocks
          Buffers bufs;
          bufs.bytes = bytes;
          ncclWindow_t windows[2] = {};
          char** ptrs[2] = {&bufs.main, &bufs.send};
          for (int i = 0; i < 2; ++i) {
            void* p = nullptr;
            MP_NCCL(f, ncclMemAlloc(&p, bytes));
            *ptrs[i] = static_cast<char*>(p);
            if (p) MP_NCCL(f, ncclCommWindowRegister(comm, p, bytes, &windows[i], NCCL_WIN_COLL_SYMMETRIC));
          }
          const uint64_t direct_before = braid::single_copy_stats().ran.load();
          const int calls = f.count ? 0 : run_sizes(rank, n, comm, f, &bufs, braid::single_copy_stats().streamed);
          const uint64_t direct = braid::single_copy_stats().ran.load() - direct_before;
          if (calls == 0 || direct != uint64_t(calls))
            f.fail(fmt::format("rank {}: {} of {} calls ran direct", rank, direct, calls));
          for (int i = 0; i < 2; ++i) {
            if (windows[i]) ncclCommWindowDeregister(comm, windows[i]);
            ncclMemFree(*ptrs[i]);
          }
        }, 120) == 0);
}

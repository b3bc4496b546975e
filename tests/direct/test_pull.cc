// The pull path (src/exec/host/single_copy.h): processes on one host pull
// AllGather, AlltoAll and Broadcast data out of their peers' plain buffers
// with process_vm_readv, and AllReduce, Reduce and ReduceScatter pull their
// share, reduce it and push the result with process_vm_writev.  Forked
// ranks, exact results, braid's counters to prove the path, a peer that may
// not be read (the kernel refuses), and a refusal that starts after init.
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "cma_child.h"
#include "collective_check.h"
#include "harness.h"
#include "src/transport/cross_memory.h"
#include "src/exec/host/single_copy.h"
#include "src/plan/copy_path.h"
#include "src/plan/host_tuning.h"

using namespace mp;

namespace {

uint64_t pulled() { return braid::single_copy_stats().pulled.load(); }
uint64_t direct_calls() { return braid::single_copy_stats().ran.load(); }
uint64_t fallback_calls() { return braid::single_copy_stats().fallback.load(); }

void set_env(const char* mode) {
  setenv("BRAID_BACKEND", "host", 1);
  setenv("BRAID_ONESHOT_MAX_BYTES", "0", 1);  // small calls would go to the boards
  setenv("BRAID_CMA", mode, 1);
  setenv("BRAID_CMA_MIN_BYTES", "0", 1);
}

// Makes this process's memory unreadable to its peers: not dumpable, and
// no CAP_SYS_PTRACE (root would read it anyway) in any of them.
void drop_ptrace_capability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return;
  data[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  (void)syscall(SYS_capset, &header, data);
}

// Runs `c` and fails unless the call took `expect`: 1 pulled, 0 exchanged
// and ran the schedule, -1 neither (no exchange at all).
void run_expecting(const CollCase& c, int expect, int rank, int n, ncclComm_t comm, Failures& f) {
  uint64_t p0 = pulled(), d0 = direct_calls(), f0 = fallback_calls();
  run_and_check(c, rank, n, comm, f);
  uint64_t p = pulled() - p0, d = direct_calls() - d0, fb = fallback_calls() - f0;
  bool ok = expect == 1 ? p == 1 && d == 1 && fb == 0 : expect == 0 ? p == 0 && d == 0 && fb == 1 : p + d + fb == 0;
  if (!ok)
    f.fail(describe(c, rank, n) + fmt::format(": expected {}, counted pulled={} direct={} fallback={}",
                                              expect == 1 ? "a pull" : expect == 0 ? "the slots" : "no exchange", p,
                                              d, fb));
}

void pull_body(int rank, int n, ncclComm_t comm, Failures& f) {
  for (Coll coll : {Coll::AllGather, Coll::AlltoAll, Coll::Broadcast})
    for (size_t count : {size_t(1), size_t(1001), size_t(20000), size_t(300007)})
      for (ncclDataType_t type : {ncclFloat, ncclInt8, ncclFloat64, ncclBfloat16})
        for (bool in_place : {false, true}) {
          if (count == 300007 && type != ncclFloat) continue;
          CollCase c{.coll = coll, .count = count, .type = type, .root = int(count % unsigned(n)), .in_place = in_place};
          // In place, an AlltoAll would overwrite input a peer has not read: it keeps its schedule.
          run_expecting(c, coll == Coll::AlltoAll && in_place ? 0 : 1, rank, n, comm, f);
        }
  // Reductions: several chunks (300007 floats is over 1 MiB), a share that
  // is empty on some ranks (count 1), every op and Avg, in place.
  for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce})
    for (size_t count : {size_t(1), size_t(1001), size_t(300007)})
      for (ncclDataType_t type : {ncclFloat, ncclInt8, ncclFloat64, ncclBfloat16})
        for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg})
          for (bool in_place : {false, true}) {
            if (count == 300007 && (type != ncclFloat || op == ncclProd || op == ncclMin)) continue;
            CollCase c{.coll = coll, .count = count, .type = type, .op = op, .root = int(count % unsigned(n)),
                       .in_place = in_place};
            run_expecting(c, 1, rank, n, comm, f);
          }
  CollCase reduce_null{.coll = Coll::Reduce, .count = 5000, .root = n - 1, .null_unused = true};
  run_expecting(reduce_null, 1, rank, n, comm, f);
  CollCase root_null{.coll = Coll::Broadcast, .count = 5000, .root = n - 1, .null_unused = true};
  run_expecting(root_null, 1, rank, n, comm, f);
}

}  // namespace

TEST_CASE("pull path: every collective it serves is exact on plain buffers, across processes",
          "[direct][pull][processes]") {
  if (!cma_works_here()) return;
  set_env("on");
  for (int n : {2, 3, 4}) {
    INFO(n << " processes");
    CHECK(run_ranks_as_processes(n, pull_body, 240) == 0);
  }
}

TEST_CASE("pull path: BRAID_CMA=off, and calls under BRAID_CMA_MIN_BYTES, never exchange", "[direct][pull][processes]") {
  set_env("off");
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          run_expecting(CollCase{.coll = Coll::AllGather, .count = 50000}, -1, rank, n, comm, f);
        }) == 0);
  const bool can_pull = cma_works_here();
  set_env("on");
  setenv("BRAID_CMA_MIN_BYTES", "1000000", 1);
  CHECK(run_ranks_as_processes(2, [can_pull](int rank, int n, ncclComm_t comm, Failures& f) {
          run_expecting(CollCase{.coll = Coll::AlltoAll, .count = 50000}, -1, rank, n, comm, f);  // 400 KB
          if (can_pull) run_expecting(CollCase{.coll = Coll::AlltoAll, .count = 200000}, 1, rank, n, comm, f);
        }) == 0);
  setenv("BRAID_CMA", "sometimes", 1);
  CHECK(run_ranks_as_processes(1, [](int, int, ncclComm_t, Failures&) {}) == 1);  // init refuses the value
}

TEST_CASE("pull path: auto mode times both paths, leases the slots alike on every rank, and stays exact",
          "[direct][pull][processes]") {
  if (!cma_works_here()) return;
  set_env("auto");
  for (int n : {2, 3}) {
    INFO(n << " processes");
    if (n > braid::host_usable_cores()) continue;  // the next test case's ground
    CHECK(run_ranks_as_processes(n, [](int rank, int n, ncclComm_t comm, Failures& f) {
            const uint64_t p0 = pulled(), f0 = fallback_calls(), s0 = braid::single_copy_stats().slots_finished.load();
            // Two collectives and three size classes interleaved: each class
            // has its own choice and lease, and ranks that disagreed on one
            // would hang or mismatch here.
            for (int i = 0; i < 120 && !f.count; ++i) {
              const size_t count = size_t(40000) << (i % 3);
              run_and_check(CollCase{.coll = i % 2 ? Coll::AlltoAll : Coll::AllGather, .count = count}, rank, n,
                            comm, f);
            }
            // Nothing measured at first: each path is timed before any choice.
            if (pulled() == p0 || fallback_calls() == f0)
              f.fail(fmt::format("auto took one path only: pulled {} slots {}", pulled() - p0, fallback_calls() - f0));
            // Each rank has a core: a slots call ends when the rank's share does.
            if (braid::single_copy_stats().slots_finished.load() != s0)
              f.fail("slots calls ended with the done exchange where no rank waits for a core");
            // Reductions pull only under BRAID_CMA=on: here they exchange nothing.
            for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce})
              run_expecting(CollCase{.coll = coll, .count = 80000}, -1, rank, n, comm, f);
          }, 240) == 0);
  }
}

TEST_CASE("pull path: auto times a Broadcast's slot calls until every rank is done, exactly",
          "[direct][pull][processes]") {
  if (!cma_works_here()) return;
  set_env("auto");
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const uint64_t f0 = fallback_calls(), s0 = braid::single_copy_stats().slots_finished.load();
          for (int i = 0; i < 40 && !f.count; ++i)
            run_and_check(CollCase{.coll = Coll::Broadcast, .count = 40000, .root = i % 2}, rank, n, comm, f);
          // The root returns from the slots before its peer has copied out:
          // every slots call that exchanged waits for the peer's "done".
          const uint64_t slots = fallback_calls() - f0, finished = braid::single_copy_stats().slots_finished - s0;
          if (slots == 0 || finished != slots)
            f.fail(fmt::format("{} Broadcasts on the slots after an exchange, {} ended with the done exchange", slots,
                               finished));
        }) == 0);
}

TEST_CASE("pull path: an in-place AlltoAll takes the slots on a lease, not an exchange per call, exactly",
          "[direct][pull][processes]") {
  if (!cma_works_here()) return;
  for (const char* mode : {"on", "auto"}) {
    INFO("BRAID_CMA=" << mode);
    set_env(mode);
    CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
            const CollCase in_place{.coll = Coll::AlltoAll, .count = 20000, .in_place = true};
            const CollCase out_of_place{.coll = Coll::AlltoAll, .count = 20000};
            const uint64_t p0 = pulled(), f0 = fallback_calls();
            // Rank 0's in-place call could never pull: one exchange, then a lease.
            const uint32_t calls = 2 * (braid::kInPlaceAlltoAllLease + 1);
            for (uint32_t i = 0; i < calls && !f.count; ++i) run_and_check(in_place, rank, n, comm, f);
            if (fallback_calls() - f0 != 2 || pulled() != p0)
              f.fail(fmt::format("{} in-place calls: {} exchanges (expected 2), {} pulled", calls,
                                 fallback_calls() - f0, pulled() - p0));
            // An out-of-place call within the lease takes the slots unasked.
            run_expecting(in_place, 0, rank, n, comm, f);
            run_expecting(out_of_place, -1, rank, n, comm, f);
          }) == 0);
  }
}

TEST_CASE("pull path: where ranks outnumber cores, auto times AllGather and AlltoAll until every rank is done, exactly",
          "[direct][pull][processes]") {
  if (!cma_works_here()) return;
  set_env("auto");
  const int n = braid::host_usable_cores() + 1;
  INFO(n << " processes");
  CHECK(run_ranks_as_processes(n, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const uint64_t p0 = pulled(), f0 = fallback_calls(), s0 = braid::single_copy_stats().slots_finished.load();
          // Two collectives and three size classes interleaved: a rank that
          // ended a slots call without the "done" exchange its peers expect
          // would read a token as the next call's descriptor, and fail or
          // hang here.
          for (int i = 0; i < 90 && !f.count; ++i) {
            const size_t count = size_t(40000) << (i % 3);
            run_and_check(CollCase{.coll = i / 3 % 2 ? Coll::AlltoAll : Coll::AllGather, .count = count}, rank, n,
                          comm, f);
          }
          const uint64_t slots_finished = braid::single_copy_stats().slots_finished.load() - s0;
          if (pulled() == p0 || fallback_calls() == f0 || slots_finished == 0)
            f.fail(fmt::format("auto: pulled {}, slots {} ({} ended with the done exchange)", pulled() - p0,
                               fallback_calls() - f0, slots_finished));
          // Neither Broadcast nor calls under 256 KiB (this AllGather's output
          // is half of that, whatever n) are timed here: they exchange nothing.
          run_expecting(CollCase{.coll = Coll::Broadcast, .count = 200000, .root = n - 1}, -1, rank, n, comm, f);
          const size_t small = braid::kOversubscribedPullMinBytes / sizeof(float) / size_t(n) / 2;
          run_expecting(CollCase{.coll = Coll::AllGather, .count = small}, -1, rank, n, comm, f);
        }, 240) == 0);
}

TEST_CASE("pull path: a rank its peers may not read sends every rank to the slots", "[direct][pull][processes]") {
  set_env("on");
  CHECK(run_ranks_as_processes(
            3,
            [](int rank, int n, ncclComm_t comm, Failures& f) {
              // The first call finds out (every rank sees rank 1's "cannot"),
              // later calls do not even exchange.
              run_expecting(CollCase{.coll = Coll::AllGather, .count = 30000}, 0, rank, n, comm, f);
              run_expecting(CollCase{.coll = Coll::Broadcast, .count = 30000, .root = 1}, -1, rank, n, comm, f);
              run_expecting(CollCase{.coll = Coll::AlltoAll, .count = 30000}, -1, rank, n, comm, f);
            },
            120,
            [](int rank) {
              drop_ptrace_capability();
              if (rank == 1) prctl(PR_SET_DUMPABLE, 0);
            }) == 0);
}

TEST_CASE("pull path: a peer that becomes unreadable mid-job fails the call on every rank, promptly",
          "[direct][pull][processes]") {
  if (!cma_works_here()) return;
  set_env("on");
  setenv("BRAID_TIMEOUT", "30", 1);
  CHECK(run_ranks_as_processes(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          run_expecting(CollCase{.coll = Coll::AllGather, .count = 30000}, 1, rank, n, comm, f);
          drop_ptrace_capability();
          if (rank == 1) prctl(PR_SET_DUMPABLE, 0);
          std::vector<float> in(30000, 1.0f), out(size_t(n) * in.size());
          auto start = std::chrono::steady_clock::now();
          ncclResult_t r = ncclAllGather(in.data(), out.data(), in.size(), ncclFloat, comm, nullptr);
          double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::string last = ncclGetLastError(comm);
          // Ranks 0 and 2 are refused reading rank 1; rank 1 hears that they failed.
          ncclResult_t want = rank == 1 ? ncclRemoteError : ncclSystemError;
          if (r != want) f.fail(fmt::format("rank {}: got {} ({}), want {}", rank, ncclGetErrorString(r), last,
                                            ncclGetErrorString(want)));
          if (took > 10) f.fail(fmt::format("rank {}: the failing call took {:.1f} s", rank, took));
        }, 120) == 0);
  unsetenv("BRAID_TIMEOUT");
}

// The direct (single-copy) path, src/exec/host/single_copy.h: collectives on
// buffers every rank can reach (windows every rank maps, or any buffer when
// the ranks are threads of one process) run without the transports' slots.
// Real ranks (forked processes on ncclMemAlloc memory, and threads), exact
// results, and braid's own counters to prove which path each call took.
#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "collective_check.h"
#include "fast_path_cases.h"
#include "harness.h"
#include "src/exec/host/single_copy.h"

using namespace mp;

namespace {

uint64_t direct_calls() { return braid::single_copy_stats().ran.load(); }
uint64_t fallback_calls() { return braid::single_copy_stats().fallback.load(); }

// Every rank's two buffers, from ncclMemAlloc (or the heap), optionally in
// symmetric windows; released in the destructor.
struct WindowBuffers {
  Buffers bufs;
  ncclComm_t comm = nullptr;
  ncclWindow_t windows[2] = {};
  bool nccl_mem = false;
  WindowBuffers(ncclComm_t c, size_t bytes, bool from_nccl, bool in_windows, Failures& f) : comm(c), nccl_mem(from_nccl) {
    bufs.bytes = bytes;
    void* p[2] = {};
    for (void*& q : p) {
      if (nccl_mem) MP_NCCL(f, ncclMemAlloc(&q, bytes));
      else q = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    }
    bufs.main = static_cast<char*>(p[0]);
    bufs.send = static_cast<char*>(p[1]);
    if (in_windows)
      for (int i = 0; i < 2; ++i) MP_NCCL(f, ncclCommWindowRegister(comm, p[i], bytes, &windows[i], NCCL_WIN_COLL_SYMMETRIC));
  }
  ~WindowBuffers() {
    for (ncclWindow_t w : windows)
      if (w) ncclCommWindowDeregister(comm, w);
    for (char* q : {bufs.main, bufs.send}) {
      if (nccl_mem) ncclMemFree(q);
      else std::free(q);
    }
  }
};

struct Counted {
  int direct = 0, fallback = 0;
};

// Runs every case on buffers in windows; checks exact results and that each
// call took the path `expect` says (-1: neither, the collective has no direct form).
void run_cases(int rank, int n, ncclComm_t comm, Failures& f, const Buffers& bufs,
               const std::vector<std::pair<CollCase, int>>& cases) {
  for (const auto& [c, expect] : cases) {
    uint64_t d0 = direct_calls(), f0 = fallback_calls();
    run_and_check(c, rank, n, comm, f, &bufs);
    uint64_t d = direct_calls() - d0, fb = fallback_calls() - f0;
    bool ok = expect == 1 ? d == 1 && fb == 0 : expect == 0 ? d == 0 && fb == 1 : d == 0 && fb == 0;
    if (!ok)
      f.fail(describe(c, rank, n) + fmt::format(": expected {} but direct={} fallback={}",
                                                expect == 1 ? "direct" : expect == 0 ? "fallback" : "schedule only", d,
                                                fb));
  }
}

// Direct-capable cases for n ranks, with the path each must take.
std::vector<std::pair<CollCase, int>> all_cases(int n) {
  std::vector<std::pair<CollCase, int>> cases;
  const Coll direct_colls[] = {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter, Coll::AllGather, Coll::AlltoAll,
                               Coll::Broadcast};
  const TypeOp type_ops[] = {{ncclFloat, ncclSum}, {ncclInt32, ncclMax}, {ncclBfloat16, ncclSum},
                             {ncclFloat64, ncclAvg}, {ncclUint8, ncclMin}, {ncclFloat16, ncclProd}};
  for (Coll coll : direct_colls)
    for (size_t count : {size_t(1), size_t(1001), size_t(20000)})
      for (const TypeOp& to : type_ops)
        for (bool in_place : {false, true}) {
          CollCase c{.coll = coll, .count = count, .type = to.type, .op = to.op, .root = n - 1, .in_place = in_place};
          // In place, an AlltoAll would overwrite input a peer has not read: it runs its schedule.
          cases.push_back({c, coll == Coll::AlltoAll && in_place ? 0 : 1});
        }
  // Large enough that 2 or 3 ranks overflow a 32 MB cache: the outputs are
  // written with streaming stores (src/plan/output_stores.h).
  CollCase big;
  big.count = (size_t(9) << 20) / 4 + 7;
  cases.push_back({big, 1});
  // Collectives without a direct form run their schedule without an exchange.
  for (Coll coll : {Coll::Gather, Coll::Scatter}) {
    CollCase c;
    c.coll = coll;
    c.count = 1001;
    c.root = 1;
    cases.push_back({c, -1});
  }
  return cases;
}

constexpr size_t kBytes = size_t(12) << 20;  // enough for every case at 4 ranks

void direct_body(int rank, int n, ncclComm_t comm, Failures& f) {
  WindowBuffers w(comm, kBytes, true, true, f);
  if (f.count) return;
  run_cases(rank, n, comm, f, w.bufs, all_cases(n));
}

// Two processes with windows (on ncclMemAlloc or heap memory) run an
// AllReduce that must take the schedule without any descriptor exchange.
int allreduce_runs_schedule_only(bool nccl_mem) {
  return run_ranks_as_processes(2, [nccl_mem](int rank, int n, ncclComm_t comm, Failures& f) {
    WindowBuffers w(comm, kBytes, nccl_mem, true, f);
    if (f.count) return;
    CollCase c;
    c.count = 5000;
    run_cases(rank, n, comm, f, w.bufs, {{c, -1}});
  }, 120);
}

void set_env() {
  setenv("BRAID_BACKEND", "host", 1);
  setenv("BRAID_CMA", "off", 1);  // plain buffers of processes: the pull path has its own tests
  setenv("BRAID_DIRECT_MIN_BYTES", "0", 1);
  setenv("BRAID_ONESHOT_MAX_BYTES", "0", 1);  // small AllReduces would go one-shot
  setenv("BRAID_LLC_BYTES", "33554432", 1);  // "big" below streams its output on any machine
}

}  // namespace

TEST_CASE("single-copy path: every collective on ncclMemAlloc windows is exact, across processes", "[direct][processes]") {
  set_env();
  for (int n : {2, 3}) {
    INFO(n << " processes");
    CHECK(run_ranks_as_processes(n, direct_body, 240) == 0);
  }
}

TEST_CASE("single-copy path: windows on plain heap memory are direct between threads", "[direct][threads]") {
  set_env();
  CHECK(run_ranks_as_threads(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          WindowBuffers w(comm, kBytes, false, true, f);
          if (f.count) return;
          // The counters are shared by the four ranks here: exactness only, paths below.
          for (const auto& [c, expect] : all_cases(n)) run_and_check(c, rank, n, comm, f, &w.bufs);
        }) == 0);
  // Ranks that are threads of one process each count their direct call.
  uint64_t before = direct_calls();
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          WindowBuffers w(comm, kBytes, false, true, f);
          if (f.count) return;
          CollCase c;
          c.count = 50000;
          run_and_check(c, rank, n, comm, f, &w.bufs);
        }) == 0);
  CHECK(direct_calls() - before == 2);
}

TEST_CASE("single-copy path: threads of one process run direct on plain buffers, without windows", "[direct][threads]") {
  set_env();
  CHECK(run_ranks_as_threads(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          WindowBuffers plain(comm, kBytes, false, false, f);
          if (f.count) return;
          for (const auto& [c, expect] : all_cases(n)) run_and_check(c, rank, n, comm, f, &plain.bufs);
        }) == 0);
  // Each of the two ranks counts its direct call, and an in-place AlltoAll
  // still takes its schedule (a peer may not have read what it would overwrite).
  uint64_t direct_before = direct_calls(), fallback_before = fallback_calls();
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          WindowBuffers plain(comm, kBytes, false, false, f);
          if (f.count) return;
          CollCase c;
          c.count = 50000;
          run_and_check(c, rank, n, comm, f, &plain.bufs);
          c.coll = Coll::AlltoAll;
          c.in_place = true;
          run_and_check(c, rank, n, comm, f, &plain.bufs);
        }) == 0);
  CHECK(direct_calls() - direct_before == 2);
  CHECK(fallback_calls() - fallback_before == 2);
}

TEST_CASE("single-copy path: a thread-rank that leaves a call early keeps its peers off its buffers",
          "[direct][threads]") {
  set_env();
  ncclComm_t comms[2];
  REQUIRE(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess);
  {
    // Rank 0 calls alone, is aborted while it waits, and frees its buffers.
    std::vector<float> in(1 << 16, 1.0f), out(1 << 16);
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ncclCommAbort(comms[0]);
    });
    ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comms[0], nullptr);
    watchdog.join();
    CHECK(r != ncclSuccess);
  }
  // Rank 1 finds the descriptor rank 0 sent for that call: it must fail,
  // not read or write the freed buffers (ASan would see it).
  std::vector<float> in(1 << 16, 2.0f), out(1 << 16, 0.0f);
  ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comms[1], nullptr);
  CHECK(r == ncclRemoteError);
  INFO(ncclGetLastError(comms[1]));
  CHECK(std::string(ncclGetLastError(comms[1])).find("left a single-copy call early") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), 0.0f) == ptrdiff_t(out.size()));
  CHECK(ncclCommDestroy(comms[1]) == ncclSuccess);
}

TEST_CASE("single-copy path: a rank whose buffers are not in a window sends every rank to the schedule",
          "[direct][processes]") {
  set_env();
  CHECK(run_ranks_as_processes(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          // Every rank registers windows (so all exchange descriptors), but rank 1 computes elsewhere.
          WindowBuffers w(comm, kBytes, true, true, f);
          WindowBuffers heap(comm, kBytes, false, false, f);
          if (f.count) return;
          const Buffers& mine = rank == 1 ? heap.bufs : w.bufs;
          std::vector<std::pair<CollCase, int>> cases;
          for (Coll coll : {Coll::AllReduce, Coll::AllGather, Coll::Broadcast}) {
            CollCase c;
            c.coll = coll;
            c.count = 3000;
            c.root = 1;  // a Broadcast reads only the root's input: make it rank 1's
            cases.push_back({c, 0});
          }
          run_cases(rank, n, comm, f, mine, cases);
          // Back on windows everywhere: direct again.
          CollCase c;
          c.count = 3000;
          run_cases(rank, n, comm, f, w.bufs, {{c, 1}});
        }, 120) == 0);
}

TEST_CASE("single-copy path: ranks that disagree on the call all fail, and the communicator goes on",
          "[direct][processes]") {
  set_env();
  CHECK(run_ranks_as_processes(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          WindowBuffers w(comm, kBytes, true, true, f);
          if (f.count) return;
          ncclResult_t r = ncclAllReduce(w.bufs.send, w.bufs.main, rank == 0 ? 1000 : 1024, ncclFloat, ncclSum, comm,
                                         nullptr);
          if (r != ncclInvalidUsage) f.fail(fmt::format("mismatched counts gave {}", ncclGetErrorString(r)));
          std::string last = ncclGetLastError(comm);
          if (last.find("disagree") == std::string::npos) f.fail("message does not say the ranks disagree: " + last);
          CollCase c;
          c.count = 4096;
          run_cases(rank, n, comm, f, w.bufs, {{c, 1}});
        }, 120) == 0);
}

TEST_CASE("single-copy path: off with BRAID_DIRECT_MIN_BYTES=-1, and below the threshold", "[direct][processes]") {
  set_env();
  for (const char* min : {"-1", "1000000"}) {
    setenv("BRAID_DIRECT_MIN_BYTES", min, 1);
    INFO("BRAID_DIRECT_MIN_BYTES=" << min);
    CHECK(allreduce_runs_schedule_only(true) == 0);
  }
  setenv("BRAID_DIRECT_MIN_BYTES", "0", 1);
}

TEST_CASE("single-copy path: heap memory of separate processes is not direct (no exchange, the schedule runs)",
          "[direct][processes]") {
  set_env();
  CHECK(allreduce_runs_schedule_only(false) == 0);
}

// MoE and AlltoAllv handles against their communicator's state and their
// callers' threads: an abort or revoke from another thread (a watchdog)
// ends a waiting call at once and the calls after it are refused, not run
// on freed mappings; destroy after a revoke frees the window (no fd leak
// over cycles); non-blocking communicators work exactly; a group refuses
// the calls and destroy (the handle goes on); two threads in one handle's
// call at once are told so; a token naming an expert twice is refused.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "alltoallv_calls.h"
#include "moe_layer.h"
#include "scoped_env.h"

using namespace moe_test;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kLongMs = 60000;      // a handle's timeout no passing test waits out
constexpr double kPromptS = 20.0;   // "at once", with slack for a loaded machine
constexpr auto kWatchdogDelay = std::chrono::milliseconds(300);

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool mentions(ncclComm_t comm, const char* text) {
  return std::string(ncclGetLastError(comm)).find(text) != std::string::npos;
}

void expect(mp::Failures& f, ncclComm_t comm, const char* call, ncclResult_t got, ncclResult_t want,
            const char* text) {
  if (got != want || !mentions(comm, text))
    f.fail(fmt::format("{} -> {} ({}), want {} mentioning '{}'", call, int(got), ncclGetLastError(comm), int(want),
                       text));
}
#define EXPECT_CODE(f, comm, call, code, text) expect(f, comm, #call, (call), code, text)

using OwningBody = std::function<void(int rank, int n, ncclComm_t comm, mp::Failures& f)>;

// n ranks as threads, each with its communicator (non-blocking where
// !blocking: its init waited for), which the body owns: it destroys or
// aborts it.  Returns the failures.
int ranks_owning_comms(int n, bool blocking, const OwningBody& body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  std::vector<mp::Failures> failures(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      mp::Failures& f = failures[size_t(r)];
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = blocking ? 1 : 0;
      ncclComm_t comm = nullptr;
      const ncclResult_t init = ncclCommInitRankConfig(&comm, n, id, r, &config);
      ncclResult_t state = init;
      while (comm && state == ncclInProgress) ncclCommGetAsyncError(comm, &state);
      if (state != ncclSuccess || !comm) return f.fail(fmt::format("rank {}: init -> {}", r, int(state)));
      body(r, n, comm, f);
    });
  for (auto& t : threads) t.join();
  int total = 0;
  for (auto& f : failures) total += f.count;
  return total;
}

// One rank's MoE and AlltoAllv handles and a call of each that needs every
// rank (so that it waits while a peer does not call).
struct Handles {
  Case c{.experts = 4, .top_k = 2, .hidden = 8, .max_tokens = 8};
  braidMoe_t moe = nullptr;
  braidAlltoAllv_t a2a = nullptr;
  std::vector<float> tokens, recv, out, weights;
  std::vector<int32_t> topk, counts;
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<float> send, a2a_recv;

  Handles(ncclComm_t comm, int n, int timeout_ms, mp::Failures& f) {
    braidMoeConfig_t cfg = config_of(c);
    cfg.timeoutMs = timeout_ms;
    MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
    MP_NCCL(f, braidAlltoAllvCreate(comm, ncclFloat32, 4, timeout_ms, &a2a));
    size_t rows = 0;
    if (moe) MP_NCCL(f, braidMoeGetInfo(moe, &rows, nullptr));
    tokens.assign(size_t(c.max_tokens) * c.hidden, 1.0f);
    recv.assign(rows * size_t(c.hidden), 0.0f);
    out.assign(tokens.size(), 0.0f);
    topk.resize(size_t(c.max_tokens) * c.top_k);
    for (size_t i = 0; i < topk.size(); ++i) topk[i] = int32_t(i % 2) * 2;  // experts 0 and 2: both ranks
    weights.assign(topk.size(), 0.5f);
    counts.assign(size_t(c.experts), 0);
    send_counts.assign(size_t(n), 4);
    recv_counts.assign(size_t(n), 0);
    send.assign(size_t(n) * 4, 1.0f);
    a2a_recv.assign(send.size(), 0.0f);
  }
  ncclResult_t dispatch() {
    return braidMoeDispatch(moe, tokens.data(), topk.data(), c.max_tokens, recv.data(), counts.data(), nullptr,
                            nullptr);
  }
  ncclResult_t combine() { return braidMoeCombine(moe, recv.data(), weights.data(), out.data(), nullptr); }
  ncclResult_t alltoallv() {
    return braidAlltoAllv(a2a, send.data(), send_counts.data(), a2a_recv.data(), recv_counts.data(), nullptr);
  }
  ncclResult_t call(bool moe_call) { return moe_call ? dispatch() : alltoallv(); }
};

int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

// Rank 0 calls (the peer never does, so the call waits) while a watchdog
// thread aborts or revokes its communicator: the call must end soon after,
// not at the handle's timeout.  Returns the call's result.
ncclResult_t call_while_watchdog(Handles& h, bool moe_call, ncclComm_t comm, bool abort, mp::Failures& f) {
  ncclResult_t stopped = ncclInternalError;
  std::thread watchdog([&] {
    std::this_thread::sleep_for(kWatchdogDelay);
    stopped = abort ? ncclCommAbort(comm) : ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
  });
  const Clock::time_point start = Clock::now();
  const ncclResult_t r = h.call(moe_call);
  const double took = seconds_since(start);
  watchdog.join();
  if (stopped != ncclSuccess) f.fail(fmt::format("the watchdog's {} -> {}", abort ? "abort" : "revoke", int(stopped)));
  if (took > kPromptS)
    f.fail(fmt::format("{}: the waiting call took {:.1f} s after the {}: it waited for its timeout", moe_call ? "moe"
                       : "alltoallv", took, abort ? "abort" : "revoke"));
  return r;
}

}  // namespace

TEST_CASE("moe and alltoallv: an abort from another thread ends a waiting call, and calls on the gone comm are refused",
          "[moe][alltoallv][threads][faults]") {
  for (const bool moe_call : {true, false}) {
    INFO((moe_call ? "moe" : "alltoallv"));
    std::atomic<bool> rank0_done{false};
    const int failures = ranks_owning_comms(2, true, [&](int rank, int n, ncclComm_t comm, mp::Failures& f) {
      Handles h(comm, n, kLongMs, f);
      mp::barrier_all(comm, f);
      if (rank == 0) {
        // Ended by the abort: "aborted or revoked", or, if the abort came
        // first on a loaded machine, "not a live communicator".
        const ncclResult_t r = call_while_watchdog(h, moe_call, comm, true, f);
        if (r != ncclInvalidUsage && r != ncclInvalidArgument) f.fail(fmt::format("the aborted call -> {}", int(r)));
        // The comm and its mappings are gone: refused, not run on them.
        if (h.call(moe_call) != ncclInvalidArgument || h.combine() != ncclInvalidArgument)
          f.fail("a call on an aborted communicator was not refused with ncclInvalidArgument");
        rank0_done = true;
      } else {
        while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        MP_NCCL(f, ncclCommAbort(comm));
      }
      // Destroy still frees the handle (its error says the comm is gone).
      if (braidMoeDestroy(h.moe) != ncclInvalidArgument || braidAlltoAllvDestroy(h.a2a) != ncclInvalidArgument)
        f.fail("destroy after the abort did not say the communicator is gone");
    });
    CHECK(failures == 0);
  }
}

TEST_CASE("moe and alltoallv: revoke ends a waiting call and refuses the next, and destroy after it frees the windows",
          "[moe][alltoallv][threads][faults]") {
  constexpr int kCycles = 6;
  int baseline = 0;
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    INFO("cycle " << cycle);
    std::atomic<bool> rank0_done{false};
    const int failures = ranks_owning_comms(2, true, [&](int rank, int n, ncclComm_t comm, mp::Failures& f) {
      Handles h(comm, n, kLongMs, f);
      Expected x;
      run_layer(h.c, rank, n, h.moe, 0, f, &x);  // the windows written: their pages taken
      mp::barrier_all(comm, f);
      if (cycle == 0 && rank == 0) {  // the watchdog's revoke, once (each one waits a little)
        const ncclResult_t r = call_while_watchdog(h, cycle % 2 == 0, comm, false, f);
        if (r != ncclInvalidUsage) f.fail(fmt::format("the revoked call -> {}", int(r)));
        rank0_done = true;
      } else {
        while (cycle == 0 && !rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        MP_NCCL(f, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
      }
      EXPECT_CODE(f, comm, h.dispatch(), ncclInvalidUsage, "revoked");
      EXPECT_CODE(f, comm, h.alltoallv(), ncclInvalidUsage, "revoked");
      // The recovery path: destroy the handles (no barrier), then the comm.
      MP_NCCL(f, braidMoeDestroy(h.moe));
      MP_NCCL(f, braidAlltoAllvDestroy(h.a2a));
      MP_NCCL(f, ncclCommDestroy(comm));
    });
    REQUIRE(failures == 0);
    if (cycle == 1) baseline = open_fds();  // after the first cycles' one-time setup
  }
  // Each leaked window would keep a memfd per rank and handle: 16 here.
  CHECK(open_fds() <= baseline + 3);
}

TEST_CASE("moe and alltoallv on non-blocking communicators: create, calls and destroy exact",
          "[moe][alltoallv][threads]") {
  for (const bool rma : {false, true}) {
    INFO("BRAID_MOE_RMA=" << rma);
    const ScopedEnv route("BRAID_MOE_RMA", rma ? "1" : "0");
    const Case c{.experts = 6, .top_k = 2, .hidden = 5, .max_tokens = 12};
    const auto layers = layers_body(c, 3);
    const auto calls = calls_body(A2aCase{.max_count = 9, .calls = 5});
    CHECK(ranks_owning_comms(3, false, [&](int rank, int n, ncclComm_t comm, mp::Failures& f) {
            layers(rank, n, comm, f);
            calls(rank, n, comm, f);
            MP_NCCL(f, ncclCommDestroy(comm));
          }) == 0);
  }
}

TEST_CASE("moe and alltoallv inside a group: calls and destroy refused on every route, and the handles go on",
          "[moe][alltoallv][threads]") {
  for (const bool rma : {false, true}) {
    INFO("BRAID_MOE_RMA=" << rma);
    const ScopedEnv route("BRAID_MOE_RMA", rma ? "1" : "0");
    CHECK(mp::run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, mp::Failures& f) {
            Handles h(comm, n, 0, f);
            if (!h.moe || !h.a2a) return;
            MP_NCCL(f, ncclGroupStart());
            EXPECT_CODE(f, comm, h.dispatch(), ncclInvalidUsage, "inside a group");
            EXPECT_CODE(f, comm, h.combine(), ncclInvalidUsage, "inside a group");
            EXPECT_CODE(f, comm, h.alltoallv(), ncclInvalidUsage, "inside a group");
            EXPECT_CODE(f, comm, braidMoeDestroy(h.moe), ncclInvalidUsage, "inside a group");
            EXPECT_CODE(f, comm, braidAlltoAllvDestroy(h.a2a), ncclInvalidUsage, "inside a group");
            MP_NCCL(f, ncclGroupEnd());
            Expected x;
            run_layer(h.c, rank, n, h.moe, 0, f, &x);
            MP_NCCL(f, h.alltoallv());
            if (h.recv_counts != std::vector<int64_t>(size_t(n), 4)) f.fail("alltoallv after the group: wrong counts");
            MP_NCCL(f, braidMoeDestroy(h.moe));
            MP_NCCL(f, braidAlltoAllvDestroy(h.a2a));
          }) == 0);
  }
}

TEST_CASE("moe and alltoallv: a call made while another thread is in one on the handle is refused",
          "[moe][alltoallv][threads]") {
  for (const bool moe_call : {true, false}) {
    INFO((moe_call ? "moe" : "alltoallv"));
    std::atomic<bool> refused{false};
    CHECK(mp::run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, mp::Failures& f) {
            Handles h(comm, n, 30000, f);
            if (!h.moe || !h.a2a) return;
            if (rank == 1) {
              // Only once rank 0's second thread was turned away: its first
              // thread's call waits for this one meanwhile, so they overlap.
              const auto give_up = Clock::now() + std::chrono::seconds(30);
              while (!refused && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(5));
              MP_NCCL(f, h.call(moe_call));
            } else {
              ncclResult_t r[2] = {ncclInternalError, ncclInternalError};
              std::atomic<int> ready{0};
              auto caller = [&](int i) {
                ready++;
                while (ready < 2) std::this_thread::yield();
                r[i] = h.call(moe_call);
                if (r[i] == ncclInvalidUsage) refused = true;
              };
              std::thread a(caller, 0), b(caller, 1);
              a.join();
              b.join();
              const bool one_each = (r[0] == ncclSuccess && r[1] == ncclInvalidUsage) ||
                                    (r[1] == ncclSuccess && r[0] == ncclInvalidUsage);
              if (!one_each) f.fail(fmt::format("the two threads' calls -> {} and {}", int(r[0]), int(r[1])));
            }
            if (moe_call) MP_NCCL(f, h.combine());
            if (!moe_call && h.recv_counts != std::vector<int64_t>(size_t(n), 4)) f.fail("alltoallv: wrong counts");
            MP_NCCL(f, braidMoeDestroy(h.moe));
            MP_NCCL(f, braidAlltoAllvDestroy(h.a2a));
          }) == 0);
  }
}

TEST_CASE("moe: a token naming one expert twice fails the call on every rank, and the handle goes on",
          "[moe][threads]") {
  CHECK(mp::run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, mp::Failures& f) {
          Handles h(comm, n, 0, f);
          if (!h.moe) return;
          if (rank == 0) h.topk[2] = h.topk[3] = 3;  // token 1: expert 3 twice
          const ncclResult_t r = h.dispatch();
          if (rank == 0) expect(f, comm, "dispatch", r, ncclInvalidArgument, "token 1 names expert 3 more than once");
          else expect(f, comm, "dispatch", r, ncclRemoteError, "failed on another rank");
          Expected x;
          run_layer(h.c, rank, n, h.moe, 0, f, &x);
          MP_NCCL(f, braidMoeDestroy(h.moe));
          MP_NCCL(f, braidAlltoAllvDestroy(h.a2a));
        }) == 0);
}

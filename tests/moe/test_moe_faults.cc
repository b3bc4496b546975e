// MoE dispatch/combine when things go wrong: a rank killed mid-run gives
// its peers an error (ncclTimeout) within the handle's timeout, not a hang;
// bad input is refused with ncclInvalidArgument / ncclInvalidUsage, a
// message, and no row moved (the next good layer is exact).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstddef>
#include <thread>

#include "moe_layer.h"

using namespace moe_test;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum : int { kOk = 0, kInit = 10, kCreate = 11, kWrong = 12, kNoError = 13, kBadCode = 14, kSlow = 15, kTookCall = 16 };

constexpr int kTimeoutMs = 1500;
constexpr int kLayersBeforeKill = 5;

// A rank's communicator and MoE handle, with `timeout_ms`; 0, or the code
// of the step that failed.
int open_handle(int rank, int n, const ncclUniqueId& id, const Case& c, int timeout_ms, ncclComm_t* comm,
                braidMoe_t* moe) {
  if (ncclCommInitRank(comm, n, id, rank) != ncclSuccess) return kInit;
  braidMoeConfig_t cfg = config_of(c);
  cfg.timeoutMs = timeout_ms;
  return braidMoeCreate(*comm, &cfg, moe) == ncclSuccess ? 0 : kCreate;
}

// Layers until one fails; every good one exact.  The failing call must be
// ncclTimeout, and come within the timeout (+ slack) of the last good one.
// (run_layer prints that expected failure as a "FAIL:" line; the exit code
// is the verdict.)
int survivor(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  braidMoe_t moe = nullptr;
  const Case c{.experts = 2 * n, .top_k = 2, .max_tokens = 16};
  if (const int code = open_handle(rank, n, id, c, kTimeoutMs, &comm, &moe)) return code;
  Expected x;
  mp::Failures f;
  Clock::time_point last_ok = Clock::now();
  int layer = 0;
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < give_up) {
    // The last rank dies by SIGKILL between two layers, once the layers run
    // (a kill from the parent after a sleep could come before create ends
    // on a slow, sanitized build).
    // A barrier first: over sockets a rank killed while its peers still
    // finish the last layer could reset connections under data they need.
    if (layer == kLayersBeforeKill) {
      mp::barrier_all(comm, f);
      if (rank == n - 1) raise(SIGKILL);
    }
    if (!run_layer(c, rank, n, moe, layer++, f, &x)) break;
    last_ok = Clock::now();
  }
  std::string why = ncclGetLastError(comm);
  int code = kOk;
  if (f.count == 0) code = kNoError;
  else if (layer <= kLayersBeforeKill) code = kWrong;  // failed before the kill
  else if (why.find("no signal from rank") == std::string::npos && why.find("reached over RMA") == std::string::npos)
    code = kBadCode;  // a wrong row, not the wait
  else if (seconds_since(last_ok) > kTimeoutMs / 1000.0 + 5) code = kSlow;
  ncclCommAbort(comm);
  braidMoeDestroy(moe);  // its barrier fails at once on the aborted comm; the handle is freed
  return code;
}

// Ranks 0..n-1 as processes, the last SIGKILLed after some layers; with
// own_hosts, each rank on an emulated host of its own, so that the
// survivors wait for it over RMA (sockets), not over mapped windows.
void kill_last_rank(bool own_hosts) {
  const int n = 3;
  setenv("BRAID_TIMEOUT", "3", 1);
  std::vector<pid_t> pids = mp::fork_ranks(n, 90, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    if (own_hosts) setenv("BRAID_HOSTID", fmt::format("moe-fault-host-{}", r).c_str(), 1);
    return survivor(r, n, ids[0]);
  });
  unsetenv("BRAID_TIMEOUT");
  REQUIRE(int(pids.size()) == n);
  for (int i = 0; i < n; ++i) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    const int r = int(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    INFO("rank " << r);
    if (r == n - 1) {
      CHECK(WIFSIGNALED(status));
      continue;
    }
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == kOk);
  }
}

// Each rank on a host of its own; the last rank is late (alive, asleep)
// for its third layer.  The others' dispatch must fail within the handle's
// timeoutMs (not BRAID_TIMEOUT, 300 s), waiting for it over RMA.
constexpr int kLateTimeoutMs = 2000;  // every wait's bound, the first two layers' too: slack for a loaded machine
// How long a rank stays after its part, so that a survivor whose wait began
// late (a loaded machine) still times out on the late rank, not on a
// connection the others closed first.
constexpr int kLingerMs = 6000;
int late_peer(int rank, int n, const ncclUniqueId& id) {
  setenv("BRAID_HOSTID", fmt::format("moe-late-host-{}", rank).c_str(), 1);
  ncclComm_t comm = nullptr;
  braidMoe_t moe = nullptr;
  const Case c{.experts = 2 * n, .max_tokens = 8};
  if (const int code = open_handle(rank, n, id, c, kLateTimeoutMs, &comm, &moe)) return code;
  Expected x;
  mp::Failures f;
  int code = kOk;
  for (int layer = 0; layer < 2 && code == kOk; ++layer)
    if (!run_layer(c, rank, n, moe, layer, f, &x)) code = kWrong;
  if (code == kOk && rank == n - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * kLateTimeoutMs + kLingerMs));
  } else if (code == kOk) {
    const Clock::time_point start = Clock::now();
    const bool ok = run_layer(c, rank, n, moe, 2, f, &x);  // prints its expected failure as "FAIL:"
    const std::string why = ncclGetLastError(comm);
    if (ok) code = kNoError;
    else if (why.find("reached over RMA") == std::string::npos || why.find(fmt::format("from rank {}", n - 1)) ==
                                                                           std::string::npos)
      code = kBadCode;
    else if (seconds_since(start) < kLateTimeoutMs / 1000.0 * 0.9 || seconds_since(start) > kLateTimeoutMs / 1000.0 + 5)
      code = kSlow;
    // The late rank may still use the windows: the handle takes no more calls.
    else if (braidMoeDispatch(moe, nullptr, nullptr, 0, nullptr, nullptr, nullptr, nullptr) != ncclInvalidUsage ||
             std::string(ncclGetLastError(comm)).find("did not complete") == std::string::npos)
      code = kTookCall;
    // Closing now would cut short another survivor's wait (its connection
    // to this rank would fail first): stay until every wait has timed out.
    std::this_thread::sleep_for(std::chrono::milliseconds(kLingerMs));
  }
  ncclCommAbort(comm);
  braidMoeDestroy(moe);
  return code;
}

}  // namespace

TEST_CASE("moe across hosts: a late rank fails the others' RMA waits at the handle's timeoutMs",
          "[moe][processes][faults][hosts]") {
  const int n = 3;
  std::vector<pid_t> pids =
      mp::fork_ranks(n, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) { return late_peer(r, n, ids[0]); });
  REQUIRE(int(pids.size()) == n);
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    INFO("pid " << pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == kOk);
  }
}

TEST_CASE("moe: a rank SIGKILLed between layers gives the others ncclTimeout within the timeout",
          "[moe][processes][faults]") {
  kill_last_rank(false);
}

TEST_CASE("moe across hosts: a rank SIGKILLed between layers fails the others' RMA waits in bounded time",
          "[moe][processes][faults][hosts]") {
  kill_last_rank(true);
}

namespace {

// The message of the last error on `comm` (nullptr: the process's last
// error, which every thread writes: read it only while the other ranks are
// quiet).
bool mentions(ncclComm_t comm, const char* text) {
  return std::string(ncclGetLastError(comm)).find(text) != std::string::npos;
}

#define EXPECT_CODE(f, comm, call, code, text)                                                               \
  do {                                                                                                       \
    ncclResult_t r_ = (call);                                                                                \
    if (r_ != (code) || !mentions(comm, text))                                                               \
      (f).fail(fmt::format("{} -> {} ({}), want {} mentioning '{}'", #call, int(r_), ncclGetLastError(comm), \
                           int(code), text));                                                                \
  } while (0)

}  // namespace

TEST_CASE("moe bad input: clear errors, no row moved", "[moe][threads]") {
  Case c;
  c.experts = 4;
  c.top_k = 2;
  c.max_tokens = 8;
  const int failures = mp::run_ranks_as_threads(2, [&](int rank, int n, ncclComm_t comm, mp::Failures& f) {
    braidMoe_t moe = nullptr;
    braidMoeConfig_t cfg = config_of(c);
    // Refused before any collective step.
    EXPECT_CODE(f, comm, braidMoeCreate(comm, nullptr, &moe), ncclInvalidArgument, "config is NULL");
    // Refused together, after the agreement: bad values, and configs that differ.
    auto refused = [&](auto change, const char* says) {
      braidMoeConfig_t bad = cfg;
      change(bad);
      EXPECT_CODE(f, comm, braidMoeCreate(comm, &bad, &moe), ncclInvalidArgument, says);
    };
    refused([](braidMoeConfig_t& b) { b.numExperts = 3; }, "multiple of the 2 ranks");
    refused([](braidMoeConfig_t& b) { b.size = 8; }, "config.size");
    refused([](braidMoeConfig_t& b) { b.dtype = ncclInt32; }, "not a MoE row type");
    refused([](braidMoeConfig_t& b) { b.topK = 5; }, "topK 5");
    refused([&](braidMoeConfig_t& b) { b.hidden = rank == 1 ? 17 : b.hidden; }, "hidden");
    refused([](braidMoeConfig_t& b) { b.zeroCopy = 4; }, "zeroCopy 0x4");
    refused([](braidMoeConfig_t& b) { b.maxTokensPerRank = INT32_MAX; b.tileRows = 2; }, "over 2^31 rows");
    refused([](braidMoeConfig_t& b) { b.maxTokensPerRank = 1 << 30; b.hidden = 1 << 20; }, "the window would take");
    refused([&](braidMoeConfig_t& b) { b.zeroCopy = rank; }, "zeroCopy");
    // A client built before zeroCopy passes the shorter struct: served, without the buffer.
    braidMoeConfig_t bad = cfg;
    bad.zeroCopy = braidMoeZeroCopyCombine | braidMoeZeroCopyDispatch;  // past the size it says: not read
    bad.size = offsetof(braidMoeConfig_t, zeroCopy);
    MP_NCCL(f, braidMoeCreate(comm, &bad, &moe));
    void* buffer = &bad;
    if (moe) {
      EXPECT_CODE(f, comm, braidMoeGetCombineBuffer(moe, &buffer), ncclInvalidUsage, "braidMoeZeroCopyCombine");
      if (buffer) f.fail("a refused braidMoeGetCombineBuffer left *expertOut set");
      buffer = &bad;
      EXPECT_CODE(f, comm, braidMoeGetDispatchBuffer(moe, &buffer), ncclInvalidUsage, "braidMoeZeroCopyDispatch");
      if (buffer) f.fail("a refused braidMoeGetDispatchBuffer left *tokens set");
      Expected x;
      run_layer(c, rank, n, moe, 0, f, &x);
      MP_NCCL(f, braidMoeDestroy(moe));
      moe = nullptr;
    }
    // Inside a group: create's agreement runs on the host at once, so it is
    // refused on every rank, before anything is exchanged.
    MP_NCCL(f, ncclGroupStart());
    EXPECT_CODE(f, comm, braidMoeCreate(comm, &cfg, &moe), ncclInvalidUsage, "inside a group");
    MP_NCCL(f, ncclGroupEnd());
    if (moe) f.fail("a refused create left a handle");

    MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
    if (!moe) return;
    std::vector<float> tokens(size_t(c.max_tokens) * c.hidden, 1.0f);
    size_t rows = 0;
    MP_NCCL(f, braidMoeGetInfo(moe, &rows, nullptr));
    std::vector<float> recv(rows * size_t(c.hidden)), out(tokens.size());
    std::vector<int32_t> counts(4), topk(size_t(c.max_tokens) * 2, 0);
    std::vector<float> weights(topk.size(), 1.0f);
    topk[5] = 4;  // not an expert
    EXPECT_CODE(f, comm, braidMoeDispatch(moe, tokens.data(), topk.data(), 4, recv.data(), counts.data(), nullptr, nullptr),
                ncclInvalidArgument, "token 2 routes to expert 4");
    topk[5] = -3;
    EXPECT_CODE(f, comm, braidMoeDispatch(moe, tokens.data(), topk.data(), 4, recv.data(), counts.data(), nullptr, nullptr),
                ncclInvalidArgument, "expert -3");
    EXPECT_CODE(f, comm, braidMoeDispatch(moe, tokens.data(), topk.data(), 9, recv.data(), counts.data(), nullptr, nullptr),
                ncclInvalidArgument, "numTokens 9");
    EXPECT_CODE(f, comm, braidMoeDispatch(moe, nullptr, topk.data(), 2, recv.data(), counts.data(), nullptr, nullptr),
                ncclInvalidArgument, "NULL");
    EXPECT_CODE(f, comm, braidMoeDispatch(moe, tokens.data(), topk.data(), 2, nullptr, counts.data(), nullptr, nullptr),
                ncclInvalidArgument, "NULL");
    EXPECT_CODE(f, comm, braidMoeCombine(moe, recv.data(), weights.data(), out.data(), nullptr), ncclInvalidUsage,
                "no dispatch to combine");
    EXPECT_CODE(f, comm, braidMoeGetStats(moe, nullptr), ncclInvalidArgument, "stats is NULL");
    EXPECT_CODE(f, comm, braidMoeGetCombineBuffer(moe, nullptr), ncclInvalidArgument, "expertOut is NULL");

    // No row moved (each rank's refused dispatches still sent their
    // kFailedSender words: test_moe_bad_rank.cc), none counted as a
    // dispatch, and a good layer is exact.
    braidMoeStats_t s{};
    MP_NCCL(f, braidMoeGetStats(moe, &s));
    if (s.dispatches != 0 || s.payloadBytesRemote != 0 || s.rowsRouted != 0)
      f.fail("a refused dispatch moved rows");
    Expected x;
    run_layer(c, rank, n, moe, 0, f, &x);

    // Dispatch twice without combine: the windows are still in use.
    for (size_t i = 0; i < topk.size(); ++i) topk[i] = int32_t(i % 2);  // experts 0 and 1 (a token names each once)
    MP_NCCL(f, braidMoeDispatch(moe, tokens.data(), topk.data(), 2, recv.data(), counts.data(), nullptr, nullptr));
    EXPECT_CODE(f, comm, braidMoeDispatch(moe, tokens.data(), topk.data(), 2, recv.data(), counts.data(), nullptr, nullptr),
                ncclInvalidUsage, "combine has not run");
    MP_NCCL(f, braidMoeCombine(moe, recv.data(), weights.data(), out.data(), nullptr));

    // Calls without a communicator report through the process's last error:
    // rank 0 alone, while rank 1 waits in destroy's barrier.
    if (rank == 0) {
      EXPECT_CODE(f, nullptr, braidMoeCreate(comm, &cfg, nullptr), ncclInvalidArgument, "moe is NULL");
      braidMoe_t none = nullptr;
      EXPECT_CODE(f, nullptr, braidMoeCreate(nullptr, &cfg, &none), ncclInvalidArgument, "comm argument is NULL");
      EXPECT_CODE(f, nullptr,
                  braidMoeDispatch(nullptr, tokens.data(), topk.data(), 2, recv.data(), counts.data(), nullptr, nullptr),
                  ncclInvalidArgument, "handle is NULL");
      EXPECT_CODE(f, nullptr, braidMoeDestroy(nullptr), ncclInvalidArgument, "moe is NULL");
      void* buffer = &none;
      EXPECT_CODE(f, nullptr, braidMoeGetCombineBuffer(nullptr, &buffer), ncclInvalidArgument, "handle is NULL");
      if (buffer) f.fail("a refused braidMoeGetCombineBuffer left *expertOut set");
    }
    MP_NCCL(f, braidMoeDestroy(moe));
  });
  CHECK(failures == 0);
}

// A rank that cannot allocate its window (here: a file-size limit its
// memfd cannot grow past): every rank's braidMoeCreate fails at once, in
// step (the allocation is agreed before the collective registration), and
// the communicator goes on: a collective, then a create that works and an
// exact layer.
TEST_CASE("moe: a rank that cannot allocate its window fails every rank's create, which go on",
          "[moe][processes][faults]") {
  constexpr int kStarved = 2;
  Case c;
  c.experts = 8;
  c.top_k = 2;
  c.max_tokens = 64;
  c.hidden = 256;
  const int failures = mp::run_ranks_as_processes(4, [&](int rank, int n, ncclComm_t comm, mp::Failures& f) {
    mp::barrier_all(comm, f);  // the host paths' shared boards made before the limit
    rlimit old{};
    getrlimit(RLIMIT_FSIZE, &old);
    if (rank == kStarved) {
      signal(SIGXFSZ, SIG_IGN);  // ftruncate past the limit fails with EFBIG instead of killing
      rlimit tight = old;
      tight.rlim_cur = 4096;
      setrlimit(RLIMIT_FSIZE, &tight);
    }
    braidMoeConfig_t cfg = config_of(c);
    braidMoe_t moe = nullptr;
    // An unrelated error on the comm first: the allocation's message must
    // give ncclMemAlloc's own reason (the process's last error), not this.
    float word = 0;
    if (rank == kStarved &&
        ncclAllReduce(&word, &word, 1, ncclDataType_t(99), ncclSum, comm, nullptr) != ncclInvalidArgument)
      f.fail("an ncclAllReduce of datatype 99 was not refused");
    const auto start = Clock::now();
    EXPECT_CODE(f, comm, braidMoeCreate(comm, &cfg, &moe), ncclSystemError,
                rank == kStarved ? "ncclMemAlloc" : "rank 2 could not allocate");
    if (rank == kStarved && (mentions(comm, "datatype") || !mentions(comm, "ncclMemAlloc: ")))
      f.fail(fmt::format("the allocation failure gives another reason than ncclMemAlloc's: {}", ncclGetLastError(comm)));
    if (moe) f.fail("a failed create handed out a handle");
    if (seconds_since(start) > 5)
      f.fail(fmt::format("rank {}: the failed create took {:.1f} s", rank, seconds_since(start)));
    if (rank == kStarved) setrlimit(RLIMIT_FSIZE, &old);
    std::vector<float> in(16, float(rank)), out(16);
    MP_NCCL(f, ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr));
    if (out[0] != float(n * (n - 1) / 2))
      f.fail(fmt::format("rank {}: AllReduce after the failure gave {}", rank, out[0]));
    MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
    if (!moe) return;
    Expected x;
    run_layer(c, rank, n, moe, 0, f, &x);
    MP_NCCL(f, braidMoeDestroy(moe));
  });
  CHECK(failures == 0);
}

// Non-blocking communicators (config.blocking = 0), as PyTorch drives them:
// init and collectives may return ncclInProgress, ncclCommGetAsyncError says
// ncclInProgress until the work is done, then ncclSuccess; Abort works
// while something is still in progress, and Destroy is refused then (as
// NCCL's).
#include <catch2/catch.hpp>

#include <chrono>

#include "collective_check.h"

using namespace mp;
using Clock = std::chrono::steady_clock;

namespace {

// Polls until the communicator leaves ncclInProgress (bounded).
ncclResult_t wait_done(ncclComm_t comm, Failures& f, int max_ms = 30000) {
  ncclResult_t state = ncclInProgress;
  auto until = Clock::now() + std::chrono::milliseconds(max_ms);
  while (state == ncclInProgress && Clock::now() < until) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) {
      f.fail("ncclCommGetAsyncError failed");
      return ncclInternalError;
    }
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return state;
}

void nonblocking_rank(int rank, int n, const ncclUniqueId& id, Failures& f) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, rank, &config);
  if (r != ncclInProgress && r != ncclSuccess) return f.fail(fmt::format("init returned {}", int(r)));
  if (!comm) return f.fail("no comm handle from a non-blocking init");
  if (wait_done(comm, f) != ncclSuccess) return f.fail("non-blocking init did not succeed");
  for (int iter = 0; iter < 3; ++iter) {
    std::vector<double> in(50000, rank + iter), out(50000, -1);
    r = ncclAllReduce(in.data(), out.data(), in.size(), ncclDouble, ncclSum, comm, nullptr);
    if (r != ncclInProgress && r != ncclSuccess) return f.fail(fmt::format("allreduce returned {}", int(r)));
    if (wait_done(comm, f) != ncclSuccess) return f.fail("non-blocking allreduce failed");
    double want = n * (n - 1) / 2.0 + n * iter;
    for (double v : out)
      if (v != want) return f.fail(fmt::format("rank {} got {} want {}", rank, v, want));
  }
  // Grouped send/recv ring, then Finalize (waits) and Destroy.
  std::vector<int> s(100, rank), q(100, -1);
  MP_NCCL(f, ncclGroupStart());
  MP_NCCL(f, ncclSend(s.data(), 100, ncclInt32, (rank + 1) % n, comm, nullptr));
  MP_NCCL(f, ncclRecv(q.data(), 100, ncclInt32, (rank + n - 1) % n, comm, nullptr));
  r = ncclGroupEnd();
  if (r != ncclInProgress && r != ncclSuccess) return f.fail(fmt::format("group end returned {}", int(r)));
  if (wait_done(comm, f) != ncclSuccess) return f.fail("non-blocking send/recv failed");
  if (q[99] != (rank + n - 1) % n) f.fail("send/recv data wrong");
  r = ncclCommFinalize(comm);
  if (r != ncclSuccess && r != ncclInProgress) f.fail("finalize failed");
  if (wait_done(comm, f) != ncclSuccess) f.fail("finalize did not complete");
  MP_NCCL(f, ncclCommDestroy(comm));
}

}  // namespace

TEST_CASE("non-blocking init, collectives and p2p: InProgress then Success", "[mp][nonblocking][threads]") {
  const int n = 3;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<Failures> f(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { nonblocking_rank(r, n, id, f[r]); });
  for (auto& t : threads) t.join();
  for (auto& x : f) CHECK(x.count == 0);
}

TEST_CASE("non-blocking communicators in forked processes", "[mp][nonblocking]") {
  std::vector<pid_t> pids = fork_ranks(3, 60, 1, [](int r, const std::vector<ncclUniqueId>& ids) {
    Failures f;
    nonblocking_rank(r, 3, ids[0], f);
    return f.count ? 1 : 0;
  });
  REQUIRE(pids.size() == 3);
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
}

TEST_CASE("one thread inits several non-blocking ranks in a group", "[mp][nonblocking][threads]") {
  const int n = 4;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  std::vector<ncclComm_t> comms(n, nullptr);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) CHECK(ncclCommInitRankConfig(&comms[r], n, id, r, &config) == ncclSuccess);
  ncclResult_t end = ncclGroupEnd();
  CHECK((end == ncclInProgress || end == ncclSuccess));
  Failures f;
  for (auto c : comms) CHECK(wait_done(c, f) == ncclSuccess);
  // All ranks' allreduce in one group from this thread.
  std::vector<std::vector<float>> bufs(n, std::vector<float>(1000));
  for (int r = 0; r < n; ++r) std::fill(bufs[r].begin(), bufs[r].end(), float(r + 1));
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r)
    CHECK(ncclAllReduce(bufs[r].data(), bufs[r].data(), 1000, ncclFloat, ncclSum, comms[r], nullptr) == ncclSuccess);
  end = ncclGroupEnd();
  CHECK((end == ncclInProgress || end == ncclSuccess));
  for (auto c : comms) CHECK(wait_done(c, f) == ncclSuccess);
  for (int r = 0; r < n; ++r) CHECK(bufs[r][999] == 10.f);
  for (auto c : comms) CHECK(ncclCommDestroy(c) == ncclSuccess);
  CHECK(f.count == 0);
}

TEST_CASE("destroy of a non-blocking init still in progress is refused at once, and abort is prompt",
          "[mp][nonblocking][faults][threads]") {
  setenv("BRAID_TIMEOUT", "60", 1);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress);  // rank 1 never comes
  REQUIRE(comm != nullptr);
  ncclResult_t state = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);
  // NCCL's Destroy calls ncclCommEnsureReady: not until the init is done
  // (braid's waited out BRAID_TIMEOUT, then said ncclSuccess).
  auto start = Clock::now();
  CHECK(ncclCommDestroy(comm) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("still in progress") != std::string::npos);
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);
  start = Clock::now();
  CHECK(ncclCommAbort(comm) == ncclSuccess);
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  unsetenv("BRAID_TIMEOUT");
}

TEST_CASE("a failed non-blocking init reports its error through GetAsyncError", "[mp][nonblocking][faults][threads]") {
  setenv("BRAID_TIMEOUT", "1", 1);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress);
  Failures f;
  ncclResult_t state = wait_done(comm, f, 20000);
  // This header's config says 2.32: a wait that gave up is ncclTimeout (2.29).
  CHECK((state == ncclTimeout || state == ncclRemoteError));
  float x = 1;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess);
  CHECK(ncclCommAbort(comm) == ncclSuccess);
  unsetenv("BRAID_TIMEOUT");
}

// A communicator used before its init is over, or after it failed, gets an
// error, never a crash (NCCL's ncclCommEnsureReady): a collective queued in
// the group that holds the communicator's init, calls on a non-blocking
// init still in progress, and every call that needs what init makes
// (Split, Grow, Shrink, WindowRegister, Suspend, device communicators) after a
// non-blocking init failed.  A call refused inside a group fails the
// group's ncclGroupEnd, which runs none of it.  NCCL's codes where braid's
// differed: Destroy and Finalize of NULL, a second Finalize, the attribute
// queries of a finalized communicator, ncclGroupSimulateEnd with NULL (a
// plain group end) and with a bad simInfo (the group ends, its calls
// dropped).  And ncclCommGetAsyncError polled from another thread while the
// communicator is aborted, or suspended and resumed.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include "collective_check.h"
#include "scoped_env.h"

using namespace mp;

namespace {

// A non-blocking init of 2 ranks of which only rank 0 comes: it stays in progress.
ncclComm_t lonely_nonblocking_init(const ncclUniqueId& id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, 0, &config);
  REQUIRE((r == ncclInProgress || r == ncclSuccess));
  REQUIRE(comm);
  return comm;
}

bool last_error_says(ncclComm_t comm, const std::string& text) {
  return std::string(ncclGetLastError(comm)).find(text) != std::string::npos;
}

ncclComm_t one_rank_comm() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  return comm;
}

// PyTorch's watchdog: a thread polling ncclCommGetAsyncError on `comm`
// until stopped, counting the answers (call's result, state) `ok` rejects.
class Watchdog {
 public:
  Watchdog(ncclComm_t comm, std::function<bool(ncclResult_t, ncclResult_t)> ok)
      : thread_([this, comm, ok] {
          while (polling_.load()) {
            ncclResult_t state = ncclSuccess;
            const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
            if (!ok(r, state)) bad_.fetch_add(1);
          }
        }) {}
  int stop() {
    polling_.store(false);
    thread_.join();
    return bad_.load();
  }

 private:
  std::atomic<bool> polling_{true};
  std::atomic<int> bad_{0};
  std::thread thread_;  // last: it starts once the flags exist
};

}  // namespace

TEST_CASE("A collective queued in the group that holds its communicator's init is refused", "[api][errors]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  float a[4] = {1, 2, 3, 4}, b[4] = {};
  ncclComm_t comm = nullptr;
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  CHECK(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(last_error_says(comm, "before its init finished"));
  CHECK(ncclSend(a, 4, ncclFloat, 0, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidArgument);  // the group's calls were refused; its init runs
  CHECK(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(b[3] == 4);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("Calls on a non-blocking init still in progress are refused at once", "[api][errors][nonblocking]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = lonely_nonblocking_init(id);
  float a[4] = {1, 2, 3, 4}, b[4] = {};
  const auto start = std::chrono::steady_clock::now();
  CHECK(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclSend(a, 4, ncclFloat, 1, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclSignal(1, 0, 0, 0, comm, nullptr) == ncclInvalidArgument);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  ncclResult_t state = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);
  CHECK(ncclCommAbort(comm) == ncclSuccess);
}

TEST_CASE("After a non-blocking init failed, every call that needs it returns its error", "[api][errors][nonblocking]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "1");  // the binary's later tests keep their own
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = lonely_nonblocking_init(id);
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 200 && state == ncclInProgress; ++i) {
    REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(state != ncclInProgress);
  REQUIRE(state != ncclSuccess);
  ncclComm_t other = nullptr;
  CHECK(ncclCommSplit(comm, 0, 0, &other, nullptr) == state);
  CHECK(other == nullptr);
  CHECK(ncclCommGrow(comm, 3, nullptr, -1, &other, nullptr) == state);
  void* buffer = nullptr;
  REQUIRE(ncclMemAlloc(&buffer, 4096) == ncclSuccess);
  ncclWindow_t win = nullptr;
  CHECK(ncclCommWindowRegister(comm, buffer, 4096, &win, 0) == state);
  CHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == state);
  CHECK(last_error_says(comm, "init failed"));
  int excluded = 1;
  CHECK(ncclCommShrink(comm, &excluded, 1, &other, nullptr, NCCL_SHRINK_DEFAULT) == state);
  CHECK(ncclCommShrink(comm, &excluded, 1, &other, nullptr, NCCL_SHRINK_ABORT) == ncclInvalidArgument);
  float a[4] = {1, 2, 3, 4}, b[4] = {};
  CHECK(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == state);
  CHECK(ncclMemFree(buffer) == ncclSuccess);
  CHECK(ncclCommAbort(comm) == ncclSuccess);
}

TEST_CASE("NULL Destroy and Finalize do nothing, a second Finalize is refused, a finalized comm answers queries",
          "[api][errors]") {
  CHECK(ncclCommDestroy(nullptr) == ncclSuccess);
  CHECK(ncclCommFinalize(nullptr) == ncclSuccess);
  ncclComm_t comm = one_rank_comm();
  REQUIRE(ncclCommFinalize(comm) == ncclSuccess);
  CHECK(ncclCommFinalize(comm) == ncclInvalidArgument);
  int value = -1;
  CHECK(ncclCommCount(comm, &value) == ncclSuccess);
  CHECK(value == 1);
  CHECK(ncclCommUserRank(comm, &value) == ncclSuccess);
  CHECK(value == 0);
  CHECK(ncclCommCuDevice(comm, &value) == ncclSuccess);
  float a[4] = {1, 2, 3, 4}, b[4] = {};
  CHECK(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidUsage);  // no work after it
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("ncclGroupSimulateEnd: NULL ends the group as ncclGroupEnd, a bad simInfo ends it dropping its calls",
          "[api][errors]") {
  ncclComm_t comm = one_rank_comm();
  float a[4] = {1, 2, 3, 4}, b[4] = {}, d[4] = {};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclGroupSimulateEnd(nullptr) == ncclSuccess);
  CHECK(b[3] == 4);  // it ran
  CHECK(ncclGroupEnd() == ncclInvalidUsage);  // and no group is open

  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 1;
  std::fill(b, b + 4, 0.f);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclGroupSimulateEnd(&bad) == ncclInvalidArgument);
  CHECK(b[3] == 0);  // dropped
  CHECK(ncclAllReduce(a, d, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(d[3] == 4);  // outside any group: it runs now
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("ncclCommGetAsyncError polled while another thread aborts the communicator", "[api][threads]") {
  // The watchdog pattern (PyTorch's): under ASan a use after free shows.
  for (int round = 0; round < 20; ++round) {
    ncclComm_t comm = one_rank_comm();
    Watchdog watchdog(comm, [](ncclResult_t r, ncclResult_t) { return r == ncclSuccess || r == ncclInvalidArgument; });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CHECK(ncclCommAbort(comm) == ncclSuccess);
    CHECK(watchdog.stop() == 0);
  }
}

TEST_CASE("A call refused inside a group fails ncclGroupEnd, which runs none of the group", "[api][errors]") {
  ncclComm_t comm = one_rank_comm();
  float a[4] = {1, 2, 3, 4}, b[4] = {}, d[4] = {};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  REQUIRE(ncclGroupStart() == ncclSuccess);  // nested: the outermost end decides
  CHECK(ncclAllReduce(a, d, 4, ncclFloat, ncclNumOps, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclSuccess);
  CHECK(ncclSend(a, 4, ncclFloat, 0, comm, nullptr) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("none of its calls ran") != std::string::npos);
  CHECK(b[3] == 0);  // the good call did not run either
  // The next group is a new one.
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  CHECK(b[3] == 4);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("ncclCommGetAsyncError polled while the communicator is suspended and resumed", "[api][threads]") {
  // The backend is dropped and made again under the poll: under ASan or TSan a race shows.
  ncclComm_t comm = one_rank_comm();
  Watchdog watchdog(comm, [](ncclResult_t r, ncclResult_t state) { return r == ncclSuccess && state == ncclSuccess; });
  for (int round = 0; round < 10; ++round) {
    CHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess);
    CHECK(ncclCommResume(comm) == ncclSuccess);
  }
  CHECK(watchdog.stop() == 0);
  float a[4] = {1, 2, 3, 4}, b[4] = {};
  CHECK(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(b[3] == 4);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

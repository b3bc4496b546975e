// One thread that drives several ranks makes their new communicators, as
// NCCL allows: ncclCommShrink and ncclCommGrow inside a group (the existing
// ranks' grows and the joining ranks' inits meet at ncclGroupEnd), and
// Split and Shrink on non-blocking communicators one call after another,
// without a group (each returns ncclInProgress at once, its exchange going
// on in the background).  A derivation that fails leaves its parents
// usable.  Every communicator proves itself with an exact allreduce.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "harness.h"
#include "scoped_env.h"

using namespace mp;

namespace {

// Polls a non-blocking communicator until its work is over.
ncclResult_t settle(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 60000 && state == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

// An exact allreduce of (rank + 1) on every communicator of `comms`, the
// ranks 0 .. comms.size() - 1 of one communicator, in one group.
void check_all(const std::vector<ncclComm_t>& comms, const std::string& what) {
  INFO(what);
  const int n = int(comms.size());
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(1001, -1));
  std::vector<std::vector<int32_t>> in(n);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    REQUIRE(comms[r]);
    int size = 0, rank = -1;
    CHECK(ncclCommCount(comms[r], &size) == ncclSuccess);
    CHECK(ncclCommUserRank(comms[r], &rank) == ncclSuccess);
    CHECK(size == n);
    CHECK(rank == r);
    in[r].assign(1001, rank + 1);
    CHECK(ncclAllReduce(in[r].data(), out[r].data(), 1001, ncclInt32, ncclSum, comms[r], nullptr) == ncclSuccess);
  }
  const ncclResult_t ran = ncclGroupEnd();
  CHECK((ran == ncclSuccess || ran == ncclInProgress));
  for (int r = 0; r < n; ++r) {
    CHECK(settle(comms[r]) == ncclSuccess);
    CHECK(std::count(out[r].begin(), out[r].end(), n * (n + 1) / 2) == 1001);
  }
}

void destroy_all(const std::vector<ncclComm_t>& comms) {
  for (ncclComm_t c : comms)
    if (c) CHECK(ncclCommDestroy(c) == ncclSuccess);
}

}  // namespace

TEST_CASE("one thread shrinks all its ranks in a group, by default and with NCCL_SHRINK_ABORT",
          "[mp][shrink][group]") {
  constexpr int n = 4;
  std::vector<ncclComm_t> comms(n);
  REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
  int leaving = 1;
  std::vector<ncclComm_t> rest(n - 1);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0, k = 0; r < n; ++r)
    if (r != leaving) CHECK(ncclCommShrink(comms[r], &leaving, 1, &rest[k++], nullptr, NCCL_SHRINK_DEFAULT) == 0);
  CHECK(rest[0] == nullptr);  // set at the group's end
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  check_all(rest, "shrunk by default");
  check_all(comms, "the parents after the shrink");  // a default shrink leaves them usable
  // With the abort flag the parents are revoked at the call; their children work.
  leaving = 0;
  std::vector<ncclComm_t> fewer(n - 2);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 1; r < n - 1; ++r)
    CHECK(ncclCommShrink(rest[r], &leaving, 1, &fewer[r - 1], nullptr, NCCL_SHRINK_ABORT) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  check_all(fewer, "shrunk with abort");
  int32_t x = 1, y = 0;
  CHECK(ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, rest[1], nullptr) == ncclInvalidUsage);  // revoked
  destroy_all(fewer);
  destroy_all(rest);
  destroy_all(comms);
}

TEST_CASE("one thread grows its ranks in a group: the joining ranks' inits meet the existing ranks' grows",
          "[mp][grow][group]") {
  constexpr int old_n = 2, new_n = 4;
  std::vector<ncclComm_t> comms(old_n);
  REQUIRE(ncclCommInitAll(comms.data(), old_n, nullptr) == ncclSuccess);
  ncclUniqueId id;
  REQUIRE(ncclCommGetUniqueId(comms[0], &id) == ncclSuccess);
  std::vector<ncclComm_t> grown(new_n);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  CHECK(ncclCommGrow(comms[0], new_n, &id, -1, &grown[0], nullptr) == ncclSuccess);
  CHECK(ncclCommGrow(comms[1], new_n, nullptr, -1, &grown[1], nullptr) == ncclSuccess);
  for (int r = old_n; r < new_n; ++r) CHECK(ncclCommGrow(nullptr, new_n, &id, r, &grown[r], nullptr) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  check_all(grown, "grown");
  check_all(comms, "the parents after the grow");
  // The grow consumed the id: the coordinator may hand out another.
  CHECK(ncclCommGetUniqueId(comms[0], &id) == ncclSuccess);
  destroy_all(grown);
  destroy_all(comms);
}

TEST_CASE("non-blocking split and shrink return at once, so one thread derives all its ranks without a group",
          "[mp][split][shrink][nonblocking]") {
  constexpr int n = 4;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  std::vector<ncclComm_t> comms(n);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) CHECK(ncclCommInitRankConfig(&comms[r], n, id, r, &config) == ncclSuccess);
  const ncclResult_t started = ncclGroupEnd();
  CHECK((started == ncclSuccess || started == ncclInProgress));
  for (int r = 0; r < n; ++r) REQUIRE(settle(comms[r]) == ncclSuccess);
  // Each call would wait for the others' colour exchange if it ran on this
  // thread: they run in the background, and meet there.
  std::vector<ncclComm_t> halves(n);
  for (int r = 0; r < n; ++r) CHECK(ncclCommSplit(comms[r], r % 2, r, &halves[r], nullptr) == ncclInProgress);
  for (int r = 0; r < n; ++r) CHECK(settle(comms[r]) == ncclSuccess);  // the split is over: *newcomm is set
  for (int r = 0; r < n; ++r) REQUIRE(settle(halves[r]) == ncclSuccess);  // each child's own init
  check_all({halves[0], halves[2]}, "even half");
  check_all({halves[1], halves[3]}, "odd half");
  int leaving = n - 1;
  std::vector<ncclComm_t> rest(n - 1);
  for (int r = 0; r < n - 1; ++r)
    CHECK(ncclCommShrink(comms[r], &leaving, 1, &rest[r], nullptr, NCCL_SHRINK_DEFAULT) == ncclInProgress);
  for (int r = 0; r < n - 1; ++r) CHECK(settle(comms[r]) == ncclSuccess);
  for (int r = 0; r < n - 1; ++r) REQUIRE(settle(rest[r]) == ncclSuccess);
  check_all(rest, "shrunk");
  destroy_all(rest);
  destroy_all(halves);
  destroy_all(comms);
}

TEST_CASE("a split in a group that fails leaves every parent usable", "[mp][split][group][faults]") {
  constexpr int n = 3;
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  std::vector<ncclComm_t> comms(n);
  REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
  std::vector<ncclComm_t> children(n);
  {
    ScopedEnv no_root("BRAID_TEST_FAIL_DERIVE_ROOT_RANK", "0");  // the new communicator's first member
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (int r = 0; r < n; ++r) CHECK(ncclCommSplit(comms[r], 0, r, &children[r], nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() != ncclSuccess);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  }
  for (ncclComm_t c : children) CHECK(c == nullptr);
  for (ncclComm_t c : comms) {
    ncclResult_t state = ncclInternalError;
    CHECK(ncclCommGetAsyncError(c, &state) == ncclSuccess);
    CHECK(state == ncclSuccess);
  }
  CHECK(std::string(ncclGetLastError(comms[1])).find("could not start its bootstrap root") != std::string::npos);
  check_all(comms, "the parents after the failed split");
  destroy_all(comms);
}

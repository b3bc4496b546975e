// Device communicators for a client built against NCCL 2.30's device
// headers (src/devapi/abi_v23000.h): versioned requirements in, the 240-byte
// ncclDevComm out, served for LSA (windows, LSA barriers, LL AlltoAll,
// the user's resources) and for GIN (its fields here; its traffic in
// test_device_gin_v230.cc).  NVIDIA's installed headers are 2.28.9's, so
// the client's structs are written from 2.30.7's layout
// (devapi_v230_client.h).
#include <catch2/catch.hpp>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "devapi_v230_client.h"
#include "harness.h"

using namespace mp;
using namespace v230;

namespace {

void serve_v230(int rank, int n, ncclComm_t comm, Failures& f) {
  Handle a2a{};
  ResourceReq a2a_req{}, mine{};
  MP_NCCL(f, lla2a_create_requirement(2, 8, &a2a, &a2a_req));
  uint32_t mine_handle = 0;
  mine.bufferSize = 512;
  mine.outBufferHandle = &mine_handle;
  a2a_req.next = &mine;
  Reqs230 reqs = initializer();
  reqs.lsaBarrierCount = 3;
  reqs.resourceRequirementsList = &a2a_req;
  DevComm230 dev;
  std::memset(&dev, 0x77, sizeof dev);
  MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
  if (dev.magic != NCCL_API_MAGIC || dev.version != reqs.version || dev.rank != rank || dev.nRanks != n ||
      dev.lsaSize != n || dev.lsaRank != rank)
    f.fail("2.30 devComm header and ranks");
  // abortFlag read atomically: a peer's exit at teardown may raise it from the watch thread.
  if (!dev.windowTable || !dev.resourceWindow || dev.lsaBarrier.b != 3 || dev.ginConnectionCount != 0 ||
      dev.ginContextCount != 0 || !dev.abortFlag || __atomic_load_n(dev.abortFlag, __ATOMIC_ACQUIRE) != 0 ||
      dev.hybridLsaBarrier.b != 0)
    f.fail("2.30 devComm: table, resources, barriers, GIN or abortFlag");
  // The inlined window holds what the device reads of the window struct
  // (host memory here), the rest zero, as NCCL fills it.
  const auto& window = *static_cast<const Window230*>(dev.resourceWindow);
  const auto& inlined = dev.resourceWindow_inlined;
  if (inlined.lsaFlatBase != window.lsaFlatBase || inlined.stride4G != window.stride4G ||
      inlined.mcOffset4K != window.mcOffset4K || inlined.reserved1[0] || inlined.reserved3[31])
    f.fail("resourceWindow_inlined is not the window's lsaFlatBase, stride4G and mcOffset4K");
  const size_t user = size_t(mine_handle) * 128;
  for (int p = 0; p < n; ++p)
    if (resource(dev, p, user)[rank] != 0) f.fail("resource buffer not zeroed");
  barrier_all(comm, f);
  for (int p = 0; p < n; ++p) resource(dev, p, user)[rank] = char(10 + rank);
  barrier_all(comm, f);
  for (int r = 0; r < n; ++r)
    if (resource(dev, rank, user)[r] != char(10 + r)) f.fail("user resource: rank " + std::to_string(r) + "'s store");
  MP_NCCL(f, dev_comm_destroy(comm, &dev));
  if (dev_comm_destroy(comm, &dev) != ncclInvalidArgument) f.fail("destroying a 2.30 devComm twice");

  // 2.30's GIN: resources without a connection type are NCCL's invalid
  // argument, as is a world barrier on a rail connection or a traffic class
  // past 255; with a connection, served.  Requirements of another version's size are refused.
  auto refused = [&](const Reqs230& r, ncclResult_t want, const char* says, const char* what) {
    DevComm230 d{};
    if (dev_comm_create(comm, &r, &d) != want) f.fail(std::string(what) + ": not refused as expected");
    if (std::string(ncclGetLastError(comm)).find(says) == std::string::npos)
      f.fail(std::string(what) + ": message " + ncclGetLastError(comm));
  };
  Reqs230 signals = initializer();
  signals.ginSignalCount = 2;
  refused(signals, ncclInvalidArgument, "NCCL_GIN_CONNECTION_NONE", "GIN signals without a connection");
  Reqs230 rail_world = initializer();
  rail_world.ginConnectionType = 2;
  rail_world.worldGinBarrierCount = 1;
  refused(rail_world, ncclInvalidArgument, "NCCL_GIN_CONNECTION_RAIL", "a world barrier on a rail connection");
  Reqs230 bad_class = initializer();
  bad_class.ginConnectionType = 1;
  bad_class.ginTrafficClass = 256;
  refused(bad_class, ncclInvalidArgument, "ginTrafficClass 256 (expected 0..255)", "a traffic class past 255");
  signals.ginConnectionType = 1;
  signals.ginTrafficClass = 40;  // served: one host here, so no connection carries it
  signals.ginContextCount = 3;
  signals.railGinBarrierCount = 1;
  DevComm230 gin{};
  MP_NCCL(f, dev_comm_create(comm, &signals, &gin));
  // The rail barrier's signals (one per rail rank: 1 on one host) follow
  // the user's 2; each context has its own signals and counters.
  if (gin.ginConnectionCount != 1 || gin.ginNetDeviceTypes[0] != 2 /* PROXY */ || gin.ginContextCount != 3 ||
      gin.ginSignalCount != 3 || gin.railGinBarrier.a != 2 || !gin.ginSignalShadows || gin.ginConnectionsRailed ||
      gin.ginContextsRailed || !gin.ginStrongLegacySignals)
    f.fail("2.30 devComm GIN fields");
  const auto* ctx = static_cast<const ProxyCtx230*>(gin.ginHandles[0]);
  for (int c = 0; ctx && c < 3; ++c)
    if (ctx[c].nranks != n || ctx[c].signals != ctx[0].signals + 3 * c || !ctx[c].signalOffsets ||
        !ctx[c].lastIssuedGet || !ctx[c].lastVisibleGet || ctx[c].counters == ctx[(c + 1) % 3].counters)
      f.fail("2.30 GIN context " + std::to_string(c));
  MP_NCCL(f, dev_comm_destroy(comm, &gin));
  Reqs230 old = initializer();
  old.version = NCCL_VERSION(2, 29, 7);
  refused(old, ncclInvalidUsage, "are 88 bytes", "2.29.7's version on 2.30's struct");
  // Requirements past 2.31's 120 bytes (2.32.4 appended fields): a later
  // device ABI, refused, never served as an earlier one.
  struct {
    Reqs230 head;
    char tail[32];
  } later{initializer(), {}};
  later.head.size = sizeof later;
  later.head.version = NCCL_VERSION(2, 32, 4);
  DevComm230 unserved{};
  if (dev_comm_create(comm, &later, &unserved) != ncclInvalidUsage) f.fail("2.32.4's requirements not refused");
  if (std::string(ncclGetLastError(comm)).find("against 2.31's or 2.32.3's") == std::string::npos)
    f.fail(std::string("2.32.4's message: ") + ncclGetLastError(comm));
  float in = 1, out = 0;
  MP_NCCL(f, ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr));
  if (out != float(n)) f.fail("allreduce after the refusals");
}

}  // namespace

TEST_CASE("device API 2.30: versioned requirements get a 2.30 devComm for LSA and GIN",
          "[device][devcomm][v230]") {
  CHECK(run_ranks_as_threads(3, serve_v230) == 0);
  CHECK(run_ranks_as_processes(2, serve_v230) == 0);
}

// Inside a group, a 2.30 client's requirements are copied at the call (its
// versioned struct and its resource list) and its devComm written at
// ncclGroupEnd.
TEST_CASE("device API 2.30: a devComm created inside a group from requirements gone by ncclGroupEnd",
          "[device][devcomm][v230][group]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          DevComm230 dev{};
          uint32_t handle = 999;
          MP_NCCL(f, ncclGroupStart());
          {
            ResourceReq mine{};
            mine.bufferSize = 256;
            mine.outBufferHandle = &handle;
            Reqs230 reqs = initializer();
            reqs.lsaBarrierCount = 2;
            reqs.resourceRequirementsList = &mine;
            MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
            std::memset(&reqs, 0, sizeof reqs);  // gone before the group ends
            std::memset(&mine, 0, sizeof mine);
          }
          if (dev.magic != 0) f.fail("the devComm was written before ncclGroupEnd");
          MP_NCCL(f, ncclGroupEnd());
          if (dev.magic != NCCL_API_MAGIC || dev.rank != rank || dev.nRanks != n || dev.lsaBarrier.b != 2)
            f.fail("2.30 devComm made at ncclGroupEnd");
          if (handle == 999) f.fail("the copied requirement did not write the caller's handle");
          MP_NCCL(f, dev_comm_destroy(comm, &dev));
        }) == 0);
}

// ncclCommRevoke stops all in-flight work, a kernel's waits in the headers'
// code included: the abortFlag goes up, and the communicator reports no
// error (it is quiescent, so destroy may proceed).
TEST_CASE("device API 2.30: ncclCommRevoke raises the abortFlag", "[device][devcomm][v230]") {
  CHECK(run_ranks_as_threads(2, [](int, int, ncclComm_t comm, Failures& f) {
          Reqs230 reqs = initializer();
          reqs.lsaBarrierCount = 1;
          DevComm230 dev{};
          MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
          if (!dev.abortFlag || __atomic_load_n(dev.abortFlag, __ATOMIC_ACQUIRE) != 0)
            return f.fail("abortFlag missing or up early");
          MP_NCCL(f, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
          if (__atomic_load_n(dev.abortFlag, __ATOMIC_ACQUIRE) != 1) f.fail("ncclCommRevoke left abortFlag down");
          ncclResult_t async = ncclInProgress;
          MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
          if (async != ncclSuccess) f.fail("async state after revoke " + std::to_string(int(async)));
          MP_NCCL(f, dev_comm_destroy(comm, &dev));
        }) == 0);
}

// A kernel waiting in 2.30's inline code for a rank whose process died:
// the waits read *abortFlag every 10000 spins (nccl_device/utility.h,
// testAbort) and leave once it is set.  braid raises it when it sees the
// process exit (device_liveness.h), so the wait below, written as those
// loops are, ends in bounded time and the host says why.
TEST_CASE("device API 2.30: abortFlag ends a kernel's wait for a rank whose process died", "[device][devcomm][v230]") {
  constexpr int kRanks = 3;
  // The survivors leave only once both have checked: one that exited first
  // would be a second dead peer for the other's watch to report.
  void* shared = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* checked = new (shared) std::atomic<int>(0);
  std::vector<pid_t> pids = fork_ranks(kRanks, 60, 1, [checked](int rank, const std::vector<ncclUniqueId>& ids) {
    Failures f;
    ncclComm_t comm = nullptr;
    MP_NCCL(f, ncclCommInitRank(&comm, kRanks, ids[0], rank));
    if (!comm) return 1;
    Reqs230 reqs = initializer();
    reqs.lsaBarrierCount = 1;
    DevComm230 dev{};
    MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
    if (!dev.abortFlag) return 1;
    barrier_all(comm, f);
    if (rank == kRanks - 1) raise(SIGKILL);
    // Waiting for a word the dead rank would have stored.
    const volatile uint32_t never = 0;
    const auto start = std::chrono::steady_clock::now();
    uint32_t steps = 0;
    bool aborted = false;
    while (never == 0 && !aborted && std::chrono::steady_clock::now() - start < std::chrono::seconds(30))
      if (++steps >= 10000) {
        steps = 0;
        aborted = __atomic_load_n(dev.abortFlag, __ATOMIC_RELAXED) != 0;
      }
    if (!aborted) f.fail("abortFlag was not raised within 30 s of rank 2's death");
    // The fault outlives the devComm whose watch saw it (not yet asked for here).
    MP_NCCL(f, dev_comm_destroy(comm, &dev));
    ncclResult_t async = ncclSuccess;
    MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
    if (async != ncclRemoteError) f.fail("async error " + std::to_string(int(async)) + ", not ncclRemoteError");
    if (std::string(ncclGetLastError(comm)).find("rank 2 (process") == std::string::npos)
      f.fail(std::string("message: ") + ncclGetLastError(comm));
    checked->fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (checked->load() < kRanks - 1 && std::chrono::steady_clock::now() < until) sched_yield();
    MP_NCCL(f, ncclCommAbort(comm));
    return f.count ? 1 : 0;
  });
  REQUIRE(pids.size() == size_t(kRanks));
  CHECK(reap_with_one_killed(pids, kRanks - 1) == 0);
  munmap(shared, sizeof(std::atomic<int>));
}

// Without a live devComm nothing waits for the LSA peers: one that leaves
// normally (its ncclCommDestroy does not wait for this rank) is no fault,
// where before the watch of the first devComm ran on and reported it.
TEST_CASE("device API: a peer leaving after every devComm is destroyed is no fault", "[device][devcomm][v230]") {
  void* shared = mmap(nullptr, sizeof(std::atomic<pid_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* leaver = new (shared) std::atomic<pid_t>(0);
  std::vector<pid_t> pids = fork_ranks(2, 60, 1, [leaver](int rank, const std::vector<ncclUniqueId>& ids) {
    Failures f;
    ncclComm_t comm = nullptr;
    MP_NCCL(f, ncclCommInitRank(&comm, 2, ids[0], rank));
    if (!comm) return 1;
    Reqs230 reqs = initializer();
    reqs.lsaBarrierCount = 1;
    DevComm230 dev{};
    MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
    MP_NCCL(f, dev_comm_destroy(comm, &dev));
    if (rank == 1) leaver->store(getpid());
    barrier_all(comm, f);
    if (rank == 1) {
      MP_NCCL(f, ncclCommDestroy(comm));
      return f.count ? 1 : 0;
    }
    const int pidfd = int(syscall(SYS_pidfd_open, leaver->load(), 0));
    pollfd gone{pidfd, POLLIN, 0};
    if (pidfd < 0 || poll(&gone, 1, 30000) != 1) f.fail("rank 1 did not exit within 30 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // time for a watch to report it
    ncclResult_t async = ncclInternalError;
    MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess) f.fail(std::string("async error after a peer left normally: ") + ncclGetLastError(comm));
    MP_NCCL(f, ncclCommDestroy(comm));
    if (pidfd >= 0) close(pidfd);
    return f.count ? 1 : 0;
  });
  REQUIRE(pids.size() == 2u);
  CHECK(reap_with_one_killed(pids, -1) == 0);
  munmap(shared, sizeof(std::atomic<pid_t>));
}

// GPU-initiated networking (GIN) of a device communicator on the host
// backend (src/runtime/device_gin.h), driven as a kernel built against
// NVIDIA's installed 2.28.9 headers drives it: the CPU stands in for the
// device and does what nccl_device/gin/proxy/gin_proxy.h's buildGfd and
// postGfd do, with the headers' own descriptor type: claim a slot with
// pis[pe]++, wait for credit against cis[pe], store the 64 bytes; handles
// from the windows' ginWins[0], offsets 4096 * ginOffset4K + offset,
// signal and counter ids past the devComm's bases.  Then it waits on its
// signal array and counters as waitSignal and the counter reads do.
//
// An AlltoAll as NCCL's example 02_gin_alltoall_pure runs it (a put with
// a signal increment to every rank, itself included), inline puts with
// signal adds, on one host and on two emulated hosts (TCP between them, or
// a net plugin);
// a descriptor the proxy must refuse, and a rank that dies, both of which
// ncclCommGetAsyncError then reports.
#include <nccl_device/core.h>
#include <nccl_device/gin/proxy/gin_proxy_device_host_common.h>
#include <nccl_device/impl/comm__types.h>
#include <nccl_device/impl/core__types.h>
#include <sched.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "gin_alltoall.h"
#include "gin_host_poster.h"
#include "gin_setups.h"
#include "harness.h"
#include "tls_key.h"

using namespace mp;
using namespace gin_host;


TEST_CASE("device API GIN: puts and signals posted as the device does land in every rank's windows", "[device][gin]") {
  CHECK(run_gin_setups(gin_alltoall, "gin-host-") == 0);
}

// With ncclSetEncryption the GIN streams between hosts are TLS connections
// too (src/base/tls.h): the same AlltoAll, exact through the relay, and each
// link's close frame delivered before its process exits.  The key is set
// here, before the ranks fork, so every rank and the bootstrap root have it.
TEST_CASE("device API GIN: with ncclSetEncryption, GIN between hosts runs over TLS, exact", "[device][gin][tls]") {
  ScopedTlsKey key("braid-test-only-gin-psk-0123456789abcdef");
  REQUIRE(key.ok);
  CHECK(run_ranks_as_processes(4, gin_alltoall, 60, [](int rank) {
          setenv("BRAID_HOSTID", ("gin-tls-host-" + std::to_string(rank / 2)).c_str(), 1);
        }) == 0);
}

// Where the network between hosts is a net (InfiniBand verbs or an NCCL
// net plugin; here braid's own plugin), GIN between hosts takes it: the
// same AlltoAll, exact, each put cut into fragments that wait for credit;
// twice, each with a devComm of its own, so that one devComm's connections
// closing leaves no error behind for the communicator.
TEST_CASE("device API GIN: between hosts over a net plugin, in fragments, exact", "[device][gin][net]") {
  CHECK(run_ranks_as_processes(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          gin_alltoall(rank, n, comm, f);
          gin_alltoall(rank, n, comm, f);
          barrier_all(comm, f);
          ncclResult_t async = ncclSuccess;
          MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
          if (async != ncclSuccess) f.fail(std::string("after two devComms: ") + ncclGetLastError(comm));
          gin_said_over(f);
        }, 120, gin_over_net("gin-net-host-")) == 0);
}

// BRAID_GIN_NET=socket keeps GIN on its own TCP streams though the
// communicator has a net; set on one rank only, every rank's devComm is
// refused, saying so (a collective setup that broke midway: the
// communicator then holds that error, to be aborted).
TEST_CASE("device API GIN: BRAID_GIN_NET=socket takes TCP streams, and set on one rank alone every rank refuses",
          "[device][gin][net]") {
  CHECK(run_ranks_as_processes(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          {
            ScopedEnv streams("BRAID_GIN_NET", "socket");
            gin_alltoall(rank, n, comm, f);
          }
          gin_said_over(f, "TCP streams");
          ncclDevCommRequirements reqs = {};
          reqs.ginSignalCount = 1;
          ncclDevComm dev = {};
          ScopedEnv one(rank == 1 ? "BRAID_GIN_NET" : "BRAID_GIN_NET_UNUSED", "socket");
          if (ncclDevCommCreate(comm, &reqs, &dev) != ncclInvalidUsage) return f.fail("a devComm was made");
          if (std::string(ncclGetLastError(comm)).find("BRAID_GIN_NET is") == std::string::npos)
            f.fail(std::string("the refusal: ") + ncclGetLastError(comm));
          (void)n;
        }, 120, gin_over_net("gin-net-choice-host-")) == 0);
}

// ginContextCount 3: three contexts, each its own ncclGinProxyGpuCtx_t in
// ginHandles[c], with its own queues, counters and signals (words
// [c * ginSignalCount, ...) of one array); a put on context c lands on the
// target's context c signal, as 2.28.9's device code reads it.
TEST_CASE("device API GIN: a 2.28.9 client's contexts are apart", "[device][gin]") {
  CHECK(run_ranks_as_threads(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          char* buf = nullptr;
          MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&buf), 4096));
          ncclWindow_t win = nullptr;
          MP_NCCL(f, ncclCommWindowRegister(comm, buf, 4096, &win, NCCL_WIN_COLL_SYMMETRIC));
          ncclDevCommRequirements reqs = {};
          reqs.ginContextCount = 3;
          reqs.ginSignalCount = 2;
          reqs.ginCounterCount = 1;
          ncclDevComm dev = {};
          MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
          if (!win || dev.ginContextCount != 3) return f.fail("three contexts");
          ncclGinProxyGpuCtx_t* ctx[3];
          for (int c = 0; c < 3; ++c) {
            ctx[c] = static_cast<ncclGinProxyGpuCtx_t*>(dev.ginHandles[c]);
            if (!ctx[c] || dev.ginTypes[c] != NCCL_NET_DEVICE_GIN_PROXY || ctx[c]->signals != ctx[0]->signals + 2 * c ||
                (c && (ctx[c]->counters == ctx[0]->counters || ctx[c]->queues == ctx[0]->queues)))
              return f.fail("context " + std::to_string(c));
          }
          // Every rank signals every rank on context (rank % 3), adding its rank + 1, and counts it.
          const int mine = rank % 3;
          for (int peer = 0; peer < n; ++peer)
            if (!post(ctx[mine], peer,
                      build_gfd(ncclGinProxyOpPut | ncclGinProxyOpWithSignalAdd | ncclGinProxyOpWithCounter, 0, 0, 0,
                                0, 0, 0, 1, uint64_t(rank + 1))))
              return f.fail("post");
          if (!wait_at_least(&ctx[mine]->counters[0], uint64_t(n))) f.fail("the context's counter");
          for (int c = 0; c < 3; ++c) {
            uint64_t want = 0;
            for (int r = 0; r < n; ++r) want += r % 3 == c ? uint64_t(r + 1) : 0;
            const bool reached = wait_at_least(&ctx[c]->signals[1], want);
            if (!reached || __atomic_load_n(&ctx[c]->signals[1], __ATOMIC_ACQUIRE) != want ||
                __atomic_load_n(&ctx[c]->signals[0], __ATOMIC_ACQUIRE) != 0)
              f.fail("context " + std::to_string(c) + "'s signal");
          }
          barrier_all(comm, f);
          MP_NCCL(f, ncclDevCommDestroy(comm, &dev));
          MP_NCCL(f, ncclCommWindowDeregister(comm, win));
          MP_NCCL(f, ncclMemFree(buf));
        }) == 0);
}

TEST_CASE("device API GIN: a descriptor naming no window is an asynchronous error on its rank", "[device][gin]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          ncclDevCommRequirements reqs = {};
          reqs.ginSignalCount = 1;
          ncclDevComm dev = {};
          MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
          auto* ctx = static_cast<ncclGinProxyGpuCtx_t*>(dev.ginHandles[0]);
          if (!ctx) return f.fail("no GIN context");
          if (rank == 0) {
            const int op = ncclGinProxyOpPut | ncclGinProxyOpWithSignalInc;
            if (!post(ctx, 1, build_gfd(op, 64, 0, 999, 0, 998, 0, 0, 0))) return f.fail("post");
            const ncclResult_t async = await_async_error(comm, f);
            if (async == ncclSuccess) f.fail("the bad descriptor was never reported");
            if (async != ncclInvalidArgument) f.fail(std::string("async error ") + std::to_string(int(async)));
            if (std::string(ncclGetLastError(comm)).find("names no window") == std::string::npos)
              f.fail(std::string("last error: ") + ncclGetLastError(comm));
          }
          if (ncclDevCommDestroy(comm, &dev) != ncclSuccess) f.fail("destroy after a fault");
          (void)n;
        }) == 0);
}

namespace {

// The last of `nranks` ranks (each set up by `setup`) dies while the
// others hold a devComm with it: their GIN proxies must report it through
// ncclCommGetAsyncError as ncclRemoteError, in bounded time, instead of
// leaving a wait for its signals to hang.  Where `said_by` is given, the
// ranks below `said_by_below` must have heard it from there.  The result
// of reaping the ranks.
int gin_rank_dies(int nranks, const std::function<void(int)>& setup, const char* said_by = nullptr,
                  int said_by_below = 0) {
  std::vector<pid_t> pids = fork_ranks(nranks, 60, 1, [&](int rank, const std::vector<ncclUniqueId>& ids) {
    if (setup) setup(rank);
    Failures f;
    ncclComm_t comm = nullptr;
    MP_NCCL(f, ncclCommInitRank(&comm, nranks, ids[0], rank));
    if (!comm) return 1;
    ncclDevCommRequirements reqs = {};
    reqs.ginSignalCount = 1;
    ncclDevComm dev = {};
    MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
    barrier_all(comm, f);
    if (rank == nranks - 1) raise(SIGKILL);
    const ncclResult_t async = await_async_error(comm, f);
    if (async != ncclRemoteError) f.fail("async error " + std::to_string(int(async)) + ", not ncclRemoteError");
    if (said_by && rank < said_by_below && std::string(ncclGetLastError(comm)).find(said_by) == std::string::npos)
      f.fail(std::string("not said by ") + said_by + ": " + ncclGetLastError(comm));
    MP_NCCL(f, ncclCommAbort(comm));
    return f.count ? 1 : 0;
  });
  if (pids.size() != size_t(nranks)) return 1;
  return reap_with_one_killed(pids, nranks - 1);
}

}  // namespace

TEST_CASE("device API GIN: a rank that dies is reported to the others in bounded time", "[device][gin][faults]") {
  CHECK(gin_rank_dies(3, nullptr) == 0);
}

// The same across hosts over a net plugin: ranks 0 and 1 share no host
// with the rank that dies, so only GIN's connections to it can tell them
// (the transport's error on its pipes).
TEST_CASE("device API GIN: a rank of another host that dies is reported over the net", "[device][gin][faults][net]") {
  CHECK(gin_rank_dies(4, gin_over_net("gin-net-dies-host-"), "GIN receiver, from rank 3", 2) == 0);
}

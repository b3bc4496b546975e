// Device communicators for a client built against NCCL 2.31's device
// headers (src/devapi/abi_v23100.h): 120-byte requirements in, the 248-byte
// ncclDevComm out, for LSA and GIN (its fields here; its traffic in
// test_device_gin_v230.cc), with 2.31's custom GIN stride, its GIN type
// and Compute Fabric Transport requests, and devComms of 2.30's and 2.31's
// layouts live side by side.  The client's structs are written from
// 2.31.2's layout (devapi_v231_client.h).
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "devapi_v231_client.h"
#include "harness.h"

using namespace mp;
using v230::ResourceReq;
using v230::Window230;
using v230::dev_comm_create;
using v230::dev_comm_destroy;
using v231::DevComm231;
using v231::Reqs231;

namespace {

// What a devComm of any kind holds of 2.31's that is not about GIN: no
// Compute Fabric Transport (each rank a CFT team of its own).
bool no_cft(const DevComm231& d) {
  return d.cftRank == 0 && d.cftSize == 1 && d.cftMultimemRank == 0 && d.cftMultimemSize == 1 &&
         d.cftMultimemSize_rcp32 == 0 && d.ucLeId == 0xffffffffu && d.mcLeId == 0xffffffffu && d.cftBarrier.a == 0 &&
         d.cftBarrier.b == 0 && d.cftMultimemBarrier.b == 0;
}

void lsa_v231(int rank, int n, ncclComm_t comm, Failures& f) {
  v230::Handle a2a{};
  ResourceReq a2a_req{}, mine{};
  MP_NCCL(f, v230::lla2a_create_requirement(2, 8, &a2a, &a2a_req));
  uint32_t mine_handle = 0;
  mine.bufferSize = 512;
  mine.outBufferHandle = &mine_handle;
  a2a_req.next = &mine;
  Reqs231 reqs = v231::initializer();
  reqs.v230.lsaBarrierCount = 3;
  reqs.v230.resourceRequirementsList = &a2a_req;
  reqs.cftBarrierCount = 5;  // without cftCaps, ignored (as NCCL)
  DevComm231 dev;
  std::memset(&dev, 0x77, sizeof dev);
  MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
  if (dev.magic != NCCL_API_MAGIC || dev.version != NCCL_VERSION(2, 31, 2) || dev.rank != rank || dev.nRanks != n ||
      dev.lsaRank != rank % dev.lsaSize || n % dev.lsaSize != 0)
    return f.fail("2.31 devComm header and ranks");
  if (!dev.windowTable || !dev.resourceWindow || dev.lsaBarrier.b != 3 || dev.ginConnectionCount != 0 ||
      dev.ginContextCount != 0 || dev.backendIndex != 0 || dev.ginConnectionStride != 0 || dev.ginHandles[0] ||
      !dev.abortFlag || __atomic_load_n(dev.abortFlag, __ATOMIC_ACQUIRE) != 0 || dev.hybridLsaBarrier.b != 0 ||
      !no_cft(dev))
    f.fail("2.31 devComm: table, resources, barriers, GIN, CFT or abortFlag");
  // The inlined window is the 16 bytes the device reads of the window
  // struct (2.30's, with cftFlatRank, 0 without CFT, in its last 4 bytes).
  const auto& window = *static_cast<const Window230*>(dev.resourceWindow);
  int cft_flat_rank = -1;
  std::memcpy(&cft_flat_rank, reinterpret_cast<const char*>(&window) + 84, sizeof cft_flat_rank);
  if (dev.resourceWindow_inlined.lsaFlatBase != window.lsaFlatBase ||
      dev.resourceWindow_inlined.stride4G != window.stride4G ||
      dev.resourceWindow_inlined.mcOffset4K != window.mcOffset4K || cft_flat_rank != 0)
    f.fail("2.31 resourceWindow_inlined, or the window's cftFlatRank");
  const size_t user = size_t(mine_handle) * 128;
  const int lsa = dev.lsaSize, first = rank - dev.lsaRank;
  for (int p = 0; p < lsa; ++p)
    if (v231::resource(dev, p, user)[rank] != 0) f.fail("resource buffer not zeroed");
  barrier_all(comm, f);
  for (int p = 0; p < lsa; ++p) v231::resource(dev, p, user)[rank] = char(10 + rank);
  barrier_all(comm, f);
  for (int r = first; r < first + lsa; ++r)
    if (v231::resource(dev, dev.lsaRank, user)[r] != char(10 + r))
      f.fail("user resource: rank " + std::to_string(r) + "'s store");
  MP_NCCL(f, dev_comm_destroy(comm, &dev));
  if (dev_comm_destroy(comm, &dev) != ncclInvalidArgument) f.fail("destroying a 2.31 devComm twice");
}

// The GIN fields, and where 2.31 puts the devComm's own barriers' signals:
// the user's, then world, rail, LSA, hybrid dense, rail and LSA (NCCL's
// order).  A FULL connection's dense team is the world.
void gin_v231(int, int n, ncclComm_t comm, Failures& f) {
  Reqs231 reqs = v231::initializer();
  reqs.v230.ginConnectionType = v231::kFull;
  reqs.v230.ginContextCount = 3;
  reqs.v230.ginSignalCount = 2;
  reqs.v230.barrierCount = 1;
  reqs.v230.railGinBarrierCount = 1;
  reqs.v230.worldGinBarrierCount = 1;
  reqs.ginType = 2;  // PROXY, by name
  DevComm231 gin{};
  MP_NCCL(f, dev_comm_create(comm, &reqs, &gin));
  const int rails = n / gin.lsaSize;  // the rail team's size
  if (gin.ginConnectionCount != 1 || gin.backendIndex != 0 || gin.ginNetDeviceTypes[0] != 2 /* PROXY */ ||
      gin.ginContextCount != 3 || gin.ginConnectionStride != 1 || gin.ginContextStride != 1 ||
      gin.ginConnectionStride_rcp32 != 0 || !gin.ginStrongLegacySignals || !gin.ginSignalShadows || !no_cft(gin))
    f.fail("2.31 devComm GIN fields");
  if (gin.worldGinBarrier.a != 2 || gin.railGinBarrier.a != uint32_t(2 + n) ||
      gin.hybridDenseGinBarrier.a != uint32_t(2 + n + rails) ||
      gin.hybridRailGinBarrier.a != uint32_t(2 + 2 * n + rails) || gin.ginSignalCount != 2 + 2 * n + 2 * rails)
    f.fail("2.31 GIN barriers' signals: world " + std::to_string(gin.worldGinBarrier.a) + ", dense " +
           std::to_string(gin.hybridDenseGinBarrier.a) + ", of " + std::to_string(gin.ginSignalCount));
  const auto* ctx = static_cast<const v230::ProxyCtx230*>(gin.ginHandles[0]);
  for (int c = 0; ctx && c < 3; ++c)
    if (ctx[c].nranks != n || !ctx[c].signalOffsets || !ctx[c].lastVisibleGet)
      f.fail("2.31 GIN context " + std::to_string(c));
  MP_NCCL(f, dev_comm_destroy(comm, &gin));

  // A custom stride of 2: GIN barriers span the ranks 2 apart (n / 2 of
  // them), so the hybrid dense barrier has n / 2 signals.
  if (n % 2 == 0 && gin.lsaSize % 2 == 0) {
    Reqs231 strided = v231::initializer();
    strided.v230.ginConnectionType = v231::kCustomStride;
    strided.ginCustomStride = 2;
    strided.v230.barrierCount = 1;
    DevComm231 d{};
    MP_NCCL(f, dev_comm_create(comm, &strided, &d));
    if (d.ginContextStride != 2 || d.ginConnectionStride != 1 || d.hybridDenseGinBarrier.a != 0 ||
        d.hybridRailGinBarrier.a != uint32_t(n / 2) || d.ginSignalCount != n / 2 + rails)
      f.fail("custom stride 2: context stride " + std::to_string(d.ginContextStride) + ", hybrid rail barrier at " +
             std::to_string(d.hybridRailGinBarrier.a));
    MP_NCCL(f, dev_comm_destroy(comm, &d));
  }
}

// What braid cannot serve, or NCCL refuses, refused with the reason on
// every rank; the communicator works afterwards.
void refusals_v231(int, int n, ncclComm_t comm, Failures& f) {
  auto refused = [&](const void* r, ncclResult_t want, const char* says, const char* what) {
    DevComm231 d{};
    if (dev_comm_create(comm, r, &d) != want) f.fail(std::string(what) + ": not refused as expected");
    if (std::string(ncclGetLastError(comm)).find(says) == std::string::npos)
      f.fail(std::string(what) + ": message " + ncclGetLastError(comm));
  };
  Reqs231 cft = v231::initializer();
  cft.cftCaps = 1;  // NCCL_CFT
  refused(&cft, ncclInvalidArgument, "Compute Fabric Transport", "cftCaps");
  Reqs231 gdaki = v231::initializer();
  gdaki.v230.ginConnectionType = v231::kFull;
  gdaki.ginType = 3;
  refused(&gdaki, ncclInvalidUsage, "PROXY", "ginType GDAKI");
  for (int stride : {0, -2, n + 1}) {
    Reqs231 strided = v231::initializer();
    strided.v230.ginConnectionType = v231::kCustomStride;
    strided.ginCustomStride = stride;
    refused(&strided, ncclInvalidUsage, "ginCustomStride", "a bad custom stride");
  }
  v230::Reqs230 old = v230::initializer();  // 2.30's headers have no CUSTOM_STRIDE
  old.ginConnectionType = v231::kCustomStride;
  refused(&old, ncclInvalidArgument, "2.30's headers", "CUSTOM_STRIDE from a 2.30 kernel");
  float in = 1, out = 0;
  MP_NCCL(f, ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr));
  if (out != float(n)) f.fail("allreduce after the refusals");
}

// A 2.30 devComm, a 2.31 one and a 2.32.3 one live at once (one program,
// kernels of several headers): each is destroyed by its own layout,
// whichever goes first.
void both_layouts(int, int, ncclComm_t comm, Failures& f) {
  v230::Reqs230 reqs = v230::initializer();
  reqs.ginConnectionType = v231::kFull;
  reqs.ginSignalCount = 1;
  v231::GinDevComm old(v231::Abi::kV230), current(v231::Abi::kV231), v232(v231::Abi::kV232);
  MP_NCCL(f, old.create(comm, reqs));
  MP_NCCL(f, current.create(comm, reqs));
  MP_NCCL(f, v232.create(comm, reqs));
  if (!old.contexts() || !current.contexts() || old.contexts() == current.contexts() ||
      v232.contexts() == current.contexts())
    return f.fail("three devComms, three sets of GIN contexts");
  MP_NCCL(f, current.destroy(comm));
  if (current.destroy(comm) != ncclInvalidArgument) f.fail("the 2.31 devComm destroyed twice");
  MP_NCCL(f, old.destroy(comm));
  MP_NCCL(f, v232.destroy(comm));
}

// A kernel of 2.32.0-2.32.3's headers gets 2.31's devComm with 80-byte
// GIN contexts, none promising that any signal flushes every put, and
// 96-byte windows (the registration flags at 36, no CFT endpoint at 88).
// 120 bytes that say 2.32.4 or later come from older headers with a later
// nccl.h: GIN is refused (72- or 80-byte contexts?), LSA served.
void v232_client(int, int n, ncclComm_t comm, Failures& f) {
  Reqs231 reqs = v231::initializer();
  reqs.v230.version = NCCL_VERSION(2, 32, 3);
  reqs.v230.ginConnectionType = v231::kFull;
  reqs.v230.ginContextCount = 3;
  reqs.v230.ginSignalCount = 2;
  DevComm231 dev{};
  MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
  const auto* ctx = static_cast<const v231::ProxyCtx232*>(dev.ginHandles[0]);
  for (int c = 0; ctx && c < 3; ++c)
    if (ctx[c].nranks != n || ctx[c].flushesAllPutsOnAnySignal || !ctx[c].lastVisibleGet ||
        dev.ginSignalCount != 2 || ctx[c].signals != ctx[0].signals + 2 * c)
      f.fail("2.32 GIN context " + std::to_string(c));
  auto* resources = static_cast<ncclWindow_t>(dev.resourceWindow);
  if (v231::window_le_id_base(resources) != 0xffffffffu || v231::window_flags(resources) != NCCL_WIN_COLL_SYMMETRIC)
    f.fail("the resource window's 2.32 fields");
  MP_NCCL(f, dev_comm_destroy(comm, &dev));
  void* buf = nullptr;
  ncclWindow_t win = nullptr;
  MP_NCCL(f, ncclMemAlloc(&buf, 4096));
  MP_NCCL(f, ncclCommWindowRegister(comm, buf, 4096, &win, NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING));
  if (win && (v231::window_flags(win) != (NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING) ||
              v231::window_le_id_base(win) != 0xffffffffu))
    f.fail("a user window's 2.32 fields");
  MP_NCCL(f, ncclCommWindowDeregister(comm, win));
  MP_NCCL(f, ncclMemFree(buf));

  Reqs231 mixed = v231::initializer();
  mixed.v230.version = NCCL_VERSION(2, 32, 6);
  mixed.v230.ginConnectionType = v231::kFull;
  if (dev_comm_create(comm, &mixed, &dev) != ncclInvalidUsage) f.fail("GIN for 2.32.6 in 120 bytes not refused");
  if (std::string(ncclGetLastError(comm)).find("nccl.h of its device headers' release") == std::string::npos)
    f.fail(std::string("the mixed build's message: ") + ncclGetLastError(comm));
  mixed.v230.ginConnectionType = v231::kNone;
  mixed.v230.lsaBarrierCount = 1;
  MP_NCCL(f, dev_comm_create(comm, &mixed, &dev));
  if (dev.lsaBarrier.b != 1 || dev.ginConnectionCount != 0) f.fail("LSA for 2.32.6 in 120 bytes");
  MP_NCCL(f, dev_comm_destroy(comm, &dev));
}

// Without a Compute Fabric Transport each rank is a CFT team of its own,
// and the logical-endpoint queries are refused, as NCCL answers without
// one; a hierarchical team over LSA teams of several ranks cannot exist.
void cft_queries(int, int, ncclComm_t comm, Failures& f) {
  auto is_self = [](v231::Team t) { return t.nRanks == 1 && t.rank == 0 && t.stride == 1; };
  if (!is_self(v231::team_cft(comm, 0)) || !is_self(v231::team_cft(comm, 1)) ||
      !is_self(v231::team_cft_multimem(comm)))
    f.fail("the CFT teams are not this rank alone");
  Reqs231 reqs = v231::initializer();
  DevComm231 dev{};
  MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
  const v231::Team lsa_hier = v231::team_cft(comm, 2);
  if (dev.lsaSize == 1 ? !is_self(lsa_hier) : lsa_hier.rank != -1) f.fail("the CFT team over LSA teams");
  if (dev.lsaSize > 1 && std::string(ncclGetLastError(comm)).find("HIER_LSA") == std::string::npos)
    f.fail(std::string("HIER_LSA message: ") + ncclGetLastError(comm));
  if (v231::team_cft(comm, 7).rank != -1 || v231::team_cft(nullptr, 0).rank != -1) f.fail("a bad mode or comm");
  MP_NCCL(f, dev_comm_destroy(comm, &dev));
  ncclWindow_t win = nullptr;
  void* buf = nullptr;
  MP_NCCL(f, ncclMemAlloc(&buf, 4096));
  MP_NCCL(f, ncclCommWindowRegister(comm, buf, 4096, &win, NCCL_WIN_COLL_SYMMETRIC));
  uint32_t le = 7;
  size_t at = 7;
  if (v231::multimem_le_info(win, 0, &le, &at) != ncclInvalidArgument ||
      v231::cft_le_info(win, 0, 0, v231::Team{1, 0, 1}, &le, &at) != ncclInvalidArgument ||
      v231::peer_le_info(win, 0, 0, &le, &at) != ncclInvalidArgument)
    f.fail("a logical-endpoint query was not refused");
  if (std::string(ncclGetLastError(nullptr)).find("Compute Fabric Transport") == std::string::npos)
    f.fail(std::string("endpoint message: ") + ncclGetLastError(nullptr));
  MP_NCCL(f, ncclCommWindowDeregister(comm, win));
  MP_NCCL(f, ncclMemFree(buf));
}

}  // namespace

TEST_CASE("device API 2.31: CFT teams and endpoint queries say there is no CFT", "[device][devcomm][v231]") {
  CHECK(run_ranks_as_threads(2, cft_queries) == 0);
  CHECK(run_ranks_as_processes(2, cft_queries, 60, [](int rank) {  // two emulated hosts of 1 rank
          setenv("BRAID_HOSTID", ("v231-cft-" + std::to_string(rank)).c_str(), 1);
        }) == 0);
}

TEST_CASE("device API 2.31: 120-byte requirements get a 2.31 devComm for LSA and GIN", "[device][devcomm][v231]") {
  for (const RankBody& body : {RankBody(lsa_v231), RankBody(gin_v231)}) {
    CHECK(run_ranks_as_threads(4, body) == 0);
    CHECK(run_ranks_as_processes(2, body) == 0);
    CHECK(run_ranks_as_processes(4, body, 60, [](int rank) {  // two emulated hosts of 2 ranks
            setenv("BRAID_HOSTID", ("v231-host-" + std::to_string(rank / 2)).c_str(), 1);
          }) == 0);
  }
}

TEST_CASE("device API 2.31: CFT, other GIN types and bad strides are refused", "[device][devcomm][v231]") {
  CHECK(run_ranks_as_threads(3, refusals_v231) == 0);
}

TEST_CASE("device API 2.32: 2.32.3's kernels get 80-byte GIN contexts and 96-byte windows, later ones no GIN",
          "[device][devcomm][v232]") {
  CHECK(run_ranks_as_threads(3, v232_client) == 0);
  CHECK(run_ranks_as_processes(2, v232_client) == 0);
}

TEST_CASE("device API 2.31: devComms of 2.30's, 2.31's and 2.32's layouts live side by side",
          "[device][devcomm][v231]") {
  CHECK(run_ranks_as_threads(2, both_layouts) == 0);
  CHECK(run_ranks_as_processes(2, both_layouts) == 0);
}

// Inside a group, a 2.31 client's 120 bytes are copied at the call, all
// of them: a custom stride set past 2.30's 96 bytes still counts.
TEST_CASE("device API 2.31: a devComm created inside a group from requirements gone by ncclGroupEnd",
          "[device][devcomm][v231][group]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          DevComm231 dev{};
          MP_NCCL(f, ncclGroupStart());
          {
            Reqs231 reqs = v231::initializer();
            reqs.v230.ginConnectionType = v231::kCustomStride;
            reqs.ginCustomStride = 2;
            reqs.v230.barrierCount = 1;
            MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
            std::memset(&reqs, 0, sizeof reqs);  // gone before the group ends
          }
          if (dev.magic != 0) f.fail("the devComm was written before ncclGroupEnd");
          MP_NCCL(f, ncclGroupEnd());
          if (dev.magic != NCCL_API_MAGIC || dev.rank != rank || dev.nRanks != n || dev.ginContextStride != 2)
            f.fail("2.31 devComm made at ncclGroupEnd");
          MP_NCCL(f, dev_comm_destroy(comm, &dev));
        }) == 0);
}

// Device communicators for a client built against NCCL 2.30's device
// headers (src/devapi/abi_v23000.h): versioned requirements in, the 240-byte
// ncclDevComm out, served for LSA (windows, LSA barriers, LL AlltoAll,
// the user's resources); 2.30's GIN refused with the reason.  NVIDIA's
// installed headers are 2.28.9's, so the client's structs are written here
// from 2.30.7's layout (offsets measured against NCCL's 2.30.7 headers).
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "harness.h"

using namespace mp;

namespace {

struct ResourceReq {  // ncclDevResourceRequirements (unchanged since 2.28)
  ResourceReq* next;
  size_t bufferSize, bufferAlign;
  uint32_t* outBufferHandle;
  int ginSignalCount, ginCounterCount;
  uint32_t *outGinSignalStart, *outGinCounterStart;
};
struct Reqs230 {  // ncclDevCommRequirements, 2.30
  size_t size;
  uint32_t magic, version;
  ResourceReq* resourceRequirementsList;
  void* teamRequirementsList;
  bool lsaMultimem;
  int barrierCount, lsaBarrierCount, railGinBarrierCount;
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
  bool ginForceEnable;
  int ginContextCount, ginSignalCount, ginCounterCount;
  int ginConnectionType;  // NONE 0, FULL 1, RAIL 2
  bool ginExclusiveContexts;
  int ginQueueDepth, ginTrafficClass, worldGinBarrierCount;
  bool ginStrongSignalsRequired, ginVaSignalsRequired;
};
struct Handle {
  uint32_t a, b;
};
struct DevComm230 {  // ncclDevComm, 2.30
  uint32_t magic, version;
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;
  void* windowTable;
  void* resourceWindow;
  struct {
    char reserved1[8];
    char* lsaFlatBase;
    char reserved2[8];
    uint32_t stride4G, mcOffset4K;
    char reserved3[32];
  } resourceWindow_inlined;
  Handle hybridWorldGinBarrier;
  void* lsaMultimem;
  Handle lsaBarrier, railGinBarrier;
  uint8_t ginConnectionCount;
  uint8_t ginNetDeviceTypes[4];
  void* ginHandles[4];
  int ginSignalCount, ginCounterCount;
  uint64_t* ginSignalShadows;
  uint32_t ginContextCount;
  bool ginConnectionsRailed, ginStrongLegacySignals, ginContextsRailed;
  uint32_t* abortFlag;
  Handle hybridLsaBarrier, hybridRailGinBarrier, worldGinBarrier;
};
static_assert(sizeof(Reqs230) == 96 && offsetof(Reqs230, worldGinBarrierCount) == 88);
static_assert(sizeof(DevComm230) == 240 && offsetof(DevComm230, lsaBarrier) == 128 &&
              offsetof(DevComm230, abortFlag) == 208);

Reqs230 initializer() {  // NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER of 2.30.7's headers
  Reqs230 r{};
  r.size = sizeof(r);
  r.magic = NCCL_API_MAGIC;
  r.version = NCCL_VERSION(2, 30, 7);
  r.ginContextCount = 4;
  r.ginTrafficClass = NCCL_CONFIG_UNDEF_INT;
  r.ginStrongSignalsRequired = r.ginVaSignalsRequired = true;
  return r;
}

extern "C" ncclResult_t ncclDevCommCreate(ncclComm_t, const void*, void*);
extern "C" ncclResult_t ncclDevCommDestroy(ncclComm_t, const void*);
extern "C" ncclResult_t ncclLLA2ACreateRequirement(int, int, Handle*, ResourceReq*);

// LSA rank `peer`'s copy of byte `offset` of the resource buffer, by the
// headers' arithmetic on the inlined window.
char* resource(const DevComm230& d, int peer, size_t offset) {
  const uint64_t base = reinterpret_cast<uint64_t>(d.resourceWindow_inlined.lsaFlatBase);
  return reinterpret_cast<char*>(base + (uint64_t(uint32_t(peer) * d.resourceWindow_inlined.stride4G) << 32) + offset);
}

void serve_v230(int rank, int n, ncclComm_t comm, Failures& f) {
  Handle a2a{};
  ResourceReq a2a_req{}, mine{};
  MP_NCCL(f, ncclLLA2ACreateRequirement(2, 8, &a2a, &a2a_req));
  uint32_t mine_handle = 0;
  mine.bufferSize = 512;
  mine.outBufferHandle = &mine_handle;
  a2a_req.next = &mine;
  Reqs230 reqs = initializer();
  reqs.lsaBarrierCount = 3;
  reqs.resourceRequirementsList = &a2a_req;
  DevComm230 dev;
  std::memset(&dev, 0x77, sizeof dev);
  MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
  if (dev.magic != NCCL_API_MAGIC || dev.version != reqs.version || dev.rank != rank || dev.nRanks != n ||
      dev.lsaSize != n || dev.lsaRank != rank)
    f.fail("2.30 devComm header and ranks");
  if (!dev.windowTable || !dev.resourceWindow || dev.lsaBarrier.b != 3 || dev.ginConnectionCount != 0 ||
      dev.ginContextCount != 0 || dev.abortFlag != nullptr || dev.hybridLsaBarrier.b != 0)
    f.fail("2.30 devComm: table, resources, barriers, GIN or abortFlag");
  // The inlined window is the window struct's first 64 bytes (host memory here).
  if (std::memcmp(&dev.resourceWindow_inlined, dev.resourceWindow, sizeof dev.resourceWindow_inlined) != 0)
    f.fail("resourceWindow_inlined is not the window's first 64 bytes");
  const size_t user = size_t(mine_handle) * 128;
  for (int p = 0; p < n; ++p)
    if (resource(dev, p, user)[rank] != 0) f.fail("resource buffer not zeroed");
  barrier_all(comm, f);
  for (int p = 0; p < n; ++p) resource(dev, p, user)[rank] = char(10 + rank);
  barrier_all(comm, f);
  for (int r = 0; r < n; ++r)
    if (resource(dev, rank, user)[r] != char(10 + r)) f.fail("user resource: rank " + std::to_string(r) + "'s store");
  MP_NCCL(f, ncclDevCommDestroy(comm, &dev));
  if (ncclDevCommDestroy(comm, &dev) != ncclInvalidArgument) f.fail("destroying a 2.30 devComm twice");

  // 2.30's GIN: resources without a connection type are NCCL's invalid
  // argument; with one, not served yet.  2.29's requirements are refused.
  auto refused = [&](const Reqs230& r, ncclResult_t want, const char* says, const char* what) {
    DevComm230 d{};
    if (ncclDevCommCreate(comm, &r, &d) != want) f.fail(std::string(what) + ": not refused as expected");
    if (std::string(ncclGetLastError(comm)).find(says) == std::string::npos)
      f.fail(std::string(what) + ": message " + ncclGetLastError(comm));
  };
  Reqs230 signals = initializer();
  signals.ginSignalCount = 2;
  refused(signals, ncclInvalidArgument, "NCCL_GIN_CONNECTION_NONE", "GIN signals without a connection");
  signals.ginConnectionType = 1;
  refused(signals, ncclInvalidUsage, "2.30", "GIN signals with a full connection");
  Reqs230 old = initializer();
  old.version = NCCL_VERSION(2, 29, 7);
  refused(old, ncclInvalidUsage, "2.29", "2.29 requirements");
  float in = 1, out = 0;
  MP_NCCL(f, ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr));
  if (out != float(n)) f.fail("allreduce after the refusals");
}

}  // namespace

TEST_CASE("device API 2.30: versioned requirements get a 2.30 devComm for LSA and 2.30 GIN is refused",
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
            MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
            std::memset(&reqs, 0, sizeof reqs);  // gone before the group ends
            std::memset(&mine, 0, sizeof mine);
          }
          if (dev.magic != 0) f.fail("the devComm was written before ncclGroupEnd");
          MP_NCCL(f, ncclGroupEnd());
          if (dev.magic != NCCL_API_MAGIC || dev.rank != rank || dev.nRanks != n || dev.lsaBarrier.b != 2)
            f.fail("2.30 devComm made at ncclGroupEnd");
          if (handle == 999) f.fail("the copied requirement did not write the caller's handle");
          MP_NCCL(f, ncclDevCommDestroy(comm, &dev));
        }) == 0);
}

// Device communicators for a client built against NCCL 2.29's device
// headers (src/devapi/abi_v22900.h): versioned requirements of 2.29.2's 72
// bytes or 2.29.7's 88, served for LSA in 2.29's devComm (2.28.9's 200
// bytes; 224 from 2.29.5), GIN refused, as NCCL's compatibility layer
// serves them.  The client's structs are 2.30's prefixes
// (devapi_v230_client.h), sized as 2.29's headers size them.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "devapi_v230_client.h"
#include "harness.h"

using namespace mp;
using namespace v230;

namespace {

// 2.29's devComm: the rank first, 2.28.9's layout; from 2.29.5 four more
// members (abortFlag last, at 216).
struct DevComm229 {
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;
  void* windowTable;
  void* resourceWindow;
  char resourceWindow_inlined[72];
  void* lsaMultimem;
  Handle lsaBarrier, railGinBarrier;
  uint8_t ginConnectionCount;
  uint8_t ginNetDeviceTypes[4];
  void* ginHandles[4];
  uint32_t ginSignalBase;
  int ginSignalCount;
  uint32_t ginCounterBase;
  int ginCounterCount;
  uint64_t* ginSignalShadows;
  uint32_t ginContextCount, ginContextBase;
  bool ginIsRailed;
  uint32_t* abortFlag;
};
static_assert(offsetof(DevComm229, lsaBarrier) == 120 && offsetof(DevComm229, ginSignalShadows) == 192 &&
              offsetof(DevComm229, abortFlag) == 216 && sizeof(DevComm229) == 224);

Reqs230 reqs229(int patch) {
  Reqs230 r = initializer();
  r.size = patch >= 5 ? 88 : 72;
  r.version = NCCL_VERSION(2, 29, patch);
  return r;
}

void serve_v229(int rank, int n, ncclComm_t comm, Failures& f) {
  for (int patch : {2, 7}) {
    const std::string v = "2.29." + std::to_string(patch) + ": ";
    uint32_t mine_handle = 999;
    ResourceReq mine{};
    mine.bufferSize = 256;
    mine.outBufferHandle = &mine_handle;
    Reqs230 reqs = reqs229(patch);
    reqs.lsaBarrierCount = 2;
    reqs.barrierCount = 3;  // 2.29.2-2.29.3: LSA barriers (NCCL's layer); from 2.29.4 GIN, refused below
    if (patch >= 5) reqs.barrierCount = 0;
    reqs.resourceRequirementsList = &mine;
    DevComm229 dev;
    std::memset(&dev, 0x77, sizeof dev);
    MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
    if (dev.rank != rank || dev.nRanks != n || dev.lsaSize != n || dev.lsaRank != rank || !dev.windowTable ||
        !dev.resourceWindow || mine_handle == 999)
      f.fail(v + "devComm ranks, table or resources");
    if (dev.lsaBarrier.b != uint32_t(patch >= 5 ? 2 : 3))  // {bufHandle, nBarriers}
      f.fail(v + "LSA barriers " + std::to_string(dev.lsaBarrier.b));
    if (dev.ginConnectionCount != 0 || dev.ginHandles[0] != nullptr || dev.ginSignalCount != 0)
      f.fail(v + "a GIN context for a 2.29 client");
    // abortFlag: braid's word, down while the communicator is well (device_liveness.h); read atomically,
    // as a peer's exit at teardown may raise it from the watch thread.
    const bool wide_written =
        dev.ginContextCount == 0 && dev.abortFlag && __atomic_load_n(dev.abortFlag, __ATOMIC_ACQUIRE) == 0;
    if (patch >= 5 && !wide_written) f.fail(v + "2.29.5's members past 200 bytes");
    if (patch < 5 && dev.ginContextCount != 0x77777777) f.fail(v + "written past 2.29.2's 200 bytes");
    MP_NCCL(f, dev_comm_destroy(comm, &dev));

    // GIN, which NCCL's layer does not serve 2.29 clients either.
    Reqs230 gin = reqs229(patch);
    gin.ginSignalCount = 1;
    if (patch >= 5) gin.ginConnectionType = 1;
    DevComm229 none{};
    if (dev_comm_create(comm, &gin, &none) != ncclInvalidUsage) f.fail(v + "GIN was not refused");
    if (std::string(ncclGetLastError(comm)).find("rebuild it") == std::string::npos)
      f.fail(v + "message: " + ncclGetLastError(comm));
    if (patch >= 5) {  // resources without a connection: NCCL's invalid argument
      gin.ginConnectionType = 0;
      if (dev_comm_create(comm, &gin, &none) != ncclInvalidArgument) f.fail(v + "resources without a connection");
    }
  }
  Reqs230 odd = reqs229(7);
  odd.size = 72;  // 2.29.2's size with 2.29.7's version
  DevComm229 none{};
  if (dev_comm_create(comm, &odd, &none) != ncclInvalidUsage) f.fail("a 2.29.7 version on 72 bytes");
  Reqs230 unknown = reqs229(4);  // no release NCCL serves either
  if (dev_comm_create(comm, &unknown, &none) != ncclInvalidUsage) f.fail("2.29.4");
  if (std::string(ncclGetLastError(comm)).find("2.29.5-2.29.7") == std::string::npos)
    f.fail(std::string("2.29.4's message: ") + ncclGetLastError(comm));
  float in = 1, out = 0;
  MP_NCCL(f, ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr));
  if (out != float(n)) f.fail("allreduce after the 2.29 devComms");
}

}  // namespace

TEST_CASE("device API 2.29: versioned requirements get 2.29's devComm for LSA and no GIN", "[device][devcomm][v229]") {
  CHECK(run_ranks_as_threads(3, serve_v229) == 0);
  CHECK(run_ranks_as_processes(2, serve_v229) == 0);
}

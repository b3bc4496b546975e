// 2.30's devComm made from 2.31's (src/devapi/abi_v23100.h): every field
// by name, as NCCL's v23000 entry translates it, and what 2.30's layout
// has that 2.31's does not.
#include <catch2/catch.hpp>

#include <cstring>

#include "src/devapi/abi_v23100.h"

namespace v30 = braid::devapi::v23000;
namespace v31 = braid::devapi::v23100;

namespace {

template <typename T>
T* ptr(uintptr_t v) {
  return reinterpret_cast<T*>(v);
}

}  // namespace

TEST_CASE("device API 2.31: a 2.31 devComm translates to 2.30's layout field by field", "[devapi][v231]") {
  v31::DevComm d;
  std::memset(&d, 0, sizeof d);
  d.magic = 0xcafebeef;
  d.version = 23102;
  d.rank = 5, d.nRanks = 8, d.nRanks_rcp32 = 111, d.lsaRank = 1, d.lsaSize = 4, d.lsaSize_rcp32 = 222;
  d.windowTable = ptr<braid::devapi::v22809::DevCommWindowTable>(0x1000);
  d.resourceWindow = ptr<braid::devapi::v22809::WindowVidmem>(0x2000);
  d.resourceWindow_inlined = {ptr<char>(0x3000), 7, 9};
  d.hybridDenseGinBarrier = {11, 0};
  d.lsaMultimem.mcBasePtr = ptr<void>(0x4000);
  d.lsaBarrier = {12, 13};
  d.railGinBarrier = {14, 0};
  d.ginConnectionCount = 1;
  d.backendIndex = 0;
  d.ginNetDeviceTypes[0] = 2;
  d.ginHandles[0] = ptr<void>(0x5000);
  d.ginSignalCount = 15, d.ginCounterCount = 16;
  d.ginSignalShadows = ptr<uint64_t>(0x6000);
  d.ginContextCount = 17;
  d.ginConnectionStride = 1, d.ginContextStride = 4;
  d.ginStrongLegacySignals = true;
  d.abortFlag = ptr<uint32_t>(0x7000);
  d.hybridLsaBarrier = {18, 19};
  d.hybridRailGinBarrier = {20, 0};
  d.worldGinBarrier = {21, 0};
  d.cftSize = 1;
  d.ucLeId = d.mcLeId = v31::kLeIdInvalid;

  const v30::DevComm old = v31::to_v23000(d, /*rail_asked=*/true);
  CHECK(old.magic == 0xcafebeef);
  CHECK(old.version == 23102);
  CHECK((old.rank == 5 && old.nRanks == 8 && old.nRanks_rcp32 == 111));
  CHECK((old.lsaRank == 1 && old.lsaSize == 4 && old.lsaSize_rcp32 == 222));
  CHECK(old.windowTable == d.windowTable);
  CHECK(old.resourceWindow == d.resourceWindow);
  // The inlined window: the three fields the device reads, at 2.30's
  // offsets, and zero around them.
  CHECK(old.resourceWindow_inlined.lsaFlatBase == ptr<char>(0x3000));
  CHECK(old.resourceWindow_inlined.stride4G == 7);
  CHECK(old.resourceWindow_inlined.mcOffset4K == 9);
  CHECK((old.resourceWindow_inlined.reserved1[0] == 0 && old.resourceWindow_inlined.reserved3[31] == 0));
  CHECK(old.hybridWorldGinBarrier.signal0 == 11);
  CHECK(old.lsaMultimem.mcBasePtr == ptr<void>(0x4000));
  CHECK((old.lsaBarrier.bufHandle == 12 && old.lsaBarrier.nBarriers == 13));
  CHECK(old.railGinBarrier.signal0 == 14);
  CHECK((old.ginConnectionCount == 1 && old.ginNetDeviceTypes[0] == 2 && old.ginHandles[0] == ptr<void>(0x5000)));
  CHECK((old.ginSignalCount == 15 && old.ginCounterCount == 16 && old.ginSignalShadows == ptr<uint64_t>(0x6000)));
  CHECK(old.ginContextCount == 17);
  CHECK(!old.ginConnectionsRailed);  // stride 1: every rank connected
  CHECK(old.ginStrongLegacySignals);
  CHECK(old.ginContextsRailed);  // a RAIL connection was asked for
  CHECK(old.abortFlag == ptr<uint32_t>(0x7000));
  CHECK((old.hybridLsaBarrier.bufHandle == 18 && old.hybridLsaBarrier.nBarriers == 19));
  CHECK(old.hybridRailGinBarrier.signal0 == 20);
  CHECK(old.worldGinBarrier.signal0 == 21);

  // A RAIL request with one rank per host has a rail stride of 1: still
  // railed for 2.30's barriers, which then use the rail barrier braid
  // allocated, not the dense one it did not.  Without GIN, not railed.
  d.ginContextStride = 1;
  CHECK(v31::to_v23000(d, true).ginContextsRailed);
  CHECK(!v31::to_v23000(d, false).ginContextsRailed);
  d.ginConnectionCount = 0;
  CHECK(!v31::to_v23000(d, true).ginContextsRailed);
}

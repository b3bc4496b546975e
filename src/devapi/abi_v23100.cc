#include "src/devapi/abi_v23100.h"

#include <cstring>

namespace braid::devapi::v23100 {

v23000::DevComm to_v23000(const DevComm& d, bool rail_asked) {
  v23000::DevComm old{};
  old.magic = d.magic;
  old.version = d.version;
  old.rank = d.rank;
  old.nRanks = d.nRanks;
  old.nRanks_rcp32 = d.nRanks_rcp32;
  old.lsaRank = d.lsaRank;
  old.lsaSize = d.lsaSize;
  old.lsaSize_rcp32 = d.lsaSize_rcp32;
  old.windowTable = d.windowTable;
  old.resourceWindow = d.resourceWindow;
  old.resourceWindow_inlined.lsaFlatBase = d.resourceWindow_inlined.lsaFlatBase;
  old.resourceWindow_inlined.stride4G = d.resourceWindow_inlined.stride4G;
  old.resourceWindow_inlined.mcOffset4K = d.resourceWindow_inlined.mcOffset4K;
  old.hybridWorldGinBarrier = d.hybridDenseGinBarrier;
  old.lsaMultimem = d.lsaMultimem;
  old.lsaBarrier = d.lsaBarrier;
  old.railGinBarrier = d.railGinBarrier;
  old.ginConnectionCount = d.ginConnectionCount;
  std::memcpy(old.ginNetDeviceTypes, d.ginNetDeviceTypes, sizeof old.ginNetDeviceTypes);
  std::memcpy(old.ginHandles, d.ginHandles, sizeof old.ginHandles);
  old.ginSignalCount = d.ginSignalCount;
  old.ginCounterCount = d.ginCounterCount;
  old.ginSignalShadows = d.ginSignalShadows;
  old.ginContextCount = d.ginContextCount;
  old.ginConnectionsRailed = d.ginConnectionStride > 1;
  old.ginStrongLegacySignals = d.ginStrongLegacySignals;
  old.ginContextsRailed = d.ginConnectionCount > 0 && rail_asked;
  old.abortFlag = d.abortFlag;
  old.hybridLsaBarrier = d.hybridLsaBarrier;
  old.hybridRailGinBarrier = d.hybridRailGinBarrier;
  old.worldGinBarrier = d.worldGinBarrier;
  return old;
}

}  // namespace braid::devapi::v23100

// NCCL 2.30's device API, the bytes that changed from 2.28.9's
// (src/devapi/abi_v22809.h), as NCCL's v23000 compatibility layer serves
// every client built against 2.30.0 and later headers.
//
// 2.30 put a versioned header in front of the requirements (size, then
// NCCL_API_MAGIC and the NCCL_VERSION_CODE of the client's <nccl.h>) and
// added GIN fields; ncclDevComm grew to 240 bytes and starts with magic and
// version; its inlined resource window is a 64-byte subset of the window
// struct (lsaFlatBase, stride4G and mcOffset4K at the window's offsets);
// the window struct grew to 88 bytes (multi-segment GIN fields).  Resource
// requirements, teams, barrier and LL AlltoAll handles are unchanged.
// Sizes and offsets were measured by compiling a host probe against NCCL's
// headers at 2.30.7 (github NVIDIA/nccl, src/include/nccl_device); NVIDIA's
// installed headers here are 2.28.9's, so the numbers are pinned below.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/devapi/abi_v22809.h"

namespace braid::devapi::v23000 {

constexpr uint32_t kApiMagic = 0xcafebeef;  // NCCL_API_MAGIC
constexpr int kMaxGinConnections = 4;       // NCCL_GIN_MAX_CONNECTIONS

enum GinConnectionType : int {  // ncclGinConnectionType_t
  kGinConnectionNone = 0,
  kGinConnectionFull = 1,
  kGinConnectionRail = 2,
};

struct DevCommRequirements {  // ncclDevCommRequirements (core.h)
  size_t size;
  uint32_t magic;
  uint32_t version;
  v22809::DevResourceRequirements* resourceRequirementsList;
  v22809::TeamRequirements* teamRequirementsList;
  bool lsaMultimem;
  int barrierCount;
  int lsaBarrierCount;
  int railGinBarrierCount;
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
  bool ginForceEnable;
  int ginContextCount;
  int ginSignalCount;
  int ginCounterCount;
  GinConnectionType ginConnectionType;
  bool ginExclusiveContexts;
  int ginQueueDepth;
  int ginTrafficClass;
  int worldGinBarrierCount;
  bool ginStrongSignalsRequired;
  bool ginVaSignalsRequired;
};

// ncclWindow_vidmem: 2.28.9's 72 bytes, then the multi-segment GIN fields.
// A window of one segment is put through ginWins and ginOffset4K, as in
// 2.28.9, and its segment array is never read.
struct WindowVidmem {
  v22809::WindowVidmem v22809;
  void* ginMultiSegmentWins;
  int numSegments;
  int cftFlatRank;  // 2.31's (0: no Compute Fabric Transport); 2.30's padding
};

struct ResourceWindow {  // ncclResourceWindow_vidmem_t: the window's first 64 bytes
  char reserved1[8];
  char* lsaFlatBase;
  char reserved2[8];
  uint32_t stride4G;
  uint32_t mcOffset4K;
  char reserved3[32];
};

struct DevComm {  // ncclDevComm (impl/comm__types.h)
  uint32_t magic;
  uint32_t version;
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;
  v22809::DevCommWindowTable* windowTable;
  v22809::WindowVidmem* resourceWindow;
  ResourceWindow resourceWindow_inlined;
  v22809::GinBarrierHandle hybridWorldGinBarrier;
  v22809::MultimemHandle lsaMultimem;
  v22809::LsaBarrierHandle lsaBarrier;
  v22809::GinBarrierHandle railGinBarrier;
  uint8_t ginConnectionCount;
  uint8_t ginNetDeviceTypes[kMaxGinConnections];
  void* ginHandles[kMaxGinConnections];
  int ginSignalCount;
  int ginCounterCount;
  uint64_t* ginSignalShadows;
  uint32_t ginContextCount;
  bool ginConnectionsRailed;
  bool ginStrongLegacySignals;
  bool ginContextsRailed;
  uint32_t* abortFlag;
  v22809::LsaBarrierHandle hybridLsaBarrier;
  v22809::GinBarrierHandle hybridRailGinBarrier;
  v22809::GinBarrierHandle worldGinBarrier;
};

// ncclGinProxyGpuCtx_t of 2.30 (gin/proxy/gin_proxy_device_host_common.h):
// one per context, in an array ginHandles[connection] points at.  2.28.9's
// fields, and three arrays only the device writes: signalOffsets (what
// resetSignal makes the new zero of each signal), and per target the last
// get issued and the last made visible by a flush.
struct GinProxyGpuCtx {
  int nranks;
  uint32_t queueSize;
  uint64_t* queues;  // nranks x queueSize GFDs of 16 qwords
  uint32_t* pis;
  uint32_t* cis;
  uint64_t* counters;
  uint64_t* signals;
  uint64_t* signalOffsets;
  uint32_t* lastIssuedGet;
  uint32_t* lastVisibleGet;
};

static_assert(sizeof(GinProxyGpuCtx) == 72 && offsetof(GinProxyGpuCtx, signals) == 40 &&
              offsetof(GinProxyGpuCtx, signalOffsets) == 48 && offsetof(GinProxyGpuCtx, lastVisibleGet) == 64);
static_assert(sizeof(DevCommRequirements) == 96 && offsetof(DevCommRequirements, resourceRequirementsList) == 16 &&
              offsetof(DevCommRequirements, barrierCount) == 36 &&
              offsetof(DevCommRequirements, ginForceEnable) == 56 &&
              offsetof(DevCommRequirements, ginConnectionType) == 72 &&
              offsetof(DevCommRequirements, worldGinBarrierCount) == 88 &&
              offsetof(DevCommRequirements, ginVaSignalsRequired) == 93);
static_assert(sizeof(WindowVidmem) == 88 && offsetof(WindowVidmem, numSegments) == 80 &&
              offsetof(WindowVidmem, cftFlatRank) == 84);
static_assert(sizeof(ResourceWindow) == 64 && offsetof(ResourceWindow, lsaFlatBase) == 8 &&
              offsetof(ResourceWindow, stride4G) == 24);
static_assert(sizeof(DevComm) == 240 && offsetof(DevComm, rank) == 8 && offsetof(DevComm, windowTable) == 32 &&
              offsetof(DevComm, resourceWindow_inlined) == 48 && offsetof(DevComm, hybridWorldGinBarrier) == 112 &&
              offsetof(DevComm, lsaBarrier) == 128 && offsetof(DevComm, ginConnectionCount) == 144 &&
              offsetof(DevComm, ginHandles) == 152 && offsetof(DevComm, ginSignalShadows) == 192 &&
              offsetof(DevComm, ginContextCount) == 200 && offsetof(DevComm, abortFlag) == 208 &&
              offsetof(DevComm, hybridLsaBarrier) == 216 && offsetof(DevComm, worldGinBarrier) == 232);

}  // namespace braid::devapi::v23000

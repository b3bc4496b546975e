// NCCL 2.31's device API, the bytes that changed from 2.30's
// (src/devapi/abi_v23000.h), which NCCL's own v23100 entry serves from
// 2.31.0 on (src/devcomm/devcomm_v23100.cc of NVIDIA's 2.31.2; its 2.32.4
// tree still serves 2.31.0-2.32.3 in this layout).
//
// The requirements grew to 120 bytes: 2.30's 96, then ginCustomStride
// (for the new NCCL_GIN_CONNECTION_CUSTOM_STRIDE; 1 in the initializer),
// ginType (the GIN backend asked for; NONE is any), useRuntimeVersion, and
// the Compute Fabric Transport's cftCaps and cftBarrierCount.  The devComm
// grew to 248 bytes and moved every field from byte 48 on: its inlined
// resource window shrank to the 16 bytes the device reads; 2.30's hybrid
// world GIN barrier became the hybrid dense one (the same barrier where
// GIN connects every rank); backendIndex picks the windows' GIN handles
// (0: ginWinsDefaultBackend, 2.30's ginWins); strides replace the railed
// flags; CFT fields close it.  Windows (88 bytes: 2.30's, with cftFlatRank
// in the padding at 84), GIN proxy contexts, descriptors, teams and
// barrier handles are 2.30's.  Sizes and offsets were measured by
// compiling a host probe against NVIDIA's 2.31.2 headers (github
// NVIDIA/nccl at 8898068, src/include/nccl_device); nothing of them is
// committed.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "src/devapi/abi_v22809.h"
#include "src/devapi/abi_v23000.h"

namespace braid::devapi::v23100 {

constexpr int kGinConnectionCustomStride = 3;  // NCCL_GIN_CONNECTION_CUSTOM_STRIDE
constexpr int kGinTypeNone = 0;                // NCCL_GIN_TYPE_NONE: any backend
constexpr int kGinTypeMax = 6;                 // NCCL_GIN_MAX_TYPES
constexpr uint32_t kLeIdInvalid = 0xffffffffu;  // NCCL_LE_ID_INVALID

struct DevCommRequirements {  // ncclDevCommRequirements (core.h)
  v23000::DevCommRequirements v23000;
  int ginCustomStride;
  int ginType;
  bool useRuntimeVersion;
  int cftCaps;
  int cftBarrierCount;
};

// What NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER of 2.31.2 holds past the
// header; NCCL puts a shorter (older) struct over these (dev_runtime.cc,
// deepCopyDevCommRequirements), and so does braid.
inline DevCommRequirements defaults() {
  DevCommRequirements r{};
  r.v23000.ginContextCount = 4;
  r.v23000.ginTrafficClass = INT_MIN;  // NCCL_CONFIG_UNDEF_INT
  r.v23000.ginStrongSignalsRequired = r.v23000.ginVaSignalsRequired = true;
  r.ginCustomStride = 1;
  return r;
}

struct ResourceWindow {  // ncclResourceWindow_vidmem_t
  char* lsaFlatBase;
  uint32_t stride4G;
  uint32_t mcOffset4K;
};

struct CftBarrierHandle {  // ncclCftBarrierHandle_t
  uint32_t bufHandle;
  int nBarriers;
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
  v22809::GinBarrierHandle hybridDenseGinBarrier;
  v22809::MultimemHandle lsaMultimem;
  v22809::LsaBarrierHandle lsaBarrier;
  v22809::GinBarrierHandle railGinBarrier;
  uint8_t ginConnectionCount;
  uint8_t backendIndex;
  uint8_t ginNetDeviceTypes[v23000::kMaxGinConnections];
  void* ginHandles[v23000::kMaxGinConnections];
  int ginSignalCount;
  int ginCounterCount;
  uint64_t* ginSignalShadows;
  uint32_t ginContextCount;
  int ginConnectionStride;  // world ranks per GIN rank: 1 where every rank is connected
  int ginContextStride;     // the stride the GIN barriers' team has
  bool ginStrongLegacySignals;
  uint32_t* abortFlag;
  v22809::LsaBarrierHandle hybridLsaBarrier;
  v22809::GinBarrierHandle hybridRailGinBarrier;
  v22809::GinBarrierHandle worldGinBarrier;
  uint32_t ginConnectionStride_rcp32;
  int cftRank, cftSize;
  int cftMultimemRank, cftMultimemSize;
  uint32_t cftMultimemSize_rcp32;
  uint32_t ucLeId;  // ncclCftLeId
  uint32_t mcLeId;
  CftBarrierHandle cftBarrier;
  CftBarrierHandle cftMultimemBarrier;
};

static_assert(sizeof(DevCommRequirements) == 120 && offsetof(DevCommRequirements, ginCustomStride) == 96 &&
              offsetof(DevCommRequirements, ginType) == 100 &&
              offsetof(DevCommRequirements, useRuntimeVersion) == 104 &&
              offsetof(DevCommRequirements, cftCaps) == 108 && offsetof(DevCommRequirements, cftBarrierCount) == 112);
static_assert(sizeof(ResourceWindow) == 16);
static_assert(sizeof(DevComm) == 248 && offsetof(DevComm, resourceWindow_inlined) == 48 &&
              offsetof(DevComm, hybridDenseGinBarrier) == 64 && offsetof(DevComm, lsaBarrier) == 80 &&
              offsetof(DevComm, ginConnectionCount) == 96 && offsetof(DevComm, backendIndex) == 97 &&
              offsetof(DevComm, ginNetDeviceTypes) == 98 && offsetof(DevComm, ginHandles) == 104 &&
              offsetof(DevComm, ginSignalShadows) == 144 && offsetof(DevComm, ginContextCount) == 152 &&
              offsetof(DevComm, ginConnectionStride) == 156 && offsetof(DevComm, ginStrongLegacySignals) == 164 &&
              offsetof(DevComm, abortFlag) == 168 && offsetof(DevComm, hybridLsaBarrier) == 176 &&
              offsetof(DevComm, worldGinBarrier) == 192 && offsetof(DevComm, ginConnectionStride_rcp32) == 200 &&
              offsetof(DevComm, cftRank) == 204 && offsetof(DevComm, ucLeId) == 224 &&
              offsetof(DevComm, cftBarrier) == 232 && offsetof(DevComm, cftMultimemBarrier) == 240);

// 2.30's devComm for the same communicator, as NCCL's v23000 entry makes
// it from the current one (devcomm_v23000.cc, CopyNewToOld): the fields
// by name, the inlined window's three at their 2.30 offsets (the rest
// zero), and the railed flags from the strides.  2.30's ginContextsRailed
// says a RAIL connection was asked for, even where the rail's stride is 1
// (one rank per host), whose barriers are the rail's: NCCL's translation
// there reads the stride and leaves the kernel a dense barrier it did not
// allocate.
v23000::DevComm to_v23000(const DevComm& d, bool rail_asked);

}  // namespace braid::devapi::v23100

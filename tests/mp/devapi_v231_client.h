// A client of NCCL 2.31's device headers, on the CPU: the structs its
// headers define that differ from 2.30's (devapi_v230_client.h), written
// here from 2.31.2's layout (measured against NVIDIA's 2.31.2 headers; the
// installed ones are 2.28.9's).  Its windows, GIN contexts and descriptors
// are 2.30's.  And what 2.32.0-2.32.3's headers read differently (their
// requirements and devComm are 2.31's): 80-byte GIN contexts, 96-byte
// windows.  For the 2.31 and 2.32 device API tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "devapi_v230_client.h"

namespace v231 {

using v230::Handle;

struct Reqs231 {  // ncclDevCommRequirements, 2.31: 2.30's, then five members
  v230::Reqs230 v230;
  int ginCustomStride;
  int ginType;  // ncclGinType_t: NONE 0 (any), PROXY 2, GDAKI 3, GPI 4, EFA_GDA 5
  bool useRuntimeVersion;
  int cftCaps;
  int cftBarrierCount;
};
static_assert(sizeof(Reqs231) == 120 && offsetof(Reqs231, ginType) == 100 && offsetof(Reqs231, cftCaps) == 108);

enum : int { kNone = 0, kFull = 1, kRail = 2, kCustomStride = 3 };  // ncclGinConnectionType_t

inline Reqs231 initializer() {  // NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER of 2.31.2's headers
  Reqs231 r{};
  r.v230 = v230::initializer();
  r.v230.size = sizeof(r);
  r.v230.version = NCCL_VERSION(2, 31, 2);
  r.ginCustomStride = 1;
  return r;
}

struct DevComm231 {  // ncclDevComm, 2.31
  uint32_t magic, version;
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;
  void* windowTable;
  void* resourceWindow;
  struct {
    char* lsaFlatBase;
    uint32_t stride4G, mcOffset4K;
  } resourceWindow_inlined;
  Handle hybridDenseGinBarrier;
  void* lsaMultimem;
  Handle lsaBarrier, railGinBarrier;
  uint8_t ginConnectionCount;
  uint8_t backendIndex;
  uint8_t ginNetDeviceTypes[4];
  void* ginHandles[4];
  int ginSignalCount, ginCounterCount;
  uint64_t* ginSignalShadows;
  uint32_t ginContextCount;
  int ginConnectionStride, ginContextStride;
  bool ginStrongLegacySignals;
  uint32_t* abortFlag;
  Handle hybridLsaBarrier, hybridRailGinBarrier, worldGinBarrier;
  uint32_t ginConnectionStride_rcp32;
  int cftRank, cftSize, cftMultimemRank, cftMultimemSize;
  uint32_t cftMultimemSize_rcp32;
  uint32_t ucLeId, mcLeId;
  Handle cftBarrier, cftMultimemBarrier;
};
static_assert(sizeof(DevComm231) == 248 && offsetof(DevComm231, hybridDenseGinBarrier) == 64 &&
              offsetof(DevComm231, backendIndex) == 97 && offsetof(DevComm231, ginHandles) == 104 &&
              offsetof(DevComm231, ginConnectionStride) == 156 && offsetof(DevComm231, abortFlag) == 168 &&
              offsetof(DevComm231, ginConnectionStride_rcp32) == 200 && offsetof(DevComm231, ucLeId) == 224);

// 2.31's host calls for the Compute Fabric Transport, bound by name (a
// team is {nRanks, rank, stride}; ncclCftLeId is 32 bits).
struct Team {
  int nRanks, rank, stride;
};
extern "C" Team team_cft(ncclComm_t, int mode) __asm__("ncclTeamCft");
extern "C" Team team_cft_multimem(ncclComm_t) __asm__("ncclTeamCftMultimem");
extern "C" ncclResult_t multimem_le_info(ncclWindow_t, size_t, uint32_t*, size_t*) __asm__(
    "ncclGetMultimemDeviceLeInfo");
extern "C" ncclResult_t cft_le_info(ncclWindow_t, size_t, int, Team, uint32_t*, size_t*) __asm__(
    "ncclGetCftDeviceLeInfo");
extern "C" ncclResult_t peer_le_info(ncclWindow_t, size_t, int, uint32_t*, size_t*) __asm__("ncclGetPeerDeviceLeInfo");

// LSA rank `peer`'s copy of byte `offset` of the resource buffer, by the
// headers' arithmetic on the inlined window.
inline char* resource(const DevComm231& d, int peer, size_t offset) {
  const uint64_t base = reinterpret_cast<uint64_t>(d.resourceWindow_inlined.lsaFlatBase);
  return reinterpret_cast<char*>(base + (uint64_t(uint32_t(peer) * d.resourceWindow_inlined.stride4G) << 32) + offset);
}

// ncclGinProxyGpuCtx_t of 2.32: 2.30's and a promise braid does not make.
struct ProxyCtx232 : v230::ProxyCtx230 {
  bool flushesAllPutsOnAnySignal;
};
static_assert(sizeof(v230::ProxyCtx230) == 72 && sizeof(ProxyCtx232) == 80);  // the flag at 72
// ncclWindow_vidmem of 2.32: winFlags in 2.30's padding at 36, ucLeIdBase at 88.
inline uint32_t window_flags(ncclWindow_t w) { return reinterpret_cast<const uint32_t*>(w)[9]; }
inline uint32_t window_le_id_base(ncclWindow_t w) { return reinterpret_cast<const uint32_t*>(w)[22]; }

// The device headers a test's kernel is built against.
enum class Abi { kV230, kV231, kV232 };
template <Abi kAbi>
using ProxyCtx = std::conditional_t<kAbi == Abi::kV232, ProxyCtx232, v230::ProxyCtx230>;

// A GIN devComm of 2.30's or 2.31's layout, for tests that run the same
// traffic on each ABI: made from 2.30's requirements (laid into 2.31's
// initializer, version 2.31.2 or 2.32.3, for the later ones), its contexts
// where its layout has them.
class GinDevComm {
 public:
  explicit GinDevComm(Abi abi) : abi_(abi) {}
  ncclResult_t create(ncclComm_t comm, const v230::Reqs230& reqs) {
    if (abi_ == Abi::kV230) return v230::dev_comm_create(comm, &reqs, &d230_);
    Reqs231 r = initializer();
    r.v230 = reqs;
    r.v230.size = sizeof(r);
    r.v230.version = abi_ == Abi::kV232 ? NCCL_VERSION(2, 32, 3) : NCCL_VERSION(2, 31, 2);
    return v230::dev_comm_create(comm, &r, &d231_);
  }
  ncclResult_t destroy(ncclComm_t comm) {
    return abi_ == Abi::kV230 ? v230::dev_comm_destroy(comm, &d230_) : v230::dev_comm_destroy(comm, &d231_);
  }
  void* contexts() const { return abi_ == Abi::kV230 ? d230_.ginHandles[0] : d231_.ginHandles[0]; }
  uint32_t context_count() const { return abi_ == Abi::kV230 ? d230_.ginContextCount : d231_.ginContextCount; }

 private:
  Abi abi_;
  v230::DevComm230 d230_{};
  DevComm231 d231_{};
};

}  // namespace v231

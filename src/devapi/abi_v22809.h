// NCCL 2.28.9's device API, the bytes a client kernel reads: braid's one copy.
//
// A kernel compiled against NVIDIA's nccl_device.h reads ncclDevComm (by
// value), the window structs and window table, and for GIN the proxy
// context and its 64-byte descriptors (GFDs), with inline code braid never
// sees.  So these layouts are the contract, and braid must fill them byte
// for byte.  braid ships no nccl_device headers and must not define NVIDIA's
// struct names inside the library (its own ncclWindow_vidmem is the host
// window object), so the mirrors live here under braid's names.
// tests/devapi/test_layout_v22809.cc compiles them next to the installed
// headers and checks every size and offset against NVIDIA's definitions;
// the asserts below only pin the numbers measured (research doc, app. A).
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::devapi::v22809 {

constexpr int kMaxGinContexts = 4;          // NCCL_GIN_MAX_CONTEXTS
constexpr uint8_t kGinTypeProxy = 2;        // NCCL_NET_DEVICE_GIN_PROXY
constexpr int kGinProxyVersion = 100;       // NCCL_GIN_PROXY_VERSION
constexpr size_t kResourceHandleUnit = 128; // ncclGetResourceBufferOffset: handle * 128
constexpr int kWindowTableEntries = 32;

struct Team {  // ncclTeam
  int nRanks, rank, stride;
};

struct WindowVidmem {  // ncclWindow_vidmem (nccl_device/impl/core__types.h)
  void* winHost;
  char* lsaFlatBase;  // LSA rank 0's copy of this window in the flat range
  int lsaRank;
  int worldRank;
  uint32_t stride4G;
  uint32_t mcOffset4K;
  uint32_t ginOffset4K;
  uint32_t winFlags;  // 2.32's: the registration flags (2.28.9-2.31's padding)
  void* ginWins[kMaxGinContexts];  // ncclGinWindow_t: opaque to the device in proxy mode
};

struct DevCommWindowTable {  // ncclDevCommWindowTable (nccl_device/impl/comm__types.h)
  struct Entry {
    uintptr_t base, size;
    WindowVidmem* window;
  } entries[kWindowTableEntries];
  DevCommWindowTable* next;
};

struct MultimemHandle {
  void* mcBasePtr;
};
struct LsaBarrierHandle {
  uint32_t bufHandle;
  int nBarriers;
};
struct GinBarrierHandle {
  uint32_t signal0;
  uint32_t bufHandle;
};
struct LLA2AHandle {
  uint32_t bufHandle;
  uint32_t nSlots;
};

struct DevComm {  // ncclDevComm
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;
  DevCommWindowTable* windowTable;
  WindowVidmem* resourceWindow;
  WindowVidmem resourceWindow_inlined;
  MultimemHandle lsaMultimem;
  LsaBarrierHandle lsaBarrier;
  GinBarrierHandle railGinBarrier;
  uint8_t ginContextCount;
  uint8_t ginTypes[kMaxGinContexts];
  void* ginHandles[kMaxGinContexts];
  uint32_t ginSignalBase;
  int ginSignalCount;
  uint32_t ginCounterBase;
  int ginCounterCount;
  uint64_t* ginSignalShadows;
};

struct DevResourceRequirements;
struct TeamRequirements;

struct DevCommRequirements {  // ncclDevCommRequirements (2.28: no size/magic/version header)
  DevResourceRequirements* resourceRequirementsList;
  TeamRequirements* teamRequirementsList;
  bool lsaMultimem;
  int barrierCount;
  int lsaBarrierCount;
  int railGinBarrierCount;
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
  bool ginForceEnable;
  int ginContextCount;
  int ginSignalCount;
  int ginCounterCount;
};

struct DevResourceRequirements {
  DevResourceRequirements* next;
  size_t bufferSize, bufferAlign;
  uint32_t* outBufferHandle;
  int ginSignalCount;
  int ginCounterCount;
  uint32_t* outGinSignalStart;
  uint32_t* outGinCounterStart;
};

struct TeamRequirements {
  TeamRequirements* next;
  Team team;
  bool multimem;
  MultimemHandle* outMultimemHandle;
};

// ncclGinProxyGpuCtx_t (nccl_device/gin/proxy/gin_proxy_device_host_common.h):
// one per GIN context, in device memory; the pointers it holds are what the
// device posts to (queues, pis) and polls (cis, counters, signals).
struct GinProxyGpuCtx {
  int nranks;
  uint32_t queueSize;  // a power of two
  uint64_t* queues;    // nranks x queueSize GFDs of 8 qwords
  uint32_t* pis;
  uint32_t* cis;
  uint64_t* counters;
  uint64_t* signals;
};

static_assert(sizeof(Team) == 12);
static_assert(sizeof(WindowVidmem) == 72 && offsetof(WindowVidmem, ginOffset4K) == 32 &&
              offsetof(WindowVidmem, winFlags) == 36 && offsetof(WindowVidmem, ginWins) == 40);
static_assert(sizeof(DevCommWindowTable) == 776 && offsetof(DevCommWindowTable, next) == 768);
static_assert(sizeof(DevComm) == 200 && offsetof(DevComm, resourceWindow_inlined) == 40 &&
              offsetof(DevComm, ginContextCount) == 136 && offsetof(DevComm, ginHandles) == 144 &&
              offsetof(DevComm, ginSignalShadows) == 192);
static_assert(sizeof(DevCommRequirements) == 56 && sizeof(DevResourceRequirements) == 56 &&
              sizeof(TeamRequirements) == 32);
static_assert(sizeof(GinProxyGpuCtx) == 48 && offsetof(GinProxyGpuCtx, signals) == 40);

// idivRcp32 of nccl_device/utility.h: what nRanks_rcp32 and lsaSize_rcp32 hold.
constexpr uint32_t div_rcp32(uint32_t x) { return uint32_t(-1) / x + ((x & (x - 1)) == 0 ? 1 : 0); }

}  // namespace braid::devapi::v22809

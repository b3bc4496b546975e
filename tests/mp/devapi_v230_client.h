// A client of NCCL 2.30's device headers, on the CPU: the structs its
// headers define (written here from 2.30.7's layout, measured against
// NCCL's 2.30.7 headers; NVIDIA's installed headers are 2.28.9's), and the
// device side of 2.30's GIN proxy backend (nccl_device/gin/proxy/
// gin_proxy.h: buildGfd, postGfd, the flush a Wait does), with the
// descriptor's bits placed as 2.30.7's bitfields place them
// (tests/devapi/test_gfd_layout.cc holds the measured values).  For the
// 2.30 device API tests (test_device_comm_v230.cc, test_device_gin_v230.cc).
#pragma once

#include <sched.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nccl.h"

namespace v230 {

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

inline Reqs230 initializer() {  // NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER of 2.30.7's headers
  Reqs230 r{};
  r.size = sizeof(r);
  r.magic = NCCL_API_MAGIC;
  r.version = NCCL_VERSION(2, 30, 7);
  r.ginContextCount = 4;
  r.ginTrafficClass = NCCL_CONFIG_UNDEF_INT;
  r.ginStrongSignalsRequired = r.ginVaSignalsRequired = true;
  return r;
}

// The entry points, typed for these structs and bound to NCCL's symbols
// by name, so that a file may also include NVIDIA's 2.28.9 headers, which
// declare them for 2.28.9's structs.
extern "C" ncclResult_t dev_comm_create(ncclComm_t, const void*, void*) __asm__("ncclDevCommCreate");
extern "C" ncclResult_t dev_comm_destroy(ncclComm_t, const void*) __asm__("ncclDevCommDestroy");
extern "C" ncclResult_t lla2a_create_requirement(int, int, Handle*, ResourceReq*) __asm__("ncclLLA2ACreateRequirement");

// LSA rank `peer`'s copy of byte `offset` of the resource buffer, by the
// headers' arithmetic on the inlined window.
inline char* resource(const DevComm230& d, int peer, size_t offset) {
  const uint64_t base = reinterpret_cast<uint64_t>(d.resourceWindow_inlined.lsaFlatBase);
  return reinterpret_cast<char*>(base + (uint64_t(uint32_t(peer) * d.resourceWindow_inlined.stride4G) << 32) + offset);
}

// ncclWindow_vidmem of 2.30, what an ncclWindow_t points at.
struct Window230 {
  void* winHost;
  char* lsaFlatBase;
  int lsaRank, worldRank;
  uint32_t stride4G, mcOffset4K, ginOffset4K;
  void* ginWins[4];
  void* ginMultiSegmentWins;
  int numSegments;
};
static_assert(sizeof(Window230) == 88 && offsetof(Window230, ginOffset4K) == 32 && offsetof(Window230, ginWins) == 40);
inline const Window230& view(ncclWindow_t w) { return *reinterpret_cast<const Window230*>(w); }

// ncclGinProxyGpuCtx_t of 2.30: ginHandles[0] points at an array of these.
struct ProxyCtx230 {
  int nranks;
  uint32_t queueSize;
  uint64_t* queues;  // nranks x queueSize descriptors of 16 qwords
  uint32_t* pis;
  uint32_t* cis;
  uint64_t* counters;
  uint64_t* signals;
  uint64_t* signalOffsets;
  uint32_t* lastIssuedGet;
  uint32_t* lastVisibleGet;
};
static_assert(sizeof(ProxyCtx230) == 72 && offsetof(ProxyCtx230, signalOffsets) == 48);
// 2.30.3's and 2.30.4's: the first seven members (2.28.9's), 48 bytes.
struct ProxyCtx2304 {
  int nranks;
  uint32_t queueSize;
  uint64_t* queues;
  uint32_t* pis;
  uint32_t* cis;
  uint64_t* counters;
  uint64_t* signals;
};
static_assert(sizeof(ProxyCtx2304) == 48 && offsetof(ProxyCtx2304, signals) == offsetof(ProxyCtx230, signals));

enum Op : uint16_t {  // ncclGinProxyOp_t
  kPut = 1,
  kInline = 2,
  kCounter = 4,
  kSignalInc = 8,
  kSignalAdd = 16,
  kVaSignal = 32,
  kGet = 64,
  kFlush = 128,
};

// What 2.30's buildGfd writes (its junk bytes as 0xee).  A VA signal's word
// goes where a put's source is; a get's remote side is the source.
struct Gfd2 {
  uint64_t q[16];
};
inline Gfd2 build_gfd2(uint16_t op, uint64_t size, uint64_t src_off, uint64_t src_handle, uint64_t dst_off,
                       uint64_t dst_handle, uint32_t counter, uint32_t signal, uint64_t signal_value,
                       uint64_t inline_value = 0) {
  Gfd2 g;
  std::memset(g.q, 0xee, sizeof g.q);
  for (uint64_t& w : g.q) w |= 1;                               // every flag
  g.q[0] = 1 | (2 << 1) | (g.q[0] & 0x60) | (size << 7);        // version 2; bits 5-6 stay junk
  g.q[7] = (g.q[7] & ~uint64_t(0xffff00)) | uint64_t(op) << 8;  // headerExt.op
  if (op & kFlush) return g;
  if (op & kInline) {
    g.q[1] = (g.q[1] & ~uint64_t(0xffffffff00)) | (inline_value & 0xffffffff) << 8;
    if (size > 4) g.q[1] = (g.q[1] & ~uint64_t(0xffff0000000000)) | ((inline_value >> 32) & 0xffff) << 40;
    if (size > 6) g.q[2] = (g.q[2] & ~uint64_t(0xffff00)) | ((inline_value >> 48) & 0xffff) << 8;
  } else {
    g.q[1] = 1 | src_off << 1;
    g.q[2] = 1 | src_handle << 1;
  }
  g.q[3] = 1 | dst_off << 1;
  g.q[4] = 1 | dst_handle << 1;
  g.q[5] = 1 | uint64_t(counter & 0x7fffff) << 1 | uint64_t(signal & 0xffffff) << 24 | (signal_value & 0xffff) << 48;
  g.q[6] = (g.q[6] & 0xff00000000000000ull) | 1 | 2 /* strong */ | ((signal_value >> 16) & 0xffff) << 8 |
           (signal_value >> 32) << 24;
  return g;
}

// postGfd: claim a slot of target pe's queue, wait for credit, store the
// 128 bytes (the header last here; the device's eight 16-byte stores have
// no order).  Returns the slot's index, or -1 when no credit came.
template <typename Ctx>  // ProxyCtx230 or ProxyCtx2304
int64_t post2(Ctx* ctx, int pe, const Gfd2& g) {
  const uint32_t idx = __atomic_fetch_add(&ctx->pis[pe], 1u, __ATOMIC_RELAXED);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ctx->queueSize <= idx - __atomic_load_n(&ctx->cis[pe], __ATOMIC_ACQUIRE))
    if (std::chrono::steady_clock::now() > until)
      return -1;
    else
      sched_yield();
  uint64_t* slot = ctx->queues + (size_t(pe) * ctx->queueSize + (idx & (ctx->queueSize - 1))) * 16;
  for (int w = 15; w >= 0; --w) __atomic_store_n(&slot[w], g.q[w], __ATOMIC_RELEASE);
  return idx;
}

// waitForGfdComplete: until the proxy consumed descriptor `idx` of pe's queue.
template <typename Ctx>
bool wait_consumed(Ctx* ctx, int pe, uint32_t idx) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (int32_t(__atomic_load_n(&ctx->cis[pe], __ATOMIC_ACQUIRE) - (idx + 1)) < 0)
    if (std::chrono::steady_clock::now() > until)
      return false;
    else
      sched_yield();
  return true;
}

// waitSignal / a counter read: until *word - offset reaches `value`, bounded.
inline bool wait_at_least(const uint64_t* word, uint64_t value, uint64_t offset = 0) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) - offset < value)
    if (std::chrono::steady_clock::now() > until)
      return false;
    else
      sched_yield();
  return true;
}

}  // namespace v230

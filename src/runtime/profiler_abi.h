// NCCL's profiler plugin ABI, as braid declares it: the ncclProfiler_v5,
// ncclProfiler_v6 and ncclProfiler_v7 tables a plugin library exports (NCCL
// 2.28's, 2.29-2.30's and 2.31's; NCCL also takes v1-v4, braid does not).
// Layouts follow NCCL's plugins/profiler headers field for field.  Each
// version only appends: v6 adds union members (copy-engine events, which
// braid never emits), v7 appends a user tag (and, to Coll, a kernel variant
// and a symmetric flag) to the end of its members and adds a kernel-phase
// member.  So one v7 descriptor, zeroed and filled, reads the same through
// every version's declaration; the tables are alike.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "nccl.h"

extern "C" {

// Event types, also the bits of the activation mask a plugin's init sets.
enum : uint64_t {
  BRAID_PROFILE_GROUP = 1 << 0,  // a launch's group of tasks (legacy parent)
  BRAID_PROFILE_COLL = 1 << 1,
  BRAID_PROFILE_P2P = 1 << 2,
  BRAID_PROFILE_PROXY_OP = 1 << 3,
  BRAID_PROFILE_PROXY_STEP = 1 << 4,
  BRAID_PROFILE_PROXY_CTRL = 1 << 5,
  BRAID_PROFILE_KERNEL_CH = 1 << 6,
  BRAID_PROFILE_NET_PLUGIN = 1 << 7,
  BRAID_PROFILE_GROUP_API = 1 << 8,
  BRAID_PROFILE_COLL_API = 1 << 9,
  BRAID_PROFILE_P2P_API = 1 << 10,
  BRAID_PROFILE_KERNEL_LAUNCH = 1 << 11,
};

// recordEventState's states that braid emits (ncclProfilerEventState_t).
enum braidNcclProfilerEventState {
  BRAID_PROFILER_KERNEL_CH_STOP = 22,
  BRAID_PROFILER_GROUP_START_API_STOP = 23,
  BRAID_PROFILER_GROUP_END_API_START = 24,
};

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graphCaptured;
      uint64_t userTag;  // v7
    } collApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graphCaptured;
      uint64_t userTag;  // v7
    } p2pApi;
    struct {
      void* stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
      const char* kernelVariant;  // v7
      bool isSymColl;             // v7
      uint64_t userTag;           // v7
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
      uint64_t userTag;  // v7
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
    // v6's copy-engine descriptors, the union's largest member: room only.
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      const char* syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void* stream;
      uint64_t userTag;  // v7
    } ceColl;
    struct {  // v7
      uint8_t channelId;
      uint8_t phaseId;
      const char* phaseName;
      uint64_t pTimer;
    } kernelPhase;
  };
} braidNcclProfilerEventDescr_t;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} braidNcclProfilerEventStateArgs_t;

typedef void (*braidNcclProfilerLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt,
                                          ...);

// ncclProfiler_v5_t, ncclProfiler_v6_t and ncclProfiler_v7_t.
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, braidNcclProfilerLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, braidNcclProfilerEventDescr_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, int eState, braidNcclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} braidNcclProfiler_t;

}  // extern "C"

// The v5 parts stay where v5 plugins read them (NCCL's 2.28 header).
static_assert(offsetof(braidNcclProfilerEventDescr_t, coll) == 24, "the union follows type, parentObj, rank");
static_assert(offsetof(braidNcclProfilerEventDescr_t, coll.parentGroup) == 24 + 80, "v5's Coll ends at 88 bytes");
static_assert(offsetof(braidNcclProfilerEventDescr_t, collApi.graphCaptured) == 24 + 40, "v5's CollApi");
static_assert(offsetof(braidNcclProfilerEventDescr_t, p2p.parentGroup) == 24 + 40, "v5's P2p");
static_assert(offsetof(braidNcclProfilerEventDescr_t, kernelCh.pTimer) == 24 + 8, "v5's KernelCh");

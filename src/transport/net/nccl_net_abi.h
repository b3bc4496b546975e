// NCCL's net plugin ABI, as braid declares it: the ncclNet_vN tables that
// NCCL 2.30 looks up in a plugin library (symbols ncclNetPlugin_v12 down to
// ncclNetPlugin_v8; NCCL also takes v7 and v6, braid does not).  Layouts
// follow NCCL's ext-net headers field for field; the collective-network
// and GIN tables are not declared (braid neither offers nor uses them).
//
// Differences between the versions that matter here:
//   v8   int sizes in isend/irecv; no maxP2pBytes/maxCollBytes properties
//   v9   size_t sizes; properties gain forceFlush, vProps, max*Bytes;
//        makeVDevice
//   v10  init takes a profiler callback, connect a comm config; isend and
//        irecv take profiler handles
//   v11  init takes a context out-parameter, commId and config; listen and
//        connect take the context; finalize and setNetAttr; properties gain
//        maxMultiRequestSize
//   v12  (2.30) up to 8 devices in a virtual device; properties gain
//        railId and planeId (int16, -1 where undefined).  The calls are
//        v11's: one layout serves both (braidNcclNetV11Layout)
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"

extern "C" {

#define BRAID_NCCL_NET_HANDLE_MAXSIZE 128
#define BRAID_NCCL_NET_MAX_DEVS_PER_NIC 4

typedef enum {
  BRAID_NCCL_LOG_NONE = 0,
  BRAID_NCCL_LOG_VERSION = 1,
  BRAID_NCCL_LOG_WARN = 2,
  BRAID_NCCL_LOG_INFO = 3,
  BRAID_NCCL_LOG_ABORT = 4,
  BRAID_NCCL_LOG_TRACE = 5
} braidNcclDebugLogLevel;
typedef void (*braidNcclDebugLogger_t)(braidNcclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                       const char* fmt, ...);
typedef ncclResult_t (*braidNcclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                                    void* extData);

typedef enum { BRAID_NCCL_NET_DEVICE_HOST = 0 } braidNcclNetDeviceType;  // an int-sized enum, as NCCL's

typedef struct {
  braidNcclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} braidNcclNetDeviceHandle_t;  // the same from v7 to v11

typedef struct {
  int ndevs;
  int devs[BRAID_NCCL_NET_MAX_DEVS_PER_NIC];
} braidNcclNetVDeviceProps_t;  // v9..v11

typedef struct {
  int trafficClass;
} braidNcclNetCommConfig_t;  // v10, v11

// --- v8 -------------------------------------------------------------------
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  braidNcclNetDeviceType netDeviceType;
  int netDeviceVersion;
} braidNcclNetProperties_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(braidNcclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, braidNcclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, braidNcclNetDeviceHandle_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, braidNcclNetDeviceHandle_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} braidNcclNet_v8_t;

// --- v9 and v10 share their properties ------------------------------------
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  braidNcclNetDeviceType netDeviceType;
  int netDeviceVersion;
  braidNcclNetVDeviceProps_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} braidNcclNetProperties_v9_t;
typedef braidNcclNetProperties_v9_t braidNcclNetProperties_v10_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(braidNcclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, braidNcclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, braidNcclNetDeviceHandle_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, braidNcclNetDeviceHandle_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, braidNcclNetVDeviceProps_t* props);
} braidNcclNet_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(braidNcclDebugLogger_t logFunction, braidNcclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, braidNcclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, braidNcclNetCommConfig_t* config, void* handle, void** sendComm,
                          braidNcclNetDeviceHandle_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, braidNcclNetDeviceHandle_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, braidNcclNetVDeviceProps_t* props);
} braidNcclNet_v10_t;

// --- v11 ------------------------------------------------------------------
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  braidNcclNetDeviceType netDeviceType;
  int netDeviceVersion;
  braidNcclNetVDeviceProps_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} braidNcclNetProperties_v11_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} braidNcclNetCommAttr_t;
typedef struct {
  braidNcclNetCommAttr_t sendCommAttr;
  braidNcclNetCommAttr_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} braidNcclNetAttr_t;

// --- v12 ------------------------------------------------------------------
#define BRAID_NCCL_NET_MAX_DEVS_PER_NIC_V12 8
#define BRAID_NCCL_NET_ID_UNDEF -1
typedef struct {
  int ndevs;
  int devs[BRAID_NCCL_NET_MAX_DEVS_PER_NIC_V12];
} braidNcclNetVDeviceProps_v12_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  braidNcclNetDeviceType netDeviceType;
  int netDeviceVersion;
  braidNcclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} braidNcclNetProperties_v12_t;

}  // extern "C"

// The v11 and v12 tables: the same calls, v12's properties and virtual
// devices larger.
template <typename Properties, typename VDeviceProps>
struct braidNcclNetV11Layout {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, braidNcclNetCommConfig_t* config,
                       braidNcclDebugLogger_t logFunction, braidNcclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, Properties* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm, braidNcclNetDeviceHandle_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, braidNcclNetDeviceHandle_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, VDeviceProps* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, braidNcclNetAttr_t* netAttr);
};
using braidNcclNet_v11_t = braidNcclNetV11Layout<braidNcclNetProperties_v11_t, braidNcclNetVDeviceProps_t>;
using braidNcclNet_v12_t = braidNcclNetV11Layout<braidNcclNetProperties_v12_t, braidNcclNetVDeviceProps_v12_t>;
static_assert(sizeof(braidNcclNetProperties_v12_t) == 128 && offsetof(braidNcclNetProperties_v12_t, railId) == 124,
              "NCCL 2.30's net_v12.h layout");

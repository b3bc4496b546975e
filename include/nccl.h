/*
 * braid's NCCL-compatible C API.
 *
 * The API of NCCL 2.32: every type, constant, struct layout, initializer and
 * function of NCCL 2.30.7's nccl.h, the per-collective calls and structs of
 * 2.31, and 2.32's TLS setup and struct members, ABI-identical to NVIDIA's
 * header of each release.  A program compiled against NVIDIA's nccl.h of any
 * release from 2.28 on runs against braid's libnccl.so.2 unchanged.
 *
 * Versioned structs (ncclConfig_t, ncclCollConfig_t, ncclEncryptionConfig_t)
 * carry their size, NCCL_API_MAGIC and the header's NCCL_VERSION_CODE, so
 * the library reads exactly the members the caller's header had: one built
 * against 2.28 passes an 80-byte ncclConfig_t, one built against this header
 * a 120-byte one (docs/compatibility.md: the version policy).
 *
 * The header does not require CUDA: without cuda_runtime.h, cudaStream_t and
 * cudaEvent_t are declared as the same opaque pointer types CUDA uses.
 */
#ifndef NCCL_H_
#define NCCL_H_

#if defined(__has_include)
#  if __has_include(<cuda_runtime.h>) && !defined(BRAID_NO_CUDA_HEADERS)
#    include <cuda_runtime.h>
/* NVIDIA's nccl.h brings the half, bfloat16 and fp8 types too, and clients
 * rely on it (NCCL's own examples use memcpy, which only these declare). */
#    include <cuda_fp16.h>
#    if CUDART_VERSION >= 11000
#      include <cuda_bf16.h>
#    endif
#    if defined(__cplusplus) && CUDART_VERSION >= 11080
#      include <cuda_fp8.h>
#    endif
#    define BRAID_HAVE_CUDA_RUNTIME_H 1
#  endif
#endif
#ifndef BRAID_HAVE_CUDA_RUNTIME_H
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct CUevent_st;
typedef struct CUevent_st* cudaEvent_t;
#endif

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* The NCCL API level this header describes. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 32
#define NCCL_PATCH 6
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 23206
/* Releases up to 2.8 were coded X*1000 + Y*100 + Z, later ones X*10000 + Y*100 + Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

/* braid's own version, next to the NCCL API level it implements. */
#define BRAID_VERSION_MAJOR 0
#define BRAID_VERSION_MINOR 1
#define BRAID_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8, /* 2.29: a bounded wait gave up */
  ncclNumResults = 9
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* What every versioned struct's initializer puts in its magic member. */
#define NCCL_API_MAGIC 0xcafebeef

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02 /* 2.30: one-sided writes land in issue order */
#define NCCL_WIN_GIN_ONLY 0x04        /* 2.32: only for GPU-initiated networking */
#define NCCL_WIN_CFT_COUNTED 0x08     /* 2.32: Compute Fabric Transport counted writes */
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00

/* ncclCommSuspend flags (2.29). */
#define NCCL_SUSPEND_MEM 0x01

/* ncclConfig_t::hostCftMode (2.31). */
typedef enum {
  ncclHostCftDefault = NCCL_CONFIG_UNDEF_INT,
  ncclHostCftEnable = 1,
  ncclHostCftDisable = 2,
  ncclHostCftFallback = 3
} ncclHostCftMode_t;

/* ncclConfig_t::nvlsHostMode (2.32): bits that turn host NVLS parts off. */
typedef enum {
  ncclNvlsHostModeDefault = NCCL_CONFIG_UNDEF_INT,
  ncclNvlsHostModeEnable = 0,
  ncclNvlsHostModeDisableTransport = 1 << 0,
  ncclNvlsHostModeDisableSymmetricMultimem = 1 << 1,
  ncclNvlsHostModeDisable = INT_MAX
} ncclNvlsHostMode_t;

/* Communicator configuration.  Members are only ever appended; the comment
 * on each says the release whose header first had it, which is how the
 * library tells which members a caller's (older) struct holds. */
typedef struct ncclConfig_v23200 {
  size_t size;          /* sizeof(ncclConfig_t) of the caller's header */
  unsigned int magic;   /* NCCL_API_MAGIC */
  unsigned int version; /* NCCL_VERSION_CODE of the caller's header */
  int blocking;         /* 2.14 */
  int cgaClusterSize;   /* 2.17 */
  int minCTAs;          /* 2.17 */
  int maxCTAs;          /* 2.17 */
  const char* netName;  /* 2.17 */
  int splitShare;
  int trafficClass;     /* 2.25 */
  const char* commName;
  int collnetEnable;    /* 2.27 */
  int CTAPolicy;        /* 2.27 */
  int shrinkShare;      /* 2.27 */
  int nvlsCTAs;         /* 2.27 */
  int nChannelsPerNetPeer; /* 2.28 */
  int nvlinkCentricSched;  /* 2.28; a 2.28 struct ends here: 80 bytes */
  int graphUsageMode;      /* 2.29 */
  int numRmaCtx;           /* 2.29; 88 bytes */
  int maxP2pPeers;         /* 2.30 */
  int graphStreamOrdering; /* 2.30.7 (in 2.30.3's tail padding); 96 bytes */
  int launchOrderImplicit; /* 2.31 */
  int numRmaSig;           /* 2.31 */
  int rmaEagerInit;        /* 2.31 */
  int hostCftMode;         /* 2.31; 112 bytes */
  int nvlsHostMode;        /* 2.32; 120 bytes */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                           \
  {                                                                                                       \
    sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT                                                                             \
  }

/* A vendor option for one collective (2.31): a list through `next`, keyed by
 * (vendorId, optionId).  braid reads none and ignores them all, as NCCL does. */
typedef struct ncclConfigExt {
  struct ncclConfigExt* next;
  struct {
    int vendorId;
    int optionId;
  } key;
  union {
    int i;
    const char* s;
    void* raw;
  } val;
} ncclConfigExt_t;

/* Per-collective configuration for the nccl*Config calls (2.31).  The same
 * on every rank.  algSelection names the algorithms the call may run
 * (case-insensitive name prefixes; ',' or, '+' and, '^' not); braid reads
 * its own algorithm names and NCCL's (docs/compatibility.md). */
typedef struct ncclCollConfig_v23200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  ncclConfigExt_t* ext;
  int minCTAs;
  int maxCTAs;
  int nvlsCTAs;
  int cgaClusterSize;
  const char* algSelection; /* NULL or "": automatic */
  int forceAlgSelection;    /* 1 (default): a selection that cannot run is an error; 0: fall back */
  int CTAPolicy;
  uint64_t userProfilerTag; /* a 2.31 struct ends here: 64 bytes */
  cudaEvent_t launchCompletionEvent; /* 2.32; 72 bytes */
} ncclCollConfig_t;

#define NCCL_COLLCONFIG_INITIALIZER                                                                  \
  {                                                                                                  \
    sizeof(ncclCollConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_PTR,              \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,  \
        NCCL_CONFIG_UNDEF_PTR, 1, NCCL_CONFIG_UNDEF_INT, 0, NCCL_CONFIG_UNDEF_PTR                    \
  }

/* TLS for the bootstrap and socket traffic (2.32): ncclSetEncryption. */
typedef enum {
  NCCL_ENCRYPTION_MODE_NONE = 0, /* plaintext */
  NCCL_ENCRYPTION_MODE_PSK = 1   /* TLS 1.3 with a pre-shared key */
} ncclEncryptionMode_t;
typedef struct ncclEncryptionConfig_v23200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int mode;        /* NCCL_ENCRYPTION_MODE_NONE or _PSK */
  const char* psk; /* NUL-terminated pre-shared key of at least 32 bytes */
} ncclEncryptionConfig_t;

#define NCCL_ENCRYPTION_CONFIG_INITIALIZER \
  { sizeof(ncclEncryptionConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_ENCRYPTION_MODE_NONE, NCCL_CONFIG_UNDEF_PTR }

typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT }

/* Reduction operations.  Values >= ncclNumOps are user-created (PreMulSum). */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* ncclCommMemStats selectors (2.29).  "Gpu" is NCCL's word: braid counts the
 * memory of the communicator's backend, host memory on the host backend. */
typedef enum {
  ncclStatGpuMemSuspend = 0,   /* bytes ncclCommSuspend would release */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
  ncclStatGpuMemPersist = 2,   /* bytes that stay while suspended */
  ncclStatGpuMemTotal = 3      /* all bytes the communicator holds */
} ncclCommMemStat_t;

/* ncclWaitSignal: wait for opCnt signals from `peer` on (sigIdx, ctx). */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

/* ncclParam*: braid's configuration variables by name (2.30). */
typedef struct ncclParamHandle* ncclParamHandle_t;

/* Each function also exists as pnccl<Name> (the profiling alias). */
#define BRAID_DECLARE(ret, name, args) ret nccl##name args; ret pnccl##name args;

BRAID_DECLARE(ncclResult_t, MemAlloc, (void** ptr, size_t size))
BRAID_DECLARE(ncclResult_t, MemFree, (void* ptr))
BRAID_DECLARE(ncclResult_t, GetVersion, (int* version))
BRAID_DECLARE(ncclResult_t, GetUniqueId, (ncclUniqueId* uniqueId))
BRAID_DECLARE(ncclResult_t, SetEncryption, (const ncclEncryptionConfig_t* config))
BRAID_DECLARE(ncclResult_t, CommInitRankConfig,
              (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))
BRAID_DECLARE(ncclResult_t, CommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank))
BRAID_DECLARE(ncclResult_t, CommInitAll, (ncclComm_t* comm, int ndev, const int* devlist))
BRAID_DECLARE(ncclResult_t, CommInitRankScalable,
              (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
               ncclConfig_t* config))
BRAID_DECLARE(ncclResult_t, CommFinalize, (ncclComm_t comm))
BRAID_DECLARE(ncclResult_t, CommDestroy, (ncclComm_t comm))
BRAID_DECLARE(ncclResult_t, CommAbort, (ncclComm_t comm))
BRAID_DECLARE(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags))
BRAID_DECLARE(ncclResult_t, CommSplit,
              (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))
BRAID_DECLARE(ncclResult_t, CommShrink,
              (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
               ncclConfig_t* config, int shrinkFlags))
/* Growing (2.29): one existing rank gets an id for the grow and hands it to
 * the joining ranks; existing ranks call ncclCommGrow(comm, nRanks, NULL,
 * -1, ...), joining ones ncclCommGrow(NULL, nRanks, &id, rank, ...). */
BRAID_DECLARE(ncclResult_t, CommGetUniqueId, (ncclComm_t comm, ncclUniqueId* uniqueId))
BRAID_DECLARE(ncclResult_t, CommGrow,
              (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
               ncclConfig_t* config))
BRAID_DECLARE(const char*, GetErrorString, (ncclResult_t result))
BRAID_DECLARE(const char*, GetLastError, (ncclComm_t comm))
BRAID_DECLARE(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))
BRAID_DECLARE(ncclResult_t, CommCount, (const ncclComm_t comm, int* count))
BRAID_DECLARE(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device))
BRAID_DECLARE(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank))
BRAID_DECLARE(ncclResult_t, CommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle))
BRAID_DECLARE(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle))
/* Releasing and restoring a communicator's buffers (2.29). */
BRAID_DECLARE(ncclResult_t, CommSuspend, (ncclComm_t comm, int flags))
BRAID_DECLARE(ncclResult_t, CommResume, (ncclComm_t comm))
BRAID_DECLARE(ncclResult_t, CommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value))
BRAID_DECLARE(ncclResult_t, CommWindowRegister,
              (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))
BRAID_DECLARE(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
BRAID_DECLARE(ncclResult_t, WinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void** outUserPtr))
BRAID_DECLARE(ncclResult_t, RedOpCreatePreMulSum,
              (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
               ncclComm_t comm))
BRAID_DECLARE(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
BRAID_DECLARE(ncclResult_t, Reduce,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               int root, ncclComm_t comm, cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, Bcast,
              (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, Broadcast,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, AllReduce,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               ncclComm_t comm, cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, ReduceScatter,
              (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
               ncclComm_t comm, cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, AllGather,
              (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
               cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, AlltoAll,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
               cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, Gather,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, Scatter,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream))
/* The collectives with a per-call configuration (2.31); config NULL is the plain call. */
BRAID_DECLARE(ncclResult_t, AllReduceConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
BRAID_DECLARE(ncclResult_t, BroadcastConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
BRAID_DECLARE(ncclResult_t, ReduceConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
BRAID_DECLARE(ncclResult_t, AllGatherConfig,
              (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
               cudaStream_t stream, const ncclCollConfig_t* config))
BRAID_DECLARE(ncclResult_t, ReduceScatterConfig,
              (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
BRAID_DECLARE(ncclResult_t, AlltoAllConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
               cudaStream_t stream, const ncclCollConfig_t* config))
BRAID_DECLARE(ncclResult_t, GatherConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
BRAID_DECLARE(ncclResult_t, ScatterConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
BRAID_DECLARE(ncclResult_t, Send,
              (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
               cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, Recv,
              (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
               cudaStream_t stream))
/* One-sided (2.29): write into `peer`'s part of a window registered by every
 * rank, then signal it; ncclSignal signals without data; ncclWaitSignal waits
 * until the described signals arrived (and consumes them). */
BRAID_DECLARE(ncclResult_t, PutSignal,
              (const void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
               size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
               cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, Signal,
              (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, WaitSignal,
              (int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream))
BRAID_DECLARE(ncclResult_t, GroupStart, (void))
BRAID_DECLARE(ncclResult_t, GroupEnd, (void))
BRAID_DECLARE(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t* simInfo))
/* Parameters by key (2.30): handles, typed and raw reads, every key, a dump. */
BRAID_DECLARE(ncclResult_t, ParamBind, (ncclParamHandle_t* out, const char* key))
BRAID_DECLARE(ncclResult_t, ParamGetI8, (ncclParamHandle_t h, int8_t* out))
BRAID_DECLARE(ncclResult_t, ParamGetI16, (ncclParamHandle_t h, int16_t* out))
BRAID_DECLARE(ncclResult_t, ParamGetI32, (ncclParamHandle_t h, int32_t* out))
BRAID_DECLARE(ncclResult_t, ParamGetI64, (ncclParamHandle_t h, int64_t* out))
BRAID_DECLARE(ncclResult_t, ParamGetU8, (ncclParamHandle_t h, uint8_t* out))
BRAID_DECLARE(ncclResult_t, ParamGetU16, (ncclParamHandle_t h, uint16_t* out))
BRAID_DECLARE(ncclResult_t, ParamGetU32, (ncclParamHandle_t h, uint32_t* out))
BRAID_DECLARE(ncclResult_t, ParamGetU64, (ncclParamHandle_t h, uint64_t* out))
BRAID_DECLARE(ncclResult_t, ParamGetStr, (ncclParamHandle_t h, const char** out))
BRAID_DECLARE(ncclResult_t, ParamGet, (ncclParamHandle_t h, void* out, int maxLen, int* len))
BRAID_DECLARE(ncclResult_t, ParamGetParameter, (const char* key, const char** value, int* valueLen))
BRAID_DECLARE(ncclResult_t, ParamGetAllParameterKeys, (const char*** table, int* tableLen))
BRAID_DECLARE(void, ParamDumpAll, (void))

/* Deprecated since NCCL 2.28 and kept for ABI compatibility: re-reads NCCL_DEBUG. */
void ncclResetDebugInit(void);
void pncclResetDebugInit(void);

#undef BRAID_DECLARE

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */

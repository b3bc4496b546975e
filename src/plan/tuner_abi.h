// NCCL's tuner plugin ABI, as braid declares it: the ncclTunerPlugin_v2 to
// _v7 tables a plugin library exports (NCCL 2.19's to 2.32's).  Layouts
// follow NCCL's src/include/plugin/tuner/tuner_v*.h field for field; braid's
// own names, so that nothing clashes with a plugin's header.
//
// The cost table getCollInfo gets (v3 on) is NCCL's float
// table[kTunerAlgorithms][kTunerProtocols] passed as float**: an entry is a
// time in microseconds, -1 (kTunerIgnore) where the pair cannot run; the
// plugin lowers the entry it wants (by convention to 0) and the caller runs
// the cheapest.  v2 returns an algorithm and a protocol instead.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"

extern "C" {

// ncclDebugLogger_t: NCCL's level, subsystem flags, file, line, printf arguments.
typedef void (*braidTunerLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

// ncclFunc_t's collectives, the ones NCCL tunes.
enum braidTunerFunc : int {
  BRAID_TUNER_BROADCAST = 0,
  BRAID_TUNER_REDUCE = 1,
  BRAID_TUNER_ALLGATHER = 2,
  BRAID_TUNER_REDUCESCATTER = 3,
  BRAID_TUNER_ALLREDUCE = 4,
};

// NCCL_ALGO_* and NCCL_PROTO_* (NCCL's nccl_tuner.h), the table's indices.
enum : int { BRAID_TUNER_ALGO_TREE = 0, BRAID_TUNER_ALGO_RING = 1 };  // then collnet direct, chain, nvls, nvls tree, pat
enum : int { BRAID_TUNER_PROTO_LL = 0, BRAID_TUNER_PROTO_LL128 = 1, BRAID_TUNER_PROTO_SIMPLE = 2 };
constexpr int kTunerAlgorithms = 7;
constexpr int kTunerProtocols = 3;
constexpr float kTunerIgnore = -1.0f;

// v5 to v7 init's inputs: the NVLink domains, and NCCL's model constants,
// which the plugin may rewrite (ncclTunerConstants_v5_t: 3 hardware links,
// 4 compute capabilities, 3 node scales; v7's has a fifth capability).
typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} braidTunerNvlDomainInfo_t;

}  // extern "C"

// ncclTunerConstants_v5_t (v5, v6) and _v7_t (2.32.6): the same tables, v7's
// five bandwidth tables one compute capability (Rubin) longer.
template <int CompCaps>
struct braidTunerConstantsLayout {
  double baseLatencies[kTunerAlgorithms][kTunerProtocols];
  double hwLatencies[3][kTunerAlgorithms][kTunerProtocols];
  double llMaxBws[CompCaps][3];
  double perChMaxRingLL128Bws[CompCaps][3];
  double perChMaxTreeLL128Bws[CompCaps][3];
  double perChMaxTreeBws[CompCaps][3];
  double perChMaxNVLSTreeBws[CompCaps][3];
};
using braidTunerConstants_t = braidTunerConstantsLayout<4>;
using braidTunerConstants_v7_t = braidTunerConstantsLayout<5>;

extern "C" {

typedef struct {  // ncclTuner_v2_t (NCCL 2.19)
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, braidTunerLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int collNetSupport, int nvlsSupport,
                              int numPipeOps, int* algorithm, int* protocol, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} braidTuner_v2_t;

typedef struct {  // ncclTuner_v3_t: the cost table
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, braidTunerLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} braidTuner_v3_t;

typedef struct {  // ncclTuner_v4_t: regBuff
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, braidTunerLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} braidTuner_v4_t;

typedef struct {  // ncclTuner_v5_t (2.27): the communicator's id, NVLink domains and constants at init
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, braidTunerLogger_t logFunction,
                       braidTunerNvlDomainInfo_t* nvlDomainInfo, braidTunerConstants_t* constants);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
} braidTuner_v5_t;

// ncclTuner_v6_t (2.30): v5's members, then an optional chunk size
// override.  braid reads a v6 table through v5's declaration (it never
// calls getChunkSize).
typedef struct {
  braidTuner_v5_t v5;
  ncclResult_t (*getChunkSize)(void* context, int collType, size_t nBytes, int algo, int proto, int nChannels,
                               size_t* chunkSize);
} braidTuner_v6_t;
static_assert(offsetof(braidTuner_v6_t, getChunkSize) == sizeof(braidTuner_v5_t), "v6 appends to v5");

// ncclTuner_v7_t (2.32.6): v6's members, init taking v7's constants.
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, braidTunerLogger_t logFunction,
                       braidTunerNvlDomainInfo_t* nvlDomainInfo, braidTunerConstants_v7_t* constants);
  ncclResult_t (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
  ncclResult_t (*getChunkSize)(void* context, int collType, size_t nBytes, int algo, int proto, int nChannels,
                               size_t* chunkSize);
} braidTuner_v7_t;
static_assert(sizeof(braidTuner_v7_t) == sizeof(braidTuner_v6_t) &&
                  offsetof(braidTuner_v7_t, getCollInfo) == offsetof(braidTuner_v5_t, getCollInfo) &&
                  offsetof(braidTuner_v7_t, finalize) == offsetof(braidTuner_v5_t, finalize),
              "v7 changes only init's constants");
static_assert(sizeof(braidTunerConstants_v7_t) == sizeof(braidTunerConstants_t) + 5 * 3 * sizeof(double),
              "one more compute capability in five tables");

}  // extern "C"

// A tuner plugin for braid's tests (tests/mp/test_tuner.cc), built as NCCL
// builds its plugins: a C table exported under ncclTunerPlugin_vN, N from
// SCRIPTED_TUNER_VERSION (7, 6, 4 or 2), declared here from NCCL's
// tuner_v*.h, not from braid's headers.
//
// What it does comes from the process's environment, read at init (as a
// real plugin reads its configuration; a getenv per call would be the
// plugin's cost in any timing):
//   BRAID_TEST_TUNER_PICK   ring_simple, ring_ll, tree_simple: set that entry
//                           to 0 where it is offered (v2: return it);
//                           rewrite: every offered entry to 7 but
//                           ring/simple to 5 (a plugin with a model of its
//                           own); fail: getCollInfo fails; none (or unset):
//                           touch nothing
//   BRAID_TEST_TUNER_CHANNELS  nChannels to ask for
//   BRAID_TEST_TUNER_INIT_FAIL=1  init fails
//   BRAID_TEST_TUNER_LOG    a file each call appends a line to: init's
//                           arguments, each getCollInfo's and the table it
//                           was shown, finalize
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

typedef enum { ncclSuccess = 0, ncclInternalError = 3 } ncclResult_t;
typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

namespace {

constexpr int kAlgos = 7, kProtos = 3;  // NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS
constexpr int kTree = 0, kRing = 1, kLL = 0, kSimple = 2;

// The environment's answers, read by the process's first init.
struct Script {
  const char* log = nullptr;
  const char* pick = "none";
  int channels = 0;  // 0: leave nChannels
};
Script g_script;

void read_script_once() {
  g_script.log = std::getenv("BRAID_TEST_TUNER_LOG");
  if (const char* p = std::getenv("BRAID_TEST_TUNER_PICK")) g_script.pick = p;
  if (const char* c = std::getenv("BRAID_TEST_TUNER_CHANNELS")) g_script.channels = std::atoi(c);
}

struct Context {
  unsigned long long comm_id;
  size_t nranks, nnodes;
};

void note(const char* fmt, ...) {
  const char* path = g_script.log;
  if (!path) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  va_list args;
  va_start(args, fmt);
  std::vfprintf(f, fmt, args);
  va_end(args);
  std::fputc('\n', f);
  std::fclose(f);
}

const char* pick() { return g_script.pick; }

ncclResult_t start(void** context, unsigned long long comm_id, size_t nranks, size_t nnodes, ncclDebugLogger_t log,
                   const char* domains) {
  static std::once_flag once;  // thread ranks init concurrently
  std::call_once(once, read_script_once);
  note("init v%d comm=%llx nranks=%zu nnodes=%zu %s", SCRIPTED_TUNER_VERSION, comm_id, nranks, nnodes, domains);
  if (log) log(3, 0, __FILE__, __LINE__, "scripted tuner: init for %zu ranks", nranks);
  const char* fail = std::getenv("BRAID_TEST_TUNER_INIT_FAIL");
  if (fail && std::strcmp(fail, "1") == 0) return ncclInternalError;
  *context = new Context{comm_id, nranks, nnodes};
  return ncclSuccess;
}

ncclResult_t stop(void* context) {
  note("finalize nranks=%zu", static_cast<Context*>(context)->nranks);
  delete static_cast<Context*>(context);
  return ncclSuccess;
}

void ask_channels(int* nChannels) {
  if (g_script.channels) *nChannels = g_script.channels;
}

#if SCRIPTED_TUNER_VERSION >= 3
// Logs the table as shown, then answers in it.
ncclResult_t answer(int collType, size_t nBytes, int numPipeOps, float** collCostTable, int numAlgo, int numProto,
                    int regBuff, int* nChannels) {
  float (*table)[kProtos] = reinterpret_cast<float (*)[kProtos]>(collCostTable);
  int offered = 0;
  for (int a = 0; a < kAlgos; ++a)
    for (int p = 0; p < kProtos; ++p) offered += table[a][p] >= 0;
  note("coll func=%d bytes=%zu pipe=%d reg=%d algos=%d protos=%d ring_simple=%g ring_ll=%g offered=%d", collType,
       nBytes, numPipeOps, regBuff, numAlgo, numProto, double(table[kRing][kSimple]), double(table[kRing][kLL]),
       offered);
  ask_channels(nChannels);
  const char* p = pick();
  if (std::strcmp(p, "fail") == 0) return ncclInternalError;
  auto choose = [&](int a, int pr) {
    if (table[a][pr] >= 0) table[a][pr] = 0;
  };
  if (std::strcmp(p, "ring_simple") == 0) choose(kRing, kSimple);
  if (std::strcmp(p, "ring_ll") == 0) choose(kRing, kLL);
  if (std::strcmp(p, "tree_simple") == 0) choose(kTree, kSimple);
  if (std::strcmp(p, "rewrite") == 0)
    for (int a = 0; a < kAlgos; ++a)
      for (int pr = 0; pr < kProtos; ++pr)
        if (table[a][pr] >= 0) table[a][pr] = a == kRing && pr == kSimple ? 5 : 7;
  return ncclSuccess;
}
#endif

}  // namespace

extern "C" {

#if SCRIPTED_TUNER_VERSION >= 6
typedef struct {
  int nNvlDomains, minRanksPerNvlDomain, maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v6_t;
// ncclTunerConstants_v5_t (v6) and _v7_t: 7 tables of doubles, the last 5 of
// them one row per compute capability (v7: 5 capabilities, v5: 4).
constexpr int kCompCaps = SCRIPTED_TUNER_VERSION == 7 ? 5 : 4;
typedef struct {
  double values[7 * 3 + 3 * 7 * 3 + 5 * kCompCaps * 3];
} ncclTunerConstants_v6_t;
typedef struct {
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, size_t, size_t, ncclDebugLogger_t, ncclNvlDomainInfo_v6_t*,
                       ncclTunerConstants_v6_t*);
  ncclResult_t (*getCollInfo)(void*, int, size_t, int, float**, int, int, int, int*);
  ncclResult_t (*finalize)(void*);
  ncclResult_t (*getChunkSize)(void*, int, size_t, int, int, int, size_t*);
} ncclTuner_v6_t;

static ncclResult_t init6(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                          ncclNvlDomainInfo_v6_t* nvl, ncclTunerConstants_v6_t* constants) {
  double sum = 0;
  for (double v : constants->values) sum += v;
  char domains[128];
  std::snprintf(domains, sizeof domains, "domains=%d,%d,%d constants=%g", nvl->nNvlDomains, nvl->minRanksPerNvlDomain,
                nvl->maxRanksPerNvlDomain, sum);
  // braid must not read what a plugin writes here; the last element is past
  // a v5-sized table (ASan builds see a short one).
  constants->values[0] = constants->values[sizeof constants->values / sizeof(double) - 1] = 1e9;
  return start(context, (unsigned long long)commId, nRanks, nNodes, log, domains);
}
static ncclResult_t info6(void*, int collType, size_t nBytes, int numPipeOps, float** table, int numAlgo,
                          int numProto, int regBuff, int* nChannels) {
  return answer(collType, nBytes, numPipeOps, table, numAlgo, numProto, regBuff, nChannels);
}
static ncclResult_t chunk6(void*, int, size_t, int, int, int, size_t*) {
  note("getChunkSize");
  return ncclSuccess;
}
#if SCRIPTED_TUNER_VERSION == 7  // v6's table, under v7's name
__attribute__((visibility("default"))) ncclTuner_v6_t ncclTunerPlugin_v7 = {"scripted7", init6, info6, stop, chunk6};
#else
__attribute__((visibility("default"))) ncclTuner_v6_t ncclTunerPlugin_v6 = {"scripted6", init6, info6, stop, chunk6};
#endif

#elif SCRIPTED_TUNER_VERSION == 4
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t, size_t, ncclDebugLogger_t, void**);
  ncclResult_t (*getCollInfo)(void*, int, size_t, int, float**, int, int, int, int*);
  ncclResult_t (*destroy)(void*);
} ncclTuner_v4_t;

static ncclResult_t init4(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** context) {
  return start(context, 0, nRanks, nNodes, log, "");
}
static ncclResult_t info4(void*, int collType, size_t nBytes, int numPipeOps, float** table, int numAlgo,
                          int numProto, int regBuff, int* nChannels) {
  return answer(collType, nBytes, numPipeOps, table, numAlgo, numProto, regBuff, nChannels);
}
__attribute__((visibility("default"))) ncclTuner_v4_t ncclTunerPlugin_v4 = {"scripted4", init4, info4, stop};

#else
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t, size_t, ncclDebugLogger_t, void**);
  ncclResult_t (*getCollInfo)(void*, int, size_t, int, int, int, int*, int*, int*);
  ncclResult_t (*destroy)(void*);
} ncclTuner_v2_t;

static ncclResult_t init2(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** context) {
  return start(context, 0, nRanks, nNodes, log, "");
}
static ncclResult_t info2(void*, int collType, size_t nBytes, int collNetSupport, int nvlsSupport, int numPipeOps,
                          int* algorithm, int* protocol, int* nChannels) {
  note("coll func=%d bytes=%zu pipe=%d collnet=%d nvls=%d", collType, nBytes, numPipeOps, collNetSupport,
       nvlsSupport);
  ask_channels(nChannels);
  const char* p = pick();
  if (std::strcmp(p, "fail") == 0) return ncclInternalError;
  if (std::strcmp(p, "ring_simple") == 0) *algorithm = kRing, *protocol = kSimple;
  if (std::strcmp(p, "ring_ll") == 0) *algorithm = kRing, *protocol = kLL;
  if (std::strcmp(p, "tree_simple") == 0) *algorithm = kTree, *protocol = kSimple;
  return ncclSuccess;
}
__attribute__((visibility("default"))) ncclTuner_v2_t ncclTunerPlugin_v2 = {"scripted2", init2, info2, stop};
#endif

}  // extern "C"

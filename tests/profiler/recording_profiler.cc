// A profiler plugin for braid's tests: NCCL's ncclProfiler_v5 table, or
// with RECORDING_V7 ncclProfiler_v7 (whose events carry the user's tag), as
// a plugin author writes it from NVIDIA's plugins/profiler headers (declared
// here on its own, not from braid's src/runtime/profiler_abi.h, so that a
// layout mistake there is caught).  Every call appends one line to the file
// BRAID_TEST_PROFILER_LOG (one write(2) per line, O_APPEND: threads and
// processes may share it).  BRAID_TEST_PROFILER_MASK sets the activation
// mask (default: every event) at the first init only, and keeps the mask's
// address, as NVIDIA's example plugin does; BRAID_TEST_PROFILER_FAIL_INIT=1
// fails init; BRAID_TEST_PROFILER_NO_CONTEXT=1 succeeds with no context and
// no events, as NVIDIA's Inspector does when it is off (a finalize of that
// null context is logged: it would crash such a plugin).
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#ifdef RECORDING_V7
#define V7_TAG uint64_t userTag;
#define V7_COLL const char* kernelVariant; bool isSymColl; uint64_t userTag;
#define TABLE ncclProfiler_v7
#define TAG(m) (unsigned long)(m).userTag
#else
#define V7_TAG
#define V7_COLL
#define TABLE ncclProfiler_v5
#define TAG(m) 0UL
#endif

extern "C" {

typedef int ncclResult_t;  // ncclSuccess is 0

struct EventDescr {  // ncclProfilerEventDescr_v5_t (v7: each member with its tag)
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct { bool graphCaptured; int groupDepth; } groupApi;
    struct {
      const char* func; size_t count; const char* datatype; int root; void* stream; bool graphCaptured; V7_TAG
    } collApi;
    struct { const char* func; size_t count; const char* datatype; void* stream; bool graphCaptured; V7_TAG } p2pApi;
    struct { void* stream; } kernelLaunch;
    struct {
      uint64_t seqNumber; const char* func; const void* sendBuff; void* recvBuff; size_t count; int root;
      const char* datatype; uint8_t nChannels; uint8_t nWarps; const char* algo; const char* proto; void* parentGroup;
      V7_COLL
    } coll;
    struct {
      const char* func; void* buff; const char* datatype; size_t count; int peer; uint8_t nChannels; void* parentGroup;
      V7_TAG
    } p2p;
    struct { uint8_t channelId; uint64_t pTimer; } kernelCh;
  };
};
union StateArgs {  // ncclProfilerEventStateArgs_v5_t
  struct { size_t transSize; } proxyStep;
  struct { uint64_t pTimer; } kernelCh;
};
typedef void (*Logger)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

}  // extern "C"

namespace {

struct Event {
  uint64_t type;
};
struct Context {
  std::mutex mutex;
  std::vector<Event*> events;  // freed at finalize: handles stay unique while the test reads the log
};

void log_line(const char* fmt, ...) {
  const char* path = std::getenv("BRAID_TEST_PROFILER_LOG");
  if (!path) return;
  char line[1024];
  va_list args;
  va_start(args, fmt);
  int n = std::vsnprintf(line, sizeof line - 1, fmt, args);
  va_end(args);
  if (n < 0) return;
  if (n > int(sizeof line) - 2) n = int(sizeof line) - 2;
  line[n++] = '\n';
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (fd < 0) return;
  (void)!write(fd, line, size_t(n));
  close(fd);
}

ncclResult_t init(void** context, uint64_t commId, int* mask, const char* commName, int nNodes, int nranks, int rank,
                  Logger logfn) {
  if (logfn) logfn(3, 0, __FILE__, __LINE__, "recording profiler: init rank %d", rank);
  if (std::getenv("BRAID_TEST_PROFILER_FAIL_INIT")) {
    log_line("init-failed comm=%lx rank=%d", (unsigned long)commId, rank);
    return 3;  // ncclInternalError
  }
  if (std::getenv("BRAID_TEST_PROFILER_NO_CONTEXT")) {
    *context = nullptr;
    *mask = 0;
    log_line("init-no-context comm=%lx rank=%d", (unsigned long)commId, rank);
    return 0;
  }
  static std::mutex first_mutex;
  static int* first_mask = nullptr;
  {
    std::lock_guard<std::mutex> lock(first_mutex);
    if (!first_mask) {
      const char* m = std::getenv("BRAID_TEST_PROFILER_MASK");
      *mask = m ? int(std::strtol(m, nullptr, 0)) : 0xfff;
      first_mask = mask;
    } else if (first_mask != mask) {
      log_line("mask-moved rank=%d", rank);  // NCCL hands every init the same int
    }
  }
  *context = new Context;
  log_line("init comm=%lx rank=%d nranks=%d nnodes=%d name=%s ctx=%p pid=%d", (unsigned long)commId, rank, nranks,
           nNodes, commName ? commName : "-", *context, int(getpid()));
  return 0;
}

ncclResult_t start_event(void* context, void** handle, EventDescr* d) {
  auto* ctx = static_cast<Context*>(context);
  auto* e = new Event{d->type};
  {
    std::lock_guard<std::mutex> lock(ctx->mutex);
    ctx->events.push_back(e);
  }
  *handle = e;
  switch (d->type) {
    case 1 << 8:
      log_line("start GroupApi h=%p rank=%d depth=%d", (void*)e, d->rank, d->groupApi.groupDepth);
      break;
    case 1 << 9:
      log_line("start CollApi h=%p parent=%p rank=%d func=%s count=%zu type=%s root=%d tag=%lu", (void*)e,
               d->parentObj, d->rank, d->collApi.func, d->collApi.count, d->collApi.datatype, d->collApi.root,
               TAG(d->collApi));
      break;
    case 1 << 10:
      log_line("start P2pApi h=%p parent=%p rank=%d func=%s count=%zu type=%s", (void*)e, d->parentObj, d->rank,
               d->p2pApi.func, d->p2pApi.count, d->p2pApi.datatype);
      break;
    case 1 << 11:
      log_line("start KernelLaunch h=%p parent=%p rank=%d", (void*)e, d->parentObj, d->rank);
      break;
    case 1 << 0:
      log_line("start Group h=%p rank=%d", (void*)e, d->rank);
      break;
    case 1 << 1:
      log_line("start Coll h=%p parent=%p group=%p rank=%d seq=%lu func=%s count=%zu type=%s root=%d channels=%d "
               "send=%p recv=%p tag=%lu", (void*)e, d->parentObj, d->coll.parentGroup, d->rank,
               (unsigned long)d->coll.seqNumber, d->coll.func, d->coll.count, d->coll.datatype, d->coll.root,
               int(d->coll.nChannels), d->coll.sendBuff, d->coll.recvBuff, TAG(d->coll));
      break;
    case 1 << 2:
      log_line("start P2p h=%p parent=%p group=%p rank=%d func=%s count=%zu type=%s peer=%d", (void*)e, d->parentObj,
               d->p2p.parentGroup, d->rank, d->p2p.func, d->p2p.count, d->p2p.datatype, d->p2p.peer);
      break;
    case 1 << 6:
      log_line("start KernelCh h=%p parent=%p rank=%d channel=%d ptimer=%lu", (void*)e, d->parentObj, d->rank,
               int(d->kernelCh.channelId), (unsigned long)d->kernelCh.pTimer);
      break;
    default:
      log_line("start Other h=%p type=%lu", (void*)e, (unsigned long)d->type);
  }
  return 0;
}

ncclResult_t stop_event(void* handle) {
  log_line("stop h=%p", handle);
  return 0;
}

ncclResult_t record_state(void* handle, int state, StateArgs* args) {
  const auto* e = static_cast<Event*>(handle);
  if (e->type == (1 << 6) && args) log_line("state h=%p state=%d ptimer=%lu", handle, state,
                                            (unsigned long)args->kernelCh.pTimer);
  else log_line("state h=%p state=%d", handle, state);
  return 0;
}

ncclResult_t finalize(void* context) {
  auto* ctx = static_cast<Context*>(context);
  log_line("finalize ctx=%p", context);
  if (!ctx) return 0;
  for (Event* e : ctx->events) delete e;
  delete ctx;
  return 0;
}

}  // namespace

extern "C" {
struct ProfilerV5 {
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, int*, const char*, int, int, int, Logger);
  ncclResult_t (*startEvent)(void*, void**, EventDescr*);
  ncclResult_t (*stopEvent)(void*);
  ncclResult_t (*recordEventState)(void*, int, StateArgs*);
  ncclResult_t (*finalize)(void*);
};
__attribute__((visibility("default"))) ProfilerV5 TABLE = {"braid-recording", init, start_event, stop_event,
                                                            record_state, finalize};
}

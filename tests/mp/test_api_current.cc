// The API NCCL added after 2.28 (2.29-2.32) as a client built against
// braid's header sees it: the version policy, ncclConfig_t of several
// releases' sizes read member by member, the ncclParam* calls, the
// per-collective nccl*Config calls choosing braid's schedules, and the
// bad-input table with a row for every new function.
#include <catch2/catch.hpp>

#include <fcntl.h>

#include <unistd.h>

#include <algorithm>
#include <set>

#include "collective_check.h"
#include "read_file.h"
#include "scoped_env.h"

using namespace mp;

namespace {

struct Expect {
  Failures& f;
  std::string who;
  void operator()(ncclResult_t got, ncclResult_t want, const std::string& what) const {
    if (got != want)
      f.fail(fmt::format("{}{}: got {} ({}), want {}", who, what, int(got), ncclGetLastError(nullptr), int(want)));
  }
};

// A one-rank communicator from `config`, or NULL (with the result in *r).
ncclComm_t one_rank(ncclConfig_t* config, ncclResult_t* r) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return nullptr;
  ncclComm_t comm = nullptr;
  *r = ncclCommInitRankConfig(&comm, 1, id, 0, config);
  return comm;
}

// Until a non-blocking init is done.
ncclResult_t settle(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 20000 && state == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

}  // namespace

TEST_CASE("version policy: the header's API level, or BRAID_NCCL_VERSION", "[api][version]") {
  int v = 0;
  REQUIRE(ncclGetVersion(&v) == ncclSuccess);
  CHECK(v == NCCL_VERSION_CODE);
  CHECK(v == NCCL_VERSION(2, 32, 6));
  {
    ScopedEnv pin("BRAID_NCCL_VERSION", "2.30.4");  // a client that requires exactly its header's version
    REQUIRE(ncclGetVersion(&v) == ncclSuccess);
    CHECK(v == 23004);
  }
  {
    ScopedEnv pin("BRAID_NCCL_VERSION", "22809");
    REQUIRE(ncclGetVersion(&v) == ncclSuccess);
    CHECK(v == 22809);
  }
  for (const char* bad : {"2.27.3", "2.33.0", "3.0.0", "banana", "2.30"}) {
    ScopedEnv pin("BRAID_NCCL_VERSION", bad);
    INFO(bad);
    CHECK(ncclGetVersion(&v) == ncclInvalidUsage);
  }
  CHECK(std::string(ncclGetErrorString(ncclTimeout)).find("timeout") == 0);
}

TEST_CASE("ncclConfig_t of a 2.28, a 2.30 and a 2.32 header are each read member by member", "[api][config]") {
  ncclResult_t r = ncclInternalError;
  SECTION("2.28: 80 bytes, nothing past them is read") {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.size = 80;
    c.version = NCCL_VERSION(2, 28, 9);
    c.blocking = 0;          // read: the init returns ncclInProgress
    c.numRmaCtx = -7;        // past a 2.28 struct: read, it would be refused
    c.nvlsHostMode = 12345;  // likewise
    ncclComm_t comm = one_rank(&c, &r);
    CHECK(r == ncclInProgress);
    REQUIRE(comm);
    CHECK(settle(comm) == ncclSuccess);
    // One RMA context and one signal index: the defaults, not what lay past the struct.
    CHECK(ncclSignal(0, 0, 0, 0, comm, nullptr) == ncclInvalidUsage);  // arguments fine, no window yet
    CHECK(ncclSignal(0, 0, 1, 0, comm, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  SECTION("2.30: 96 bytes; numRmaCtx read, 2.31's numRmaSig not") {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.size = 96;
    c.version = NCCL_VERSION(2, 30, 7);
    c.numRmaCtx = 2;
    c.numRmaSig = 0;  // 2.31's: would be refused if read
    ncclComm_t comm = one_rank(&c, &r);
    CHECK(r == ncclSuccess);
    REQUIRE(comm);
    CHECK(ncclSignal(0, 0, 1, 0, comm, nullptr) == ncclInvalidUsage);     // ctx 1 < 2
    CHECK(ncclSignal(0, 1, 0, 0, comm, nullptr) == ncclInvalidArgument);  // sigIdx 1 >= 1
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  SECTION("2.32: this header's 120 bytes, every member read") {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    CHECK(c.size == 120);
    c.numRmaCtx = 2;
    c.numRmaSig = 3;
    c.rmaEagerInit = 1;
    ncclComm_t comm = one_rank(&c, &r);
    CHECK(r == ncclSuccess);
    REQUIRE(comm);
    // rmaEagerInit: RMA connected at init, so a signal needs no window.
    CHECK(ncclSignal(0, 2, 1, 0, comm, nullptr) == ncclSuccess);
    ncclWaitSignalDesc_t d{1, 0, 2, 1};
    CHECK(ncclWaitSignal(1, &d, comm, nullptr) == ncclSuccess);
    CHECK(ncclSignal(0, 3, 0, 0, comm, nullptr) == ncclInvalidArgument);
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  SECTION("a size that does not fit the version is refused") {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.size = 80;
    c.version = NCCL_VERSION(2, 31, 2);  // 2.31's struct is 112 bytes
    ncclComm_t comm = one_rank(&c, &r);
    CHECK(r == ncclInvalidArgument);
    CHECK(comm == nullptr);
    CHECK(std::string(ncclGetLastError(nullptr)).find("too small") != std::string::npos);
  }
}

TEST_CASE("config values NCCL's parseCommConfig refuses are refused, naming the member", "[api][config]") {
  using Set = void (*)(ncclConfig_t&);
  const std::vector<std::pair<Set, const char*>> bad = {
      {[](ncclConfig_t& c) { c.cgaClusterSize = -3; }, "cgaClusterSize = -3"},
      {[](ncclConfig_t& c) { c.minCTAs = 0; }, "minCTAs/maxCTAs = 0/unset"},
      {[](ncclConfig_t& c) { c.maxCTAs = 0; }, "minCTAs/maxCTAs = unset/0"},
      {[](ncclConfig_t& c) { c.minCTAs = 8, c.maxCTAs = 2; }, "minCTAs/maxCTAs = 8/2"},
      {[](ncclConfig_t& c) { c.splitShare = 2; }, "splitShare = 2"},
      {[](ncclConfig_t& c) { c.collnetEnable = 5; }, "collnetEnable = 5"},
      {[](ncclConfig_t& c) { c.CTAPolicy = 99; }, "CTAPolicy = 99"},
      {[](ncclConfig_t& c) { c.shrinkShare = 7; }, "shrinkShare = 7"},
      {[](ncclConfig_t& c) { c.nvlsCTAs = 0; }, "nvlsCTAs = 0"},
      {[](ncclConfig_t& c) { c.nChannelsPerNetPeer = 65; }, "nChannelsPerNetPeer = 65"},
      {[](ncclConfig_t& c) { c.nvlinkCentricSched = 3; }, "nvlinkCentricSched = 3"},
      {[](ncclConfig_t& c) { c.maxP2pPeers = 0; }, "maxP2pPeers = 0"},
      {[](ncclConfig_t& c) { c.graphStreamOrdering = 5; }, "graphStreamOrdering = 5"},
      {[](ncclConfig_t& c) { c.launchOrderImplicit = 9; }, "launchOrderImplicit = 9"},
      {[](ncclConfig_t& c) { c.nvlsHostMode = 77; }, "nvlsHostMode = 77"},
      {[](ncclConfig_t& c) { c.numRmaCtx = -1; }, "numRmaCtx = -1"},
  };
  ncclResult_t r = ncclSuccess;
  for (const auto& [set, says] : bad) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    set(c);
    INFO(says);
    CHECK(one_rank(&c, &r) == nullptr);
    CHECK(r == ncclInvalidArgument);
    CHECK(std::string(ncclGetLastError(nullptr)).find(says) != std::string::npos);
  }
  // What NCCL takes: one bound alone, a policy of flags, an nvlsHostMode of bits or "disable all".
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.minCTAs = 8;
  c.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;
  c.nvlsHostMode = ncclNvlsHostModeDisable;
  ncclComm_t comm = one_rank(&c, &r);
  CHECK(r == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("config numRmaCtx 0: the communicator works, its one-sided calls are refused saying RMA is off",
          "[api][config][rma]") {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.numRmaCtx = 0;  // NCCL: RMA disabled (it refuses only < 0)
  ncclResult_t r = ncclInternalError;
  ncclComm_t comm = one_rank(&c, &r);
  CHECK(r == ncclSuccess);
  REQUIRE(comm);
  float x = 2;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclSignal(0, 0, 0, 0, comm, nullptr) == ncclInvalidUsage);
  CHECK(std::string(ncclGetLastError(comm)).find("RMA is off on this communicator (config numRmaCtx 0)") !=
        std::string::npos);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("config trafficClass: 0..255 taken, anything else refused", "[api][config]") {
  ncclResult_t r = ncclSuccess;
  for (int bad : {-1, 256, 1 << 20}) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.trafficClass = bad;
    CHECK(one_rank(&c, &r) == nullptr);
    CHECK(r == ncclInvalidArgument);
    CHECK(std::string(ncclGetLastError(nullptr)).find("trafficClass = " + std::to_string(bad) + " (expected 0..255)") !=
          std::string::npos);
  }
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.trafficClass = 104;
  ncclComm_t comm = one_rank(&c, &r);
  REQUIRE(comm);
  CHECK(r == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("NCCL_RMA_EAGER_INIT overrides the config's rmaEagerInit where it is 0 or 1", "[api][config][rma]") {
  ncclResult_t r = ncclSuccess;
  // Connected at init: a signal (to itself) needs no window first.
  auto connected_at_init = [](ncclComm_t comm) {
    if (ncclSignal(0, 0, 0, 0, comm, nullptr) != ncclSuccess) return false;
    ncclWaitSignalDesc_t d{1, 0, 0, 0};
    return ncclWaitSignal(1, &d, comm, nullptr) == ncclSuccess;
  };
  SECTION("1 with no config") {
    ScopedEnv eager("NCCL_RMA_EAGER_INIT", "1");
    ncclComm_t comm = one_rank(nullptr, &r);
    REQUIRE(comm);
    CHECK(connected_at_init(comm));
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  SECTION("0 over a config's 1") {
    ScopedEnv lazy("NCCL_RMA_EAGER_INIT", "0");
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.rmaEagerInit = 1;
    ncclComm_t comm = one_rank(&c, &r);
    REQUIRE(comm);
    CHECK(ncclSignal(0, 0, 0, 0, comm, nullptr) == ncclInvalidUsage);  // no window yet: not connected
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  SECTION("another value leaves the config's") {
    ScopedEnv odd("NCCL_RMA_EAGER_INIT", "2");
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.rmaEagerInit = 1;
    ncclComm_t comm = one_rank(&c, &r);
    REQUIRE(comm);
    CHECK(connected_at_init(comm));
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
}

// NCCL 2.30 exports it for code built with its ncclParam<T> (its
// src/include/param/utils.h); nccl.h does not declare it.
extern "C" const char* ncclParamEnvPluginGet(const char* key, bool env_init);

TEST_CASE("ncclParamEnvPluginGet: a variable's value as braid reads it, kept for the process", "[api][param]") {
  const char* first = nullptr;
  {
    ScopedEnv timeout("BRAID_TIMEOUT", "117");
    first = ncclParamEnvPluginGet("BRAID_TIMEOUT", true);
    REQUIRE(first);
    CHECK(std::string(first) == "117");
    CHECK(std::string(ncclParamEnvPluginGet("BRAID_TIMEOUT", false)) == "117");
    ScopedEnv empty("NCCL_TESTS_SOMETHING_EMPTY", "");
    const char* set_empty = ncclParamEnvPluginGet("NCCL_TESTS_SOMETHING_EMPTY", true);
    REQUIRE(set_empty);  // set and empty is not unset
    CHECK(std::string(set_empty).empty());
  }
  CHECK(ncclParamEnvPluginGet("BRAID_TIMEOUT", true) == nullptr);  // ScopedEnv unset it
  CHECK(std::string(first) == "117");  // the earlier answer still reads
  CHECK(ncclParamEnvPluginGet("NCCL_NO_SUCH_VARIABLE_AT_ALL", true) == nullptr);
  CHECK(ncclParamEnvPluginGet(nullptr, true) == nullptr);
}

TEST_CASE("ncclParam*: braid's and NCCL's variables by name, typed and raw", "[api][param]") {
  ScopedEnv timeout("BRAID_TIMEOUT", "117");
  ncclParamHandle_t h = nullptr;
  REQUIRE(ncclParamBind(&h, "BRAID_TIMEOUT") == ncclSuccess);
  int8_t i8 = 0;
  int32_t i32 = 0;
  uint64_t u64 = 0;
  CHECK(ncclParamGetI8(h, &i8) == ncclSuccess);
  CHECK(i8 == 117);
  CHECK(ncclParamGetI32(h, &i32) == ncclSuccess);
  CHECK(i32 == 117);
  CHECK(ncclParamGetU64(h, &u64) == ncclSuccess);
  CHECK(u64 == 117);
  const char* text = nullptr;
  CHECK(ncclParamGetStr(h, &text) == ncclSuccess);
  CHECK(std::string(text) == "117");
  int64_t raw = 0;
  int len = 0;
  CHECK(ncclParamGet(h, &raw, sizeof(raw), &len) == ncclSuccess);
  CHECK((raw == 117 && len == 8));
  ncclParamHandle_t s = nullptr;
  REQUIRE(ncclParamBind(&s, "BRAID_TRANSPORT") == ncclSuccess);
  CHECK(ncclParamGetStr(s, &text) == ncclSuccess);
  CHECK(std::string(text) == "auto");
  CHECK(ncclParamGetI32(s, &i32) == ncclInvalidArgument);  // a string
  char buf[16] = {};
  CHECK(ncclParamGet(s, buf, sizeof(buf), &len) == ncclSuccess);
  CHECK((std::string(buf) == "auto" && len == 5));
  const char* value = nullptr;
  int value_len = -1;
  {
    ScopedEnv debug("NCCL_DEBUG", "VERSION");
    CHECK(ncclParamGetParameter("NCCL_DEBUG", &value, &value_len) == ncclSuccess);
    CHECK((std::string(value) == "VERSION" && value_len == 7));
  }
  const char** keys = nullptr;
  int nkeys = 0;
  REQUIRE(ncclParamGetAllParameterKeys(&keys, &nkeys) == ncclSuccess);
  std::set<std::string> names(keys, keys + nkeys);
  CHECK(names.count("BRAID_TIMEOUT") == 1);
  CHECK(names.count("NCCL_MULTI_RANK_GPU_ENABLE") == 1);
  CHECK(names.size() == size_t(nkeys));
  // The dump goes to standard output: every key, with its value.
  std::fflush(stdout);
  char path[] = "/tmp/braid_param_dump_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  int saved = dup(1);
  dup2(fd, 1);
  ncclParamDumpAll();
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  close(fd);
  const std::string all = read_file(path);
  unlink(path);
  CHECK(all.find("BRAID_TIMEOUT") != std::string::npos);
  CHECK(all.find("Current value=117") != std::string::npos);
  setenv("BRAID_TIMEOUT", "300", 1);
  CHECK(ncclParamGetI8(h, &i8) == ncclInvalidArgument);  // does not fit
  uint16_t u16 = 0;
  CHECK(ncclParamGetU16(h, &u16) == ncclSuccess);
  CHECK(u16 == 300);
}

TEST_CASE("nccl*Config: the algorithm selection picks braid's schedule per call", "[api][collconfig]") {
  // Each rank logs the schedule every collective ran (NCCL_DEBUG=INFO, COLL).
  std::vector<pid_t> pids = fork_ranks(4, 60, 1, [](int rank, const std::vector<ncclUniqueId>& ids) {
    const std::string log = fmt::format("/tmp/braid_collconfig_{}.log", getpid());
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
    setenv("NCCL_DEBUG_FILE", log.c_str(), 1);
    ncclResetDebugInit();
    Failures f;
    ncclComm_t comm = nullptr;
    MP_NCCL(f, ncclCommInitRank(&comm, 4, ids[0], rank));
    if (!comm) return 1;
    const int n = 4;
    std::vector<float> in(40000, float(rank + 1)), out(in.size());
    auto allreduce = [&](const char* selection, int force) {
      ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
      c.algSelection = selection;
      c.forceAlgSelection = force;
      std::fill(out.begin(), out.end(), -1.0f);
      ncclResult_t r = ncclAllReduceConfig(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr, &c);
      if (r == ncclSuccess && std::count(out.begin(), out.end(), float(n * (n + 1) / 2)) != ptrdiff_t(out.size()))
        f.fail(fmt::format("{}: wrong sums", selection));
      return r;
    };
    // One call ring, the next StragglAR, then NCCL's spelling of ring.
    MP_NCCL(f, allreduce("ring", 1));
    MP_NCCL(f, allreduce("stragglar", 1));
    MP_NCCL(f, allreduce("RING_SIMPLE", 1));
    // '+' is and: StragglAR alone.  ("^ring + ^rd" would leave the cost
    // model's cheapest of the rest and braid's fast paths: test_selected_algorithm.cc.)
    MP_NCCL(f, allreduce("^ring + stragglar", 1));
    // NCCL's tree is not braid's: an error when forced, the usual choice when not.
    if (allreduce("tree", 1) != ncclInvalidArgument) f.fail("forced tree was not refused");
    MP_NCCL(f, allreduce("tree", 0));
    // Every other collective with a selection braid has, exact.
    ncclCollConfig_t ag = NCCL_COLLCONFIG_INITIALIZER;
    ag.algSelection = "direct";
    std::vector<int32_t> mine(1000, rank * 7), all(4000, -1);
    MP_NCCL(f, ncclAllGatherConfig(mine.data(), all.data(), mine.size(), ncclInt32, comm, nullptr, &ag));
    for (int r = 0; r < n; ++r)
      if (all[size_t(r) * 1000 + 999] != r * 7) f.fail("direct allgather");
    MP_NCCL(f, ncclCommDestroy(comm));
    const std::string s = read_file(log);
    // The log names each call's schedule, in call order.
    size_t ring1 = s.find("allreduce(ring_allreduce)");
    size_t strag = s.find("allreduce(stragglar_allreduce)", ring1 == std::string::npos ? 0 : ring1);
    size_t ring2 = s.find("allreduce(ring_allreduce)", strag == std::string::npos ? 0 : strag);
    size_t strag2 = s.find("allreduce(stragglar_allreduce)", ring2 == std::string::npos ? 0 : ring2);
    if (ring1 == std::string::npos || strag == std::string::npos || ring2 == std::string::npos ||
        strag2 == std::string::npos)
      f.fail(fmt::format("rank {}: the log does not show ring, stragglar, ring, stragglar in order", rank));
    if (s.find("allgather(direct_allgather)") == std::string::npos) f.fail("the log does not show direct allgather");
    unlink(log.c_str());
    return f.count ? 1 : 0;
  });
  int bad = int(4 - pids.size());
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  CHECK(bad == 0);
}

TEST_CASE("bad arguments of every function NCCL 2.29-2.32 added", "[api][errors][threads]") {
  // Without a communicator.
  {
    Failures f;
    Expect expect{f, ""};
    ncclComm_t nc = nullptr;
    ncclUniqueId plain;
    REQUIRE(ncclGetUniqueId(&plain) == ncclSuccess);
    expect(ncclCommGetUniqueId(nullptr, &plain), ncclInvalidArgument, "GetUniqueId NULL comm");
    expect(ncclCommGrow(nullptr, 3, nullptr, 2, &nc, nullptr), ncclInvalidArgument, "Grow: joiner without id");
    expect(ncclCommGrow(nullptr, 3, &plain, 2, &nc, nullptr), ncclInvalidArgument, "Grow: not a grow id");
    expect(ncclCommGrow(nullptr, 3, &plain, 2, nullptr, nullptr), ncclInvalidArgument, "Grow: NULL newcomm");
    ncclConfig_t badc = NCCL_CONFIG_INITIALIZER;
    badc.magic = 1;
    expect(ncclCommGrow(nullptr, 3, &plain, 2, &nc, &badc), ncclInvalidArgument, "Grow: bad config");
    expect(ncclCommSuspend(nullptr, NCCL_SUSPEND_MEM), ncclInvalidArgument, "Suspend NULL comm");
    expect(ncclCommResume(nullptr), ncclInvalidArgument, "Resume NULL comm");
    uint64_t v = 0;
    expect(ncclCommMemStats(nullptr, ncclStatGpuMemTotal, &v), ncclInvalidArgument, "MemStats NULL comm");
    int x = 0;
    expect(ncclPutSignal(&x, 1, ncclInt32, 0, nullptr, 0, 0, 0, 0, nullptr, nullptr), ncclInvalidArgument,
           "PutSignal NULL comm");
    expect(ncclSignal(0, 0, 0, 0, nullptr, nullptr), ncclInvalidArgument, "Signal NULL comm");
    ncclWaitSignalDesc_t d{1, 0, 0, 0};
    expect(ncclWaitSignal(1, &d, nullptr, nullptr), ncclInvalidArgument, "WaitSignal NULL comm");
    void* p = nullptr;
    expect(ncclWinGetUserPtr(nullptr, nullptr, &p), ncclInvalidArgument, "WinGetUserPtr NULL comm");
    ncclParamHandle_t h = nullptr;
    expect(ncclParamBind(nullptr, "BRAID_TIMEOUT"), ncclInvalidArgument, "ParamBind NULL out");
    expect(ncclParamBind(&h, nullptr), ncclInvalidArgument, "ParamBind NULL key");
    expect(ncclParamBind(&h, "NCCL_NO_SUCH_THING"), ncclInvalidArgument, "ParamBind unknown key");
    REQUIRE(ncclParamBind(&h, "BRAID_TIMEOUT") == ncclSuccess);
    ncclParamHandle_t forged = reinterpret_cast<ncclParamHandle_t>(&x);
    int8_t i8;
    int16_t i16;
    int64_t i64;
    uint8_t u8;
    uint32_t u32;
    uint64_t u64;
    expect(ncclParamGetI8(nullptr, &i8), ncclInvalidArgument, "GetI8 NULL handle");
    expect(ncclParamGetI16(forged, &i16), ncclInvalidArgument, "GetI16 forged handle");
    expect(ncclParamGetI32(h, nullptr), ncclInvalidArgument, "GetI32 NULL out");
    expect(ncclParamGetI64(forged, &i64), ncclInvalidArgument, "GetI64 forged handle");
    expect(ncclParamGetU8(nullptr, &u8), ncclInvalidArgument, "GetU8 NULL handle");
    expect(ncclParamGetU16(h, nullptr), ncclInvalidArgument, "GetU16 NULL out");
    expect(ncclParamGetU32(forged, &u32), ncclInvalidArgument, "GetU32 forged handle");
    expect(ncclParamGetU64(nullptr, &u64), ncclInvalidArgument, "GetU64 NULL handle");
    const char* s = nullptr;
    expect(ncclParamGetStr(nullptr, &s), ncclInvalidArgument, "GetStr NULL handle");
    int len = 0;
    char small[2];
    expect(ncclParamGet(h, small, sizeof(small), &len), ncclInvalidArgument, "Get: buffer too small");
    expect(ncclParamGet(h, small, sizeof(small), nullptr), ncclInvalidArgument, "Get: NULL len");
    expect(ncclParamGetParameter(nullptr, &s, &len), ncclInvalidArgument, "GetParameter NULL key");
    expect(ncclParamGetParameter("NCCL_NO_SUCH_THING", &s, &len), ncclInvalidArgument, "GetParameter unknown");
    expect(ncclParamGetAllParameterKeys(nullptr, &len), ncclInvalidArgument, "GetAllParameterKeys NULL table");
    ncclEncryptionConfig_t e = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
    expect(ncclSetEncryption(nullptr), ncclInvalidArgument, "SetEncryption NULL");
    e.magic = 0;
    expect(ncclSetEncryption(&e), ncclInvalidArgument, "SetEncryption bad magic");
    e = ncclEncryptionConfig_t NCCL_ENCRYPTION_CONFIG_INITIALIZER;
    e.mode = 7;
    expect(ncclSetEncryption(&e), ncclInvalidArgument, "SetEncryption unknown mode");
    e.mode = NCCL_ENCRYPTION_MODE_PSK;
    expect(ncclSetEncryption(&e), ncclInvalidArgument, "SetEncryption PSK NULL");
    e.psk = "too short";
    expect(ncclSetEncryption(&e), ncclInvalidArgument, "SetEncryption PSK under 32 bytes");
    e = ncclEncryptionConfig_t NCCL_ENCRYPTION_CONFIG_INITIALIZER;
    expect(ncclSetEncryption(&e), ncclSuccess, "SetEncryption off");
    CHECK(f.count == 0);
  }
  // On a live communicator: each bad call fails alone and the communicator still works.
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          Expect expect{f, fmt::format("rank {} ", rank)};
          ncclUniqueId id;
          expect(ncclCommGetUniqueId(comm, nullptr), ncclInvalidArgument, "GetUniqueId NULL id");
          ncclComm_t nc = nullptr;
          expect(ncclCommGrow(comm, n + 1, nullptr, -1, nullptr, nullptr), ncclInvalidArgument, "Grow NULL newcomm");
          expect(ncclCommGrow(comm, n, nullptr, -1, &nc, nullptr), ncclInvalidArgument, "Grow to the same size");
          expect(ncclCommGrow(comm, n + 1, nullptr, 0, &nc, nullptr), ncclInvalidArgument, "Grow: existing rank >= 0");
          if (ncclGetUniqueId(&id) != ncclSuccess) return f.fail("ncclGetUniqueId");  // no Catch macros on rank threads
          expect(ncclCommGrow(comm, n + 1, &id, -1, &nc, nullptr), ncclInvalidArgument, "Grow: someone else's id");
          std::vector<float> a(64, 1.0f), b(64);
          ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
          c.magic = 0;
          expect(ncclAllReduceConfig(a.data(), b.data(), 64, ncclFloat, ncclSum, comm, nullptr, &c),
                 ncclInvalidArgument, "AllReduceConfig bad magic");
          c = ncclCollConfig_t NCCL_COLLCONFIG_INITIALIZER;
          c.size = 40;
          expect(ncclBroadcastConfig(a.data(), b.data(), 64, ncclFloat, 0, comm, nullptr, &c), ncclInvalidArgument,
                 "BroadcastConfig short struct");
          c = ncclCollConfig_t NCCL_COLLCONFIG_INITIALIZER;
          c.algSelection = "nosuch";
          expect(ncclReduceConfig(a.data(), b.data(), 64, ncclFloat, ncclSum, 0, comm, nullptr, &c),
                 ncclInvalidArgument, "ReduceConfig unknown algorithm");
          c.algSelection = "ring,";
          expect(ncclAllGatherConfig(a.data(), b.data(), 32, ncclFloat, comm, nullptr, &c), ncclInvalidArgument,
                 "AllGatherConfig empty name");
          c.algSelection = "stragglar";  // an AllReduce algorithm only
          expect(ncclReduceScatterConfig(a.data(), b.data(), 32, ncclFloat, ncclSum, comm, nullptr, &c),
                 ncclInvalidArgument, "ReduceScatterConfig: no such algorithm for it");
          c = ncclCollConfig_t NCCL_COLLCONFIG_INITIALIZER;
          c.forceAlgSelection = 2;
          expect(ncclAlltoAllConfig(a.data(), b.data(), 32, ncclFloat, comm, nullptr, &c), ncclInvalidArgument,
                 "AlltoAllConfig forceAlgSelection 2");
          c = ncclCollConfig_t NCCL_COLLCONFIG_INITIALIZER;
          c.CTAPolicy = 0x80;
          expect(ncclGatherConfig(a.data(), b.data(), 32, ncclFloat, 0, comm, nullptr, &c), ncclInvalidArgument,
                 "GatherConfig CTAPolicy");
          c = ncclCollConfig_t NCCL_COLLCONFIG_INITIALIZER;
          expect(ncclScatterConfig(a.data(), b.data(), 32, ncclFloat, n, comm, nullptr, &c), ncclInvalidArgument,
                 "ScatterConfig root out of range");
          // NULL is the plain call; a 2.31-sized struct (no launchCompletionEvent) is read too.
          MP_NCCL(f, ncclAllReduceConfig(a.data(), b.data(), 64, ncclFloat, ncclSum, comm, nullptr, nullptr));
          if (b[63] != float(n)) f.fail("AllReduceConfig with NULL config");
          c.size = 64;
          c.version = NCCL_VERSION(2, 31, 2);
          MP_NCCL(f, ncclAllReduceConfig(a.data(), b.data(), 64, ncclFloat, ncclSum, comm, nullptr, &c));
          if (b[63] != float(n)) f.fail("AllReduceConfig with a 2.31 config");
          CollCase cc;
          cc.count = 100;
          run_and_check(cc, rank, n, comm, f);
        }) == 0);
}

// The device API's host queries (nccl_device/core.h, 2.29-2.30): braid ships
// no such header, so the test declares them as NCCL's header does.
namespace {
struct DeviceProperties {  // ncclCommProperties_t
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank, nRanks, cudaDev, nvmlDev;
  bool deviceApiSupport, multimemSupport;
  int ginType, nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
};
struct MultimemHandle {
  void* mcBasePtr;
};
}  // namespace
extern "C" {
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, DeviceProperties* props);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, MultimemHandle mm, void** outPtr);
}

TEST_CASE("device API host queries: properties and peers' window pointers", "[api][device][threads]") {
  constexpr int n = 3;
  std::vector<std::vector<int32_t>> buffers(n, std::vector<int32_t>(1024));
  CHECK(run_ranks_as_threads(n, [&](int rank, int, ncclComm_t comm, Failures& f) {
          Expect expect{f, fmt::format("rank {} ", rank)};
          auto properties = [](size_t size, unsigned version) {
            DeviceProperties d{};
            d.size = size;
            d.magic = NCCL_API_MAGIC;
            d.version = version;
            return d;
          };
          DeviceProperties p = properties(sizeof(DeviceProperties), NCCL_VERSION_CODE);
          MP_NCCL(f, ncclCommQueryProperties(comm, &p));
          if (p.rank != rank || p.nRanks != n || p.cudaDev != -1 || p.nLsaTeams != 1 || !p.hostRmaSupport ||
              p.deviceApiSupport || p.multimemSupport || p.ginType != 2 /* PROXY */ || p.railedGinType != 2)
            f.fail(fmt::format("rank {}: properties {} {} {} {} {} {}", rank, p.rank, p.nRanks, p.cudaDev, p.nLsaTeams,
                               p.hostRmaSupport, p.ginType));
          // A 2.29.7 client (2.30's layout): no GIN, which 2.29's clients are not served.
          DeviceProperties v229 = properties(sizeof(DeviceProperties), NCCL_VERSION(2, 29, 7));
          MP_NCCL(f, ncclCommQueryProperties(comm, &v229));
          if (v229.ginType != 0 || v229.railedGinType != 0 || v229.nRanks != n) f.fail("2.29.7 properties");
          // A 2.31.2 client (its 144-byte struct, 2.30's 56 bytes first): the
          // communicator's hash, and GIN of the proxy type on a FULL
          // connection; its devComm of 248 bytes.
          struct Properties231 {
            DeviceProperties head;
            uint64_t commHash;
            int ginMinStride, ginConnectionType;
            bool ginSupport[64];
            size_t devCommRuntimeVersionSize;
          };
          static_assert(sizeof(Properties231) == 144 && offsetof(Properties231, ginSupport) == 72);
          Properties231 v231;
          std::memset(&v231, 0x5a, sizeof v231);
          v231.head = properties(144, NCCL_VERSION(2, 31, 2));
          MP_NCCL(f, ncclCommQueryProperties(comm, &v231.head));
          // The same nonzero hash on every rank.
          std::vector<uint64_t> hashes(n);
          MP_NCCL(f, ncclAllGather(&v231.commHash, hashes.data(), 1, ncclUint64, comm, nullptr));
          const uint64_t hash = hashes[0];
          if (hash == 0 || std::count(hashes.begin(), hashes.end(), hash) != n) f.fail("commHash differs");
          bool only_proxy = v231.ginSupport[2];
          for (int t = 0; t < 64; ++t) only_proxy = only_proxy && (t == 2 || !v231.ginSupport[t]);
          if (v231.head.ginType != 2 || v231.head.railedGinType != 2 || v231.head.nRanks != n ||
              v231.commHash != hash || v231.ginMinStride != 1 || v231.ginConnectionType != 1 || !only_proxy ||
              v231.devCommRuntimeVersionSize != 248)
            f.fail(fmt::format("2.31.2 properties: hash {:#x} (comm {:#x}), stride {}, connection {}, devComm {}",
                               v231.commHash, hash, v231.ginMinStride, v231.ginConnectionType,
                               v231.devCommRuntimeVersionSize));
          // A 2.32.3 client (152 bytes: CFT flags, false here); one that
          // says 2.32.4 or later, or whose struct is longer still, is told
          // there is no device API or GIN (braid does not serve its devComm),
          // and nothing past 152 bytes is written.
          struct Properties232 {
            Properties231 v231;
            bool cftSupport, cftMulticastSupport, cftCountedSupport;
          };
          static_assert(sizeof(Properties232) == 152);
          struct {
            Properties232 known;
            unsigned char tail[8];
          } v232;
          for (unsigned version : {NCCL_VERSION(2, 32, 3), NCCL_VERSION(2, 32, 6)}) {
            for (size_t size : {sizeof(Properties232), sizeof v232}) {
              std::memset(&v232, 0x5a, sizeof v232);
              v232.known.v231.head = properties(size, version);
              MP_NCCL(f, ncclCommQueryProperties(comm, &v232.known.v231.head));
              const Properties231& p231 = v232.known.v231;
              const bool served = version == NCCL_VERSION(2, 32, 3) && size == sizeof(Properties232);
              if (p231.head.nRanks != n || v232.known.cftSupport || v232.known.cftMulticastSupport ||
                  v232.known.cftCountedSupport || v232.tail[0] != 0x5a || v232.tail[7] != 0x5a ||
                  (p231.head.ginType == 2) != served || p231.ginSupport[2] != served ||
                  p231.ginConnectionType != (served ? 1 : 0) || (!served && p231.head.deviceApiSupport))
                f.fail(fmt::format("properties of {} bytes from {}", size, version));
            }
          }
          // A 2.29 struct (40 bytes): nothing past it is written.
          DeviceProperties old = properties(40, NCCL_VERSION(2, 29, 2));
          old.nLsaTeams = -5;
          MP_NCCL(f, ncclCommQueryProperties(comm, &old));
          if (old.rank != rank || old.nLsaTeams != -5) f.fail("a 2.29-sized ncclCommProperties_t was overrun");
          old.magic = 1;
          expect(ncclCommQueryProperties(comm, &old), ncclInvalidArgument, "bad magic");
          expect(ncclCommQueryProperties(comm, nullptr), ncclInvalidArgument, "NULL props");

          ncclWindow_t win = nullptr;
          MP_NCCL(f, ncclCommWindowRegister(comm, buffers[rank].data(), 4096, &win, NCCL_WIN_DEFAULT));
          for (int peer = 0; peer < n; ++peer) {
            void* ptr = nullptr;
            MP_NCCL(f, ncclGetPeerDevicePointer(win, 64, peer, &ptr));
            if (ptr != reinterpret_cast<char*>(buffers[peer].data()) + 64) f.fail("peer pointer");
            MP_NCCL(f, ncclGetLsaDevicePointer(win, 0, peer, &ptr));
            if (ptr != buffers[peer].data()) f.fail("lsa pointer");
          }
          void* ptr = nullptr;
          expect(ncclGetPeerDevicePointer(win, 0, n, &ptr), ncclInvalidArgument, "peer out of range");
          expect(ncclGetPeerDevicePointer(win, 8192, 0, &ptr), ncclInvalidArgument, "offset past the window");
          expect(ncclGetPeerDevicePointer(nullptr, 0, 0, &ptr), ncclInvalidArgument, "NULL window");
          expect(ncclGetLsaDevicePointer(win, 0, n, &ptr), ncclInvalidArgument, "lsaRank out of range");
          expect(ncclGetLsaMultimemDevicePointer(win, 0, &ptr), ncclInvalidUsage, "multimem");
          expect(ncclGetMultimemDevicePointer(win, 0, MultimemHandle{nullptr}, &ptr), ncclInvalidUsage, "multimem");
          MP_NCCL(f, ncclCommWindowDeregister(comm, win));
        }) == 0);
}

// A peer whose part of a window this process does not map (plain buffers
// of processes) is NULL with ncclSuccess, as NCCL answers for a peer
// outside the LSA team; a rank's own part is its buffer.
TEST_CASE("ncclGetPeerDevicePointer of a peer not reached by load and store is NULL, not an error",
          "[api][device][processes]") {
  CHECK(run_ranks_as_processes(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          std::vector<int32_t> buffer(1024, rank);
          ncclWindow_t win = nullptr;
          MP_NCCL(f, ncclCommWindowRegister(comm, buffer.data(), 4096, &win, NCCL_WIN_DEFAULT));
          for (int peer = 0; peer < n; ++peer) {
            void* ptr = reinterpret_cast<void*>(uintptr_t(1));
            MP_NCCL(f, ncclGetPeerDevicePointer(win, 64, peer, &ptr));
            void* want = peer == rank ? reinterpret_cast<char*>(buffer.data()) + 64 : nullptr;
            if (ptr != want) f.fail(fmt::format("rank {}: peer {}'s pointer is {}", rank, peer, ptr));
          }
          void* ptr = nullptr;
          if (ncclGetPeerDevicePointer(win, 0, n, &ptr) != ncclInvalidArgument) f.fail("a peer out of range passed");
          MP_NCCL(f, ncclCommWindowDeregister(comm, win));
        }) == 0);
}

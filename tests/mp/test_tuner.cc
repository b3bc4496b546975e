// NCCL tuner plugins on braid (src/runtime/tuner.h), with the scripted
// plugin (tests/tuner/scripted_tuner.cc) as v6, v4 and v2 tables, 4 ranks
// as processes (and as threads): what a plugin is shown (its init's
// arguments, each call's table), that its pick of RING/SIMPLE runs braid's
// ring even for calls braid's fast paths would take, that a plugin picking
// nothing, what braid lacks, or failing leaves braid's own choice, that
// braid's own settings come first, and that a plugin on one rank only, or
// one whose init fails, fails init on every rank.  Every result exact.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "algo_calls.h"
#include "harness.h"
#include "process_log.h"

using namespace mp;

namespace {

constexpr int kRanks = 4;

// This process's plugin log (BRAID_TEST_TUNER_LOG).
std::string tuner_log_path() { return fmt::format("{}/tuner-{}.log", process_log_dir(), getpid()); }

// Each rank: NCCL_TUNER_PLUGIN=lib answering `pick`, its log, and braid's
// log at INFO for COLL, INIT and TUNING.
std::function<void(int)> with_tuner(const char* lib, const char* pick) {
  return [=](int) {
    setenv("NCCL_TUNER_PLUGIN", lib, 1);
    setenv("BRAID_TEST_TUNER_PICK", pick, 1);
    setenv("BRAID_TEST_TUNER_LOG", tuner_log_path().c_str(), 1);
    log_to_own_file("COLL,INIT,TUNING");
  };
}

// run_algo_calls and a Broadcast, exact.
void run_calls(int rank, int n, ncclComm_t comm, Failures& f) {
  run_algo_calls(rank, n, comm, f);
  std::vector<int32_t> b(100, rank == 1 ? 42 : 0);
  MP_NCCL(f, ncclBroadcast(b.data(), b.data(), b.size(), ncclInt32, 1, comm, nullptr));
  if (std::count(b.begin(), b.end(), 42) != 100) f.fail("broadcast");
}

// The ranks run run_calls with `setup`, then `check` the plugin's log and
// braid's (after the communicator is destroyed, so finalize is in it).
int run_tuned(const std::function<void(int)>& setup,
              const std::function<void(const std::string& plugin, const std::string& braid, Failures&)>& check) {
  return run_ranks_as_processes(kRanks, [&](int rank, int n, ncclComm_t comm, Failures& f) {
    ncclComm_t own = nullptr;  // a communicator this body destroys, so that its finalize is logged
    MP_NCCL(f, ncclCommSplit(comm, 0, rank, &own, nullptr));
    if (!own) return;
    run_calls(rank, n, own, f);
    MP_NCCL(f, ncclCommDestroy(own));
    check(read_file(tuner_log_path()), own_log(), f);
  }, 60, setup);
}

void expect(bool ok, Failures& f, const std::string& what, const std::string& log) {
  if (!ok) f.fail(what + ":\n" + log);
}

}  // namespace

TEST_CASE("A v6 tuner plugin is shown NCCL's table and its pick of RING/SIMPLE runs braid's ring", "[mp][tuner]") {
  CHECK(run_tuned(with_tuner(BRAID_TEST_TUNER6_LIB, "ring_simple"), [](const std::string& plugin,
                                                                        const std::string& braid, Failures& f) {
    // Init: 4 ranks on 1 host (one NVLink domain of 4), a zeroed constants struct.
    expect(plugin.find("init v6 comm=") != std::string::npos, f, "no v6 init", plugin);
    expect(plugin.find("nranks=4 nnodes=1 domains=1,4,4 constants=0") != std::string::npos, f, "init's arguments",
           plugin);
    // AllReduce of 8 floats: nBytes 32, one op, unregistered, ring offered
    // with braid's estimate and nothing else.  AllGather's nBytes is what
    // a rank receives (64 x 4 B x 4); Broadcast (func 0) has no ring.
    expect(plugin.find("coll func=4 bytes=32 pipe=1 reg=0 algos=7 protos=3 ring_simple=") != std::string::npos, f,
           "the small allreduce's question", plugin);
    expect(plugin.find("ring_ll=-1 offered=1") != std::string::npos, f, "ring alone offered", plugin);
    const size_t line = plugin.find("coll func=4 bytes=32 ");
    const double estimate =
        line == std::string::npos ? 0 : std::atof(plugin.c_str() + plugin.find("ring_simple=", line) + 12);
    expect(estimate > 0, f, "ring's estimate", plugin);
    expect(plugin.find("coll func=2 bytes=1024 pipe=1") != std::string::npos, f, "the allgather's question", plugin);
    expect(plugin.find("coll func=0 bytes=400 pipe=1 reg=0 algos=7 protos=3 ring_simple=-1 ring_ll=-1 offered=0") !=
               std::string::npos, f, "the broadcast's question", plugin);
    expect(plugin.find("finalize nranks=4") != std::string::npos, f, "no finalize", plugin);
    expect(plugin.find("getChunkSize") == std::string::npos, f, "getChunkSize called", plugin);
    // Both AllReduces on the ring (the small one's board path too), the AllGather too.
    expect(occurrences(braid, "allreduce(ring_allreduce)") >= 2, f, "not both allreduces on ring", braid);
    expect(braid.find("allgather(ring_allgather)") != std::string::npos, f, "the allgather not on ring", braid);
    expect(braid.find("tuner plugin scripted6: allreduce 32 B: ring") != std::string::npos, f, "the pick said", braid);
    expect(braid.find("scripted tuner: init for 4 ranks") != std::string::npos, f, "the plugin's log line", braid);
  }) == 0);
}

TEST_CASE("v7, v4 and v2 tuner tables pick braid's ring the same way", "[mp][tuner]") {
  // v7 (NCCL 2.32.6): v6's calls, its constants one compute capability longer.
  CHECK(run_tuned(with_tuner(BRAID_TEST_TUNER7_LIB, "ring_simple"), [](const std::string& plugin,
                                                                        const std::string& braid, Failures& f) {
    expect(plugin.find("init v7 comm=") != std::string::npos, f, "no v7 init", plugin);
    expect(plugin.find("nranks=4 nnodes=1 domains=1,4,4 constants=0") != std::string::npos, f, "v7 init's arguments",
           plugin);
    expect(plugin.find("coll func=4 bytes=32 pipe=1 reg=0") != std::string::npos, f, "the v7 question", plugin);
    expect(occurrences(braid, "allreduce(ring_allreduce)") >= 2, f, "v7: not both allreduces on ring", braid);
    expect(braid.find("scripted7 (ncclTunerPlugin_v7) loaded") != std::string::npos, f, "v7 not loaded as v7", braid);
    expect(plugin.find("finalize") != std::string::npos, f, "v7: no finalize", plugin);
  }) == 0);
  CHECK(run_tuned(with_tuner(BRAID_TEST_TUNER4_LIB, "ring_simple"), [](const std::string& plugin,
                                                                        const std::string& braid, Failures& f) {
    expect(plugin.find("init v4 comm=0 nranks=4 nnodes=1") != std::string::npos, f, "no v4 init", plugin);
    expect(plugin.find("coll func=4 bytes=32 pipe=1 reg=0") != std::string::npos, f, "the v4 question", plugin);
    expect(occurrences(braid, "allreduce(ring_allreduce)") >= 2, f, "v4: not both allreduces on ring", braid);
  }) == 0);
  CHECK(run_tuned(with_tuner(BRAID_TEST_TUNER2_LIB, "ring_simple"), [](const std::string& plugin,
                                                                        const std::string& braid, Failures& f) {
    expect(plugin.find("init v2 comm=0 nranks=4 nnodes=1") != std::string::npos, f, "no v2 init", plugin);
    expect(plugin.find("coll func=4 bytes=32 pipe=1 collnet=0 nvls=0") != std::string::npos, f, "the v2 question",
           plugin);
    expect(occurrences(braid, "allreduce(ring_allreduce)") >= 2, f, "v2: not both allreduces on ring", braid);
    expect(plugin.find("finalize") != std::string::npos, f, "v2: no destroy", plugin);
  }) == 0);
}

// A plugin with its own model rewrites every entry it is shown; the
// cheapest offered one wins.
TEST_CASE("A tuner plugin that rewrites the costs picks the cheapest entry braid offered", "[mp][tuner]") {
  CHECK(run_tuned(with_tuner(BRAID_TEST_TUNER6_LIB, "rewrite"), [](const std::string&, const std::string& braid,
                                                                    Failures& f) {
    expect(occurrences(braid, "allreduce(ring_allreduce)") >= 2, f, "not both allreduces on ring", braid);
  }) == 0);
}

// Touching nothing, picking tree (braid has none: its entry is -1, which the
// plugin leaves), or failing getCollInfo: braid's own choice, which for the
// small AllReduce is not the ring.
TEST_CASE("A tuner plugin that picks nothing braid has, or fails a call, leaves braid's own choice", "[mp][tuner]") {
  for (const char* pick : {"none", "tree_simple", "fail"}) {
    INFO(pick);
    CHECK(run_tuned(with_tuner(BRAID_TEST_TUNER6_LIB, pick), [&](const std::string& plugin, const std::string& braid,
                                                                 Failures& f) {
      expect(plugin.find("coll func=4 bytes=32") != std::string::npos, f, "not asked", plugin);
      expect(occurrences(braid, "allreduce(ring_allreduce)") < 2, f, "the small allreduce on ring", braid);
      const bool failed = std::string(pick) == "fail";
      expect(occurrences(braid, "allreduce 32 B: braid's own choice") == 0 || !failed, f, "failure unsaid", braid);
      expect(braid.find(failed ? "getCollInfo of allreduce 32 B failed (ncclInternalError): braid's own choice"
                               : "allreduce 32 B: braid's own choice") != std::string::npos, f, "the outcome", braid);
    }) == 0);
  }
}

TEST_CASE("A tuner plugin's nChannels is said once per communicator, not applied", "[mp][tuner]") {
  CHECK(run_tuned([](int rank) {
    setenv("BRAID_TEST_TUNER_CHANNELS", "3", 1);
    with_tuner(BRAID_TEST_TUNER6_LIB, "ring_simple")(rank);
  }, [](const std::string&, const std::string& braid, Failures& f) {
    expect(occurrences(braid, "asks for 3 channels: not applied") == 1, f, "said once", braid);
  }) == 0);
}

// BRAID_ALGO pins AllReduce to rd: the plugin is shown no ring for it and rd
// runs; NCCL_ALGO=^ring likewise takes the ring away; a call's own
// algSelection is not shown to the plugin at all.
TEST_CASE("BRAID_ALGO, NCCL_ALGO and a call's selection come before the tuner plugin", "[mp][tuner]") {
  CHECK(run_tuned([](int rank) {
    setenv("BRAID_ALGO", "allreduce=rd", 1);
    with_tuner(BRAID_TEST_TUNER6_LIB, "ring_simple")(rank);
  }, [](const std::string& plugin, const std::string& braid, Failures& f) {
    expect(plugin.find("coll func=4 bytes=32 pipe=1 reg=0 algos=7 protos=3 ring_simple=-1 ring_ll=-1 offered=0") !=
               std::string::npos, f, "ring offered for a pinned allreduce", plugin);
    expect(occurrences(braid, "allreduce(rd_allreduce)") >= 2, f, "not both allreduces on rd", braid);
    expect(braid.find("allgather(ring_allgather)") != std::string::npos, f, "the allgather not on ring", braid);
  }) == 0);
  CHECK(run_tuned([](int rank) {
    setenv("NCCL_ALGO", "allreduce:^ring", 1);
    with_tuner(BRAID_TEST_TUNER6_LIB, "ring_simple")(rank);
  }, [](const std::string& plugin, const std::string& braid, Failures& f) {
    expect(plugin.find("coll func=4 bytes=32 pipe=1 reg=0 algos=7 protos=3 ring_simple=-1") != std::string::npos, f,
           "ring offered where NCCL_ALGO excludes it", plugin);
    expect(braid.find("ring_allreduce") == std::string::npos, f, "an allreduce on ring", braid);
  }) == 0);
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
    std::vector<float> in(1000, float(rank + 1)), out(in.size(), -1.0f);
    ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
    c.algSelection = "rd";
    MP_NCCL(f, ncclAllReduceConfig(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr, &c));
    if (std::count(out.begin(), out.end(), float(n * (n + 1) / 2)) != ptrdiff_t(out.size())) f.fail("wrong sums");
    const std::string plugin = read_file(tuner_log_path());
    if (plugin.find("coll func=4") != std::string::npos) f.fail("a call with its own selection was shown: " + plugin);
    if (own_log().find("allreduce(rd_allreduce)") == std::string::npos) f.fail("not on rd: " + own_log());
  }, 60, with_tuner(BRAID_TEST_TUNER6_LIB, "ring_simple")) == 0);
}

TEST_CASE("A tuner plugin is told regBuff for buffers in ncclCommRegister'ed memory", "[mp][tuner]") {
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
    std::vector<float> buf(2048, float(rank + 1));
    void* handle = nullptr;
    MP_NCCL(f, ncclCommRegister(comm, buf.data(), buf.size() * sizeof(float), &handle));
    // In place, inside the registration, then one that ends past it.
    MP_NCCL(f, ncclAllReduce(buf.data(), buf.data(), 1024, ncclFloat, ncclSum, comm, nullptr));
    MP_NCCL(f, ncclAllReduce(buf.data() + 1024, buf.data() + 1024, 1024, ncclFloat, ncclSum, comm, nullptr));
    if (std::count(buf.begin(), buf.end(), float(n * (n + 1) / 2)) != 2048) f.fail("wrong sums");
    std::vector<float> other(1024, 1.0f);
    MP_NCCL(f, ncclAllReduce(other.data(), buf.data(), 1024, ncclFloat, ncclSum, comm, nullptr));
    MP_NCCL(f, ncclCommDeregister(comm, handle));
    const std::string plugin = read_file(tuner_log_path());
    if (occurrences(plugin, "bytes=4096 pipe=1 reg=1") != 2 || occurrences(plugin, "bytes=4096 pipe=1 reg=0") != 1)
      f.fail("regBuff: " + plugin);
  }, 60, with_tuner(BRAID_TEST_TUNER6_LIB, "none")) == 0);
}

// One process, 4 thread ranks: the library is loaded once, each
// communicator has its own context.
TEST_CASE("Thread ranks of one process each init and finalize their own tuner context", "[mp][tuner]") {
  const std::string log = fmt::format("{}/tuner-threads-{}.log", process_log_dir(), getpid());
  std::remove(log.c_str());
  setenv("NCCL_TUNER_PLUGIN", BRAID_TEST_TUNER6_LIB, 1);
  setenv("BRAID_TEST_TUNER_PICK", "ring_simple", 1);
  setenv("BRAID_TEST_TUNER_LOG", log.c_str(), 1);
  CHECK(run_ranks_as_threads(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
          std::vector<double> in(5000, rank + 1.0), out(in.size(), -1);
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat64, ncclSum, comm, nullptr));
          if (std::count(out.begin(), out.end(), n * (n + 1) / 2.0) != ptrdiff_t(out.size())) f.fail("wrong sums");
        }) == 0);
  unsetenv("NCCL_TUNER_PLUGIN");
  unsetenv("BRAID_TEST_TUNER_PICK");
  unsetenv("BRAID_TEST_TUNER_LOG");
  const std::string plugin = read_file(log);
  CHECK(occurrences(plugin, "init v6") == kRanks);
  CHECK(occurrences(plugin, "coll func=4 bytes=40000 pipe=1") == kRanks);
  CHECK(occurrences(plugin, "finalize nranks=4") == kRanks);
}

TEST_CASE("NCCL_TUNER_PLUGIN=none loads none, and one that does not load warns once and braid runs", "[mp][tuner]") {
  CHECK(run_tuned(with_tuner("none", "ring_simple"), [](const std::string& plugin, const std::string& braid,
                                                         Failures& f) {
    expect(plugin.empty(), f, "a plugin ran", plugin);
    expect(braid.find("tuner plugin") == std::string::npos, f, "a tuner said something", braid);
  }) == 0);
  CHECK(run_tuned(with_tuner("nosuch", "ring_simple"), [](const std::string& plugin, const std::string& braid,
                                                           Failures& f) {
    expect(plugin.empty(), f, "a plugin ran", plugin);
    // The rank's two communicators: one warning.
    expect(occurrences(braid, "NCCL_TUNER_PLUGIN=nosuch: no tuner plugin could be loaded") == 1, f, "the warning",
           braid);
  }) == 0);
}

// NCCL looks for a tuner in the net plugin's library when no tuner library
// is found: AWS's net plugin brings one.
TEST_CASE("A tuner in the net plugin's library is loaded when NCCL_TUNER_PLUGIN finds none", "[mp][tuner]") {
  CHECK(run_tuned([](int rank) {
    with_tuner("", "ring_simple")(rank);
    unsetenv("NCCL_TUNER_PLUGIN");
    setenv("NCCL_NET_PLUGIN", BRAID_TEST_TUNER6_LIB, 1);
  }, [](const std::string& plugin, const std::string& braid, Failures& f) {
    expect(plugin.find("init v6") != std::string::npos, f, "not loaded", plugin);
    expect(occurrences(braid, "allreduce(ring_allreduce)") >= 2, f, "not both allreduces on ring", braid);
  }) == 0);
}

TEST_CASE("A tuner plugin on one rank only, or one whose init fails, fails init on every rank", "[mp][tuner]") {
  CHECK(init_must_fail(kRanks, [](int rank) {
    if (rank == 2) setenv("NCCL_TUNER_PLUGIN", BRAID_TEST_TUNER6_LIB, 1);
  }, ncclInvalidUsage, "NCCL_TUNER_PLUGIN") == 0);
  CHECK(init_must_fail(kRanks, [](int rank) {
    setenv("NCCL_TUNER_PLUGIN", rank == 1 ? BRAID_TEST_TUNER4_LIB : BRAID_TEST_TUNER6_LIB, 1);
  }, ncclInvalidUsage, "NCCL_TUNER_PLUGIN") == 0);
  // The plugin's error, and who said it.
  CHECK(init_must_fail(kRanks, [](int) {
    setenv("NCCL_TUNER_PLUGIN", BRAID_TEST_TUNER6_LIB, 1);
    setenv("BRAID_TEST_TUNER_INIT_FAIL", "1", 1);
  }, ncclInternalError, "tuner plugin scripted6 (" BRAID_TEST_TUNER6_LIB "): init failed") == 0);
  // On one rank: its peers see it leave.
  CHECK(init_must_fail(kRanks, [](int rank) {
    setenv("NCCL_TUNER_PLUGIN", BRAID_TEST_TUNER6_LIB, 1);
    if (rank == 3) setenv("BRAID_TEST_TUNER_INIT_FAIL", "1", 1);
  }, {ncclInternalError, ncclRemoteError, ncclSystemError}, "") == 0);
}

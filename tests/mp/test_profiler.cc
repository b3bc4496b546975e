// NCCL's profiler plugins on braid (src/runtime/profiler.h), with a plugin
// that records every call (tests/profiler/recording_profiler.cc) and real
// ranks.  Each case runs in processes of its own: a process loads its
// plugin once.
//  - the event hierarchy NCCL gives: GroupApi > CollApi/P2pApi, Group >
//    Coll/P2p > KernelCh, with NCCL's names, byte counts for AllGather,
//    sequence numbers, every event stopped once, a context per
//    communicator finalized at destroy;
//  - the activation mask: only what the plugin asked for;
//  - a plugin whose init fails, NCCL_PROFILER_PLUGIN=none and a missing
//    plugin leave the communicator working, unprofiled.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

using namespace mp;

namespace {

// One logged call: its verb ("start", "stop", "state", "init", ...), the
// event type after "start", and its key=value fields.
struct Line {
  std::string verb, type;
  std::map<std::string, std::string> f;
  long num(const std::string& key) const { return f.count(key) ? std::stol(f.at(key), nullptr, 0) : -1; }
};

std::vector<Line> read_log(const std::string& path) {
  std::vector<Line> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    std::istringstream words(text);
    Line l;
    words >> l.verb;
    if (l.verb == "start") words >> l.type;
    for (std::string w; words >> w;)
      if (size_t eq = w.find('='); eq != std::string::npos) l.f[w.substr(0, eq)] = w.substr(eq + 1);
    lines.push_back(l);
  }
  return lines;
}

std::vector<Line> starts(const std::vector<Line>& log, const std::string& type, int rank) {
  std::vector<Line> out;
  for (const Line& l : log)
    if (l.verb == "start" && l.type == type && l.num("rank") == rank) out.push_back(l);
  return out;
}

const Line* find_handle(const std::vector<Line>& log, const std::string& h) {
  for (const Line& l : log)
    if (l.verb == "start" && l.f.count("h") && l.f.at("h") == h) return &l;
  return nullptr;
}

int count(const std::vector<Line>& log, const std::string& verb, const std::string& key = "",
          const std::string& value = "") {
  int n = 0;
  for (const Line& l : log) n += l.verb == verb && (key.empty() || (l.f.count(key) && l.f.at(key) == value));
  return n;
}

struct ProfilerLog {
  std::string path;
  ProfilerLog() {
    char tmpl[] = "/tmp/braid_profiler_XXXXXX";
    const int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    close(fd);
    path = tmpl;
  }
  ~ProfilerLog() { unlink(path.c_str()); }
  void use(const char* mask = nullptr, const char* plugin = BRAID_TEST_PROFILER_LIB) const {
    setenv("NCCL_PROFILER_PLUGIN", plugin, 1);
    setenv("BRAID_TEST_PROFILER_LOG", path.c_str(), 1);
    if (mask) setenv("BRAID_TEST_PROFILER_MASK", mask, 1);
  }
};

void sums(int rank, int n, ncclComm_t comm, Failures& f, size_t count) {
  std::vector<float> in(count, float(rank + 1)), out(count);
  MP_NCCL(f, ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr));
  if (out[count - 1] != float(n * (n + 1) / 2)) f.fail("allreduce result");
}

// What every rank does in the hierarchy test.
void calls(int rank, int n, ncclComm_t comm, Failures& f) {
  sums(rank, n, comm, f, 1 << 18);  // a schedule
  sums(rank, n, comm, f, 8);        // a board (run alone)
  std::vector<int32_t> part(1000, rank), all(1000 * size_t(n));
  MP_NCCL(f, ncclAllGather(part.data(), all.data(), part.size(), ncclInt32, comm, nullptr));
  std::vector<int32_t> s(100, rank), r(100, -1);
  MP_NCCL(f, ncclGroupStart());
  MP_NCCL(f, ncclSend(s.data(), s.size(), ncclInt32, (rank + 1) % n, comm, nullptr));
  MP_NCCL(f, ncclRecv(r.data(), r.size(), ncclInt32, (rank + n - 1) % n, comm, nullptr));
  MP_NCCL(f, ncclGroupEnd());
  if (r[99] != (rank + n - 1) % n) f.fail("send/recv result");
}

}  // namespace

TEST_CASE("profiler plugin: NCCL's event hierarchy for collectives and sends, threads", "[mp][profiler]") {
  ProfilerLog log;
  const int n = 2;
  // Threads of one forked process, which loads the plugin for itself.
  CHECK(true_in_a_child([&] {
    log.use();
    return run_ranks_as_threads(n, calls) == 0;
  }));
  const std::vector<Line> events = read_log(log.path);
  REQUIRE(count(events, "init") == n);
  CHECK(count(events, "finalize") == n);
  // The mask the plugin set at its first init holds for both communicators.
  CHECK(count(events, "mask-moved") == 0);
  CHECK(count(events, "init", "nranks", "2") == n);
  CHECK(count(events, "init", "nnodes", "1") == n);
  // Every event started is stopped exactly once.
  for (const Line& l : events)
    if (l.verb == "start") CHECK(count(events, "stop", "h", l.f.at("h")) == 1);
  for (int rank = 0; rank < n; ++rank) {
    INFO("rank " << rank);
    const std::vector<Line> groups = starts(events, "GroupApi", rank);
    REQUIRE(groups.size() == 4);  // three calls alone, one group of two
    CHECK(groups[0].num("depth") == 1);
    CHECK(groups[3].num("depth") == 2);
    for (const Line& g : groups) {
      CHECK(count(events, "state", "h", g.f.at("h")) == 2);  // the group's start API ended, its end API started
    }
    const std::vector<Line> colls = starts(events, "Coll", rank);
    REQUIRE(colls.size() == 3);
    CHECK(colls[0].f.at("func") == "AllReduce");
    CHECK(colls[0].num("seq") == 0);
    CHECK(colls[0].num("count") == 1 << 18);
    CHECK(colls[0].f.at("type") == "ncclFloat32");
    CHECK(colls[1].num("seq") == 1);
    CHECK(colls[1].num("count") == 8);
    CHECK(colls[2].f.at("func") == "AllGather");
    CHECK(colls[2].num("seq") == 0);
    CHECK(colls[2].num("count") == 4000);  // bytes, as NCCL gives AllGather
    CHECK(colls[2].f.at("type") == "ncclInt8");
    for (const Line& c : colls) {
      // Its API event, in its call's group API event; its launch group; its channel.
      const Line* api = find_handle(events, c.f.at("parent"));
      REQUIRE(api);
      CHECK(api->type == "CollApi");
      CHECK(api->f.at("func") == c.f.at("func"));
      const Line* group_api = find_handle(events, api->f.at("parent"));
      REQUIRE(group_api);
      CHECK(group_api->type == "GroupApi");
      const Line* group = find_handle(events, c.f.at("group"));
      REQUIRE(group);
      CHECK(group->type == "Group");
      int channels = 0;
      for (const Line& k : starts(events, "KernelCh", rank)) {
        if (k.f.at("parent") != c.f.at("h")) continue;
        ++channels;
        CHECK(k.num("channel") == 0);
        for (const Line& st : events)
          if (st.verb == "state" && st.f.at("h") == k.f.at("h")) {
            CHECK(st.num("state") == 22);
            CHECK(std::stoul(st.f.at("ptimer")) >= std::stoul(k.f.at("ptimer")));
          }
      }
      CHECK(channels == 1);
    }
    const std::vector<Line> p2ps = starts(events, "P2p", rank);
    REQUIRE(p2ps.size() == 2);
    CHECK(p2ps[0].f.at("func") == "Send");
    CHECK(p2ps[0].num("peer") == (rank + 1) % n);
    CHECK(p2ps[1].f.at("func") == "Recv");
    CHECK(p2ps[1].num("peer") == (rank + n - 1) % n);
    CHECK(p2ps[0].num("count") == 100);
    const Line* api = find_handle(events, p2ps[0].f.at("parent"));
    REQUIRE(api);
    CHECK(api->type == "P2pApi");
    CHECK(api->f.at("parent") == groups[3].f.at("h"));
  }
}

TEST_CASE("profiler plugin: a non-blocking communicator's calls run on a worker and still make their events",
          "[mp][profiler][nonblocking]") {
  ProfilerLog log;
  auto init = [](ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(comm, nranks, id, rank, &config);
    while (r == ncclInProgress) ncclCommGetAsyncError(*comm, &r);
    return r;
  };
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    std::vector<float> x(1 << 16, float(rank + 1));
    for (int i = 0; i < 2; ++i) {
      ncclResult_t r = ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr);
      while (r == ncclInProgress) ncclCommGetAsyncError(comm, &r);
      if (r != ncclSuccess) f.fail("non-blocking allreduce");
    }
    if (x[0] != float(n * (n + 1) / 2 * n)) f.fail("non-blocking allreduce result");
  };
  // Threads of one process: handles are addresses, unique only within one.
  CHECK(true_in_a_child([&] {
    log.use();
    return run_ranks_as_threads(2, body, init) == 0;
  }));
  const std::vector<Line> events = read_log(log.path);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const std::vector<Line> colls = starts(events, "Coll", rank);
    REQUIRE(colls.size() == 2);
    CHECK(colls[1].num("seq") == 1);
    const Line* api = find_handle(events, colls[0].f.at("parent"));
    REQUIRE(api);
    CHECK(api->type == "CollApi");
    CHECK(starts(events, "KernelCh", rank).size() == 2);
  }
  for (const Line& l : events)
    if (l.verb == "start") CHECK(count(events, "stop", "h", l.f.at("h")) == 1);
}

TEST_CASE("profiler plugin v7: a call's userProfilerTag reaches its events, processes", "[mp][profiler][processes]") {
  ProfilerLog log;
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    std::vector<float> x(1 << 16, float(rank + 1));
    ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
    config.userProfilerTag = 0xfeed + uint64_t(rank);
    MP_NCCL(f, ncclAllReduceConfig(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr, &config));
    MP_NCCL(f, ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr));  // untagged
    if (x[0] != float(n * (n + 1) / 2 * n)) f.fail("tagged allreduce result");
  };
  CHECK(run_ranks_as_processes(2, body, 60, [&](int) { log.use(nullptr, BRAID_TEST_PROFILER7_LIB); }) == 0);
  const std::vector<Line> events = read_log(log.path);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const std::vector<Line> apis = starts(events, "CollApi", rank), colls = starts(events, "Coll", rank);
    REQUIRE(apis.size() == 2);
    REQUIRE(colls.size() == 2);
    CHECK(apis[0].num("tag") == 0xfeed + rank);
    CHECK(colls[0].num("tag") == 0xfeed + rank);
    CHECK(apis[1].num("tag") == 0);
    CHECK(colls[1].num("tag") == 0);
    CHECK(colls[1].num("seq") == 1);
  }
}

TEST_CASE("profiler plugin: only the events its activation mask asks for, processes", "[mp][profiler][processes]") {
  SECTION("kernel launches (and the group API events they hang from)") {
    ProfilerLog log;
    CHECK(run_ranks_as_processes(2, [](int r, int n, ncclComm_t c, Failures& f) { sums(r, n, c, f, 1 << 16); }, 60,
                                 [&](int) { log.use("0x800"); }) == 0);
    const std::vector<Line> events = read_log(log.path);
    CHECK(count(events, "init") == 2);
    int launches = 0, others = 0;
    for (const Line& l : events)
      if (l.verb == "start") (l.type == "KernelLaunch" ? launches : l.type == "GroupApi" ? launches : others) += 1;
    CHECK(launches == 4);  // per rank: its call's group API event and its launch
    CHECK(others == 0);
  }
  SECTION("none") {
    ProfilerLog log;
    CHECK(run_ranks_as_processes(2, [](int r, int n, ncclComm_t c, Failures& f) { sums(r, n, c, f, 1 << 16); }, 60,
                                 [&](int) { log.use("0"); }) == 0);
    const std::vector<Line> events = read_log(log.path);
    CHECK(count(events, "init") == 2);
    CHECK(count(events, "start") == 0);
    CHECK(count(events, "finalize") == 2);
  }
}

TEST_CASE("profiler plugin: a communicator aborted inside a group stops the group's event first",
          "[mp][profiler][processes][errors]") {
  ProfilerLog log;
  CHECK(true_in_a_child([&] {
    log.use();
    ncclUniqueId id;
    ncclComm_t comm = nullptr;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) return false;
    std::vector<float> x(1 << 16, 1.0f);
    if (ncclGroupStart() != ncclSuccess) return false;
    if (ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) return false;
    if (ncclCommAbort(comm) != ncclSuccess) return false;
    return ncclGroupEnd() != ncclSuccess;  // its communicator is gone
  }));
  const std::vector<Line> events = read_log(log.path);
  CHECK(count(events, "finalize") == 1);
  for (const Line& l : events)
    if (l.verb == "start") CHECK(count(events, "stop", "h", l.f.at("h")) == 1);
  // The group's event stopped before the context was finalized.
  size_t group_stop = 0, finalized = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].verb == "finalize") finalized = i;
    if (events[i].verb == "stop" && find_handle(events, events[i].f.at("h")) &&
        find_handle(events, events[i].f.at("h"))->type == "GroupApi")
      group_stop = i;
  }
  CHECK(group_stop > 0);
  CHECK(group_stop < finalized);
}

TEST_CASE("profiler plugin: a failed init, none, or a missing plugin leave the communicator working",
          "[mp][profiler][processes][errors]") {
  auto body = [](int r, int n, ncclComm_t c, Failures& f) { sums(r, n, c, f, 1 << 16); };
  SECTION("init fails") {
    ProfilerLog log;
    CHECK(run_ranks_as_processes(2, body, 60, [&](int) {
            log.use();
            setenv("BRAID_TEST_PROFILER_FAIL_INIT", "1", 1);
          }) == 0);
    const std::vector<Line> events = read_log(log.path);
    CHECK(count(events, "init-failed") == 2);
    CHECK(count(events, "start") == 0);
    CHECK(count(events, "finalize") == 0);
  }
  SECTION("NCCL_PROFILER_PLUGIN=none") {
    ProfilerLog log;
    CHECK(run_ranks_as_processes(2, body, 60, [&](int) {
            log.use();
            setenv("NCCL_PROFILER_PLUGIN", "none", 1);
          }) == 0);
    CHECK(read_log(log.path).empty());
  }
  SECTION("a plugin that gives no context: no events, no finalize") {
    ProfilerLog log;
    CHECK(run_ranks_as_processes(2, body, 60, [&](int) {
            log.use();
            setenv("BRAID_TEST_PROFILER_NO_CONTEXT", "1", 1);
          }) == 0);
    const std::vector<Line> events = read_log(log.path);
    CHECK(count(events, "init-no-context") == 2);
    CHECK(count(events, "start") == 0);
    CHECK(count(events, "finalize") == 0);
  }
  SECTION("a plugin that cannot be loaded") {
    CHECK(run_ranks_as_processes(2, body, 60, [&](int) {
            setenv("NCCL_PROFILER_PLUGIN", "/nonexistent/libnccl-profiler-x.so", 1);
          }) == 0);
  }
}

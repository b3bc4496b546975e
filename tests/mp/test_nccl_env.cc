// NCCL's variables that choose transports and communicator modes, on
// braid's communicators with real processes (transport_policy.h,
// apply_nccl_env_to_config):
//  - NCCL_NET takes only the net of that name between hosts (any case):
//    Socket, braid's own net plugin by its name, or IB, which this machine
//    lacks, so init fails on every rank saying no net is left;
//  - NCCL_IB_DISABLE=1 leaves InfiniBand out, said at INFO;
//  - NCCL_SHM_DISABLE=1 connects ranks of one host over sockets or the
//    net, with no shared memory; ranks must agree on it;
//  - NCCL_COMM_BLOCKING=0 makes even ncclCommInitRank non-blocking, and 1
//    overrides a config's blocking = 0; NCCL_MAX_CTAS a config's maxCTAs;
//  - the NCCL variables set that braid does not read are listed at INFO;
//  - NCCL_SET_THREAD_NAME=1 names braid's threads, which keep the
//    program's name without it.
// Every result exact.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cross_host_sweep.h"
#include "process_log.h"

using namespace mp;

namespace {

// Rank r is host r / per_host, with its own loopback address; braid's own
// net plugin (its name: BraidSocket) is loaded where `plugin`.
std::function<void(int)> hosts(int per_host, bool plugin, std::function<void(int)> more) {
  return [=](int rank) {
    setenv("BRAID_HOSTID", fmt::format("env-host-{}", rank / per_host).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank / per_host + 1).c_str(), 1);
    setenv("NCCL_NET_PLUGIN", plugin ? BRAID_NET_PLUGIN_LIB : "none", 1);
    setenv("BRAID_IB_HCA", "no_such_hca", 1);  // whatever this machine has
    unsetenv("BRAID_TRANSPORT");
    log_to_own_file("INIT,NET,ENV");
    if (more) more(rank);
  };
}

std::function<void(int)> set(const char* name, const char* value) {
  return [=](int) { setenv(name, value, 1); };
}

// Every collective exact, and the init line naming the transport says `says`.
RankBody runs_over(const std::string& says) {
  return [=](int rank, int n, ncclComm_t comm, Failures& f) {
    const std::string log = own_log();
    if (log.find(says) == std::string::npos) f.fail("the log does not say '" + says + "': " + log);
    every_collective(rank, n, comm, f, {1, 70000});
  };
}

}  // namespace

TEST_CASE("NCCL_NET=socket takes sockets between hosts though a net plugin loads", "[mp][processes][net][env]") {
  CHECK(run_ranks_as_processes(4, runs_over("transport auto (shm+socket)"), 120,
                               hosts(2, true, set("NCCL_NET", "socket"))) == 0);
}

TEST_CASE("NCCL_NET names the net plugin by its name, in any case", "[mp][processes][net][env][plugin]") {
  CHECK(run_ranks_as_processes(4, runs_over("transport auto (shm+BraidSocket (net plugin"), 120,
                               hosts(2, true, set("NCCL_NET", "braidSOCKET"))) == 0);
}

TEST_CASE("NCCL_NET=IB without InfiniBand fails init on every rank, naming what each net lacks",
          "[mp][processes][net][env]") {
  CHECK(init_must_fail(2, hosts(1, true, set("NCCL_NET", "IB")), ncclInvalidUsage,
                       "no network every rank may use between hosts: no net plugin (this rank has no net plugin: "
                       "the one loaded is BraidSocket, and NCCL_NET names IB), no InfiniBand") == 0);
}

TEST_CASE("NCCL_IB_DISABLE=1 leaves InfiniBand out, and says so", "[mp][processes][net][env]") {
  CHECK(run_ranks_as_processes(2, runs_over("no InfiniBand (this rank has no usable InfiniBand/RoCE port: "
                                            "NCCL_IB_DISABLE=1): sockets"),
                               120, hosts(1, false, set("NCCL_IB_DISABLE", "1"))) == 0);
}

TEST_CASE("NCCL_SHM_DISABLE=1 connects the ranks of one host without shared memory", "[mp][processes][env]") {
  // Sockets, and over the net plugin where NCCL_NET names it (every rank on one host).
  CHECK(run_ranks_as_processes(3, runs_over("transport auto (socket)"), 120,
                               hosts(3, false, set("NCCL_SHM_DISABLE", "1"))) == 0);
  auto plugin = [](int) {
    setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("NCCL_NET", "BraidSocket", 1);
  };
  CHECK(run_ranks_as_processes(3, runs_over("transport auto (BraidSocket (net plugin"), 120,
                               hosts(3, true, plugin)) == 0);
}

TEST_CASE("ranks that disagree on NCCL_SHM_DISABLE fail init instead of waiting on each other",
          "[mp][processes][env]") {
  auto setup = hosts(2, false, [](int rank) { setenv("NCCL_SHM_DISABLE", rank == 0 ? "1" : "0", 1); });
  CHECK(init_must_fail(2, setup, ncclInvalidUsage, "NCCL_SHM_DISABLE") == 0);
}

TEST_CASE("NCCL_COMM_BLOCKING=0 makes ncclCommInitRank non-blocking, and 1 overrides a config's 0",
          "[mp][processes][env][nonblocking]") {
  // Returns what init said, after waiting for a non-blocking one to finish.
  auto init_reporting = [](ncclResult_t* said, bool config_nonblocking) {
    return [=](ncclComm_t* comm, int n, const ncclUniqueId& id, int rank) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      *said = config_nonblocking ? ncclCommInitRankConfig(comm, n, id, rank, &config)
                                 : ncclCommInitRank(comm, n, id, rank);
      ncclResult_t state = *said;
      for (int i = 0; state == ncclInProgress && i < 60000; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (ncclCommGetAsyncError(*comm, &state) != ncclSuccess) return ncclInternalError;
      }
      return state;
    };
  };
  // One AllReduce, exact; a non-blocking communicator's call may say ncclInProgress first.
  auto one_call = [](ncclResult_t want, const ncclResult_t* said) {
    return [=](int rank, int n, ncclComm_t comm, Failures& f) {
      if (*said != want) f.fail(fmt::format("init said {}, expected {}", int(*said), int(want)));
      std::vector<int32_t> in(1000, rank + 1), out(1000, 0);
      ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comm, nullptr);
      for (int i = 0; r == ncclInProgress && i < 60000; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ncclCommGetAsyncError(comm, &r);
      }
      if (r != ncclSuccess) f.fail(fmt::format("allreduce gave {}", int(r)));
      if (out[999] != n * (n + 1) / 2) f.fail("wrong sum");
    };
  };
  ncclResult_t said = ncclSuccess;
  CHECK(run_ranks_as_processes(2, one_call(ncclInProgress, &said), 120, set("NCCL_COMM_BLOCKING", "0"),
                               init_reporting(&said, false)) == 0);
  CHECK(run_ranks_as_processes(2, one_call(ncclSuccess, &said), 120, set("NCCL_COMM_BLOCKING", "1"),
                               init_reporting(&said, true)) == 0);
  CHECK(run_ranks_as_processes(2, one_call(ncclSuccess, &said), 120, set("NCCL_COMM_BLOCKING", "2"),  // not 0 or 1
                               init_reporting(&said, false)) == 0);
}

TEST_CASE("NCCL_MAX_CTAS overrides a config's maxCTAs, and one that is too low is left out, as NCCL",
          "[mp][processes][env]") {
  auto init_with_max_ctas = [](ncclComm_t* comm, int n, const ncclUniqueId& id, int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.maxCTAs = 8;
    return ncclCommInitRankConfig(comm, n, id, rank, &config);
  };
  auto setup = [](const char* value) {
    return [=](int) {
      log_to_own_file("INIT,ENV");
      setenv("NCCL_MAX_CTAS", value, 1);
    };
  };
  CHECK(run_ranks_as_processes(2, runs_over("config maxCTAs reset to NCCL_MAX_CTAS=4"), 120, setup("4"),
                               init_with_max_ctas) == 0);
  CHECK(run_ranks_as_processes(2, runs_over("NCCL_MAX_CTAS 0 is too low, leaving it set at 8"), 120, setup("0"),
                               init_with_max_ctas) == 0);
}

TEST_CASE("the NCCL variables set that braid does not read are listed at INFO", "[mp][processes][env]") {
  auto setup = hosts(2, false, [](int) {
    setenv("NCCL_TREE_THRESHOLD", "0", 1);
    setenv("NCCL_BUFFSIZE", "8388608", 1);
    setenv("NCCL_MAX_NCHANNELS", "4", 1);  // read (the cuda backend's cap on blocks): not listed
    setenv("NCCL_TESTS_SPLIT", "MOD2", 1);  // nccl-tests' own: not listed
  });
  CHECK(run_ranks_as_processes(2, runs_over("not read by braid (docs/compatibility.md says why): NCCL_BUFFSIZE, "
                                            "NCCL_TREE_THRESHOLD\n"),
                               120, setup) == 0);
}

namespace {

// The names of this process's threads (/proc/self/task/*/comm).
std::vector<std::string> thread_names() {
  std::vector<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    names.push_back(name);
  }
  return names;
}

// After every collective ran exact, where `named`: whether this process has
// threads named "braid socket" (each rank has a socket transport to the
// other host's ranks) and "braid ras" (the RAS service's); else that no
// thread's name starts with "braid " (the program's does: braid_mp_tests).
RankBody threads_named(bool named) {
  return [=](int rank, int n, ncclComm_t comm, Failures& f) {
    every_collective(rank, n, comm, f, {1, 70000});
    const std::vector<std::string> names = thread_names();
    std::string all;
    for (const std::string& name : names) all += (all.empty() ? "" : ", ") + name;
    auto has = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) != names.end(); };
    const bool any_braid =
        std::any_of(names.begin(), names.end(), [](const std::string& s) { return s.rfind("braid ", 0) == 0; });
    if (!named && any_braid) f.fail("a thread is named though NCCL_SET_THREAD_NAME is unset: " + all);
    if (named && !has("braid socket")) f.fail("no thread named 'braid socket': " + all);
    if (named && !has("braid ras")) f.fail("no thread named 'braid ras': " + all);
  };
}

}  // namespace

TEST_CASE("NCCL_SET_THREAD_NAME=1 names braid's threads, and without it they keep the program's name",
          "[mp][processes][env]") {
  CHECK(run_ranks_as_processes(4, threads_named(true), 120, hosts(2, false, set("NCCL_SET_THREAD_NAME", "1"))) == 0);
  auto unset = [](int) { unsetenv("NCCL_SET_THREAD_NAME"); };
  CHECK(run_ranks_as_processes(4, threads_named(false), 120, hosts(2, false, unset)) == 0);
}

// NCCL_TOPO_DUMP_FILE: the rank NCCL_TOPO_DUMP_FILE_RANK names writes its
// host's topology in NCCL's XML at init (host ranks: CPUs and network
// devices, no GPU), and says so; the others do not; a file that cannot be
// written is reported and init goes on, as NCCL's.
TEST_CASE("NCCL_TOPO_DUMP_FILE: the rank NCCL_TOPO_DUMP_FILE_RANK names writes its host's topology",
          "[mp][processes][env]") {
  const std::string dir = fmt::format("/tmp/braid-topo-dump-{}", getpid());
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/topo.xml";
  auto dump = [&](const std::string& path, const char* dump_rank) {
    return hosts(2, false, [=](int) {
      setenv("NCCL_TOPO_DUMP_FILE", path.c_str(), 1);
      setenv("NCCL_TOPO_DUMP_FILE_RANK", dump_rank, 1);
    });
  };
  auto says = [](int writer, const std::string& line) {
    return [=](int rank, int n, ncclComm_t comm, Failures& f) {
      every_collective(rank, n, comm, f, {1, 70000});
      const bool said = own_log().find(line) != std::string::npos;
      if (said != (rank == writer)) f.fail(fmt::format("rank {}'s log {} '{}'", rank, said ? "has" : "lacks", line));
    };
  };
  CHECK(run_ranks_as_processes(4, says(2, "rank 2 wrote its host's topology"), 120, dump(file, "2")) == 0);
  std::ifstream in(file);
  const std::string xml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(xml);
  CHECK(xml.rfind("<system version=\"1\">\n  <cpu host_hash=\"0x", 0) == 0);
  CHECK(xml.find("<gpu") == std::string::npos);
  CHECK(xml.substr(xml.size() - 10) == "</system>\n");
  std::filesystem::remove_all(dir);

  CHECK(run_ranks_as_processes(2, says(0, "unable to write it"), 120, dump(dir + "/no/such/dir/topo.xml", "0")) == 0);
}

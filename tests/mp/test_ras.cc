// RAS (src/runtime/ras_service.h) on a running job of real processes, asked
// the way NCCL's users ask: NCCL's line protocol on the client socket, and
// the `ncclras` program.  Each rank's process has its own client port here
// (NCCL_RAS_ADDR set per rank), so the test picks which process answers.
//  - a rank held back before a collective: the report names it, behind the
//    others by one AllReduce, while its peers wait in that collective;
//  - a stopped process: unresponsive (INCOMPLETE, a TIMEOUT warning); once
//    killed: dead (DEAD, its rank missing), and a monitor sees PEER_DEAD;
//  - the protocol: replies, errors, JSON, the long-line limit, and
//    NCCL_RAS_ENABLE=0;
//  - on-demand diagnostics: every communicator's ranks compared, a
//    variable set on one rank named, a secret's value hidden.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.h"
#include "scoped_env.h"

using namespace mp;

namespace {

// A port nobody listens on now, for a RAS service to bind later.  Not one
// the kernel hands out (ephemeral ports, which every other test's
// connections and listeners take, so one could take it before the service
// does): a random one below the ephemeral range, and above NCCL's RAS
// default (28028), that binds now.
int free_port() {
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  std::mt19937 pick(std::random_device{}());
  const int first = 28100, count = std::max(1, low - first);
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = first + int(pick() % uint32_t(count));
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (free) return port;
  }
  return -1;
}

// A client connection to a RAS client socket on 127.0.0.1.
struct RasClient {
  int fd = -1;
  explicit RasClient(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    for (int tries = 0; tries < 200 && fd < 0; ++tries) {  // its process may still be starting
      fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        fd = -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  ~RasClient() {
    if (fd >= 0) close(fd);
  }
  bool send(const std::string& text) const { return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL) > 0; }
  // What arrives until `until` is in it, the server closes, or `seconds` pass.
  std::string read(const std::string& until = "", int seconds = 30) const {
    std::string got;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < end && (until.empty() || got.find(until) == std::string::npos)) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char chunk[4096];
      const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) break;
      got.append(chunk, size_t(n));
    }
    return got;
  }
};

std::string status(int port, const std::string& commands = "STATUS\n") {
  RasClient c(port);
  c.send(commands);
  return c.read();
}

bool contains(const std::string& text, const std::string& what) {
  if (text.find(what) != std::string::npos) return true;
  UNSCOPED_INFO("missing: " << what);
  return false;
}

// Children wait on `gate` (one byte each) until the parent lets them go.
struct Gate {
  int fds[2] = {-1, -1};
  Gate() { REQUIRE(pipe(fds) == 0); }
  ~Gate() { close(fds[0]), close(fds[1]); }
  void wait() const {
    char c;
    (void)!read(fds[0], &c, 1);
  }
  void open(int n) const {
    for (int i = 0; i < n; ++i) (void)!write(fds[1], "x", 1);
  }
};

std::vector<int> ports_for(int nranks) {
  std::vector<int> ports;
  while (int(ports.size()) < nranks) {  // distinct: free_port picks at random
    const int port = free_port();
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
  }
  return ports;
}

void listen_at(int port) { setenv("NCCL_RAS_ADDR", ("127.0.0.1:" + std::to_string(port)).c_str(), 1); }

// One communicator over ports.size() processes, rank r's RAS client
// socket at ports[r]; setup(r) runs before init, body(r, comm) after, and
// returns the rank's failures (it ends the communicator).
std::vector<pid_t> fork_job(const std::vector<int>& ports, const std::function<int(int, ncclComm_t)>& body,
                            const std::function<void(int)>& setup = {}) {
  const int n = int(ports.size());
  return fork_ranks(n, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    listen_at(ports[size_t(r)]);
    if (setup) setup(r);
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, n, ids[0], r) != ncclSuccess) return 1;
    return body(r, comm);
  });
}

int all_reduce_ok(ncclComm_t comm, int nranks) {
  float x = 1, sum = 0;
  if (ncclAllReduce(&x, &sum, 1, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) return 1;
  return sum == float(nranks) ? 0 : 1;
}

int wait_all(const std::vector<pid_t>& pids) {
  int bad = 0;
  for (pid_t pid : pids) {
    int st = 0;
    waitpid(pid, &st, 0);
    bad += exit_code(st) != 0;
  }
  return bad;
}

// Asks until `what` shows (the job gets there on its own time), at most ~20 s.
// The first reply `done` accepts, or the last after 20 s.
template <class Done>
std::string status_until(int port, const std::string& commands, Done done) {
  std::string report;
  for (int i = 0; i < 100; ++i) {
    report = status(port, commands);
    if (done(report)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return report;
}

std::string status_showing(int port, const std::string& what, const std::string& commands = "STATUS\n") {
  return status_until(port, commands, [&](const std::string& r) { return contains(r, what); });
}

}  // namespace

TEST_CASE("RAS names the rank that has launched fewer collectives than its peers (processes)", "[mp][ras]") {
  constexpr int n = 4;
  const std::vector<int> ports = ports_for(n);
  Gate gate;
  const auto pids = fork_job(ports, [&](int r, ncclComm_t comm) {
    int bad = 0;
    for (int i = 0; i < 4; ++i) bad += all_reduce_ok(comm, n);
    if (r == n - 1) gate.wait();  // held back: the others wait for it in their fifth
    bad += all_reduce_ok(comm, n);
    bad += ncclCommDestroy(comm) != ncclSuccess;
    return bad;
  });
  // Once all three others are in their fifth (a slow machine may show one
  // or two there first).
  const std::string report = status_showing(ports[0], "  3 ranks have launched up to operation 5\n");
  CHECK(contains(report, "Job summary\n===========\n\n"));
  CHECK(contains(report, "      1          4            0          4        0\n"));
  CHECK(contains(report, "    0         1         1         4         4         4   RUNNING  MISMATCH\n"));
  CHECK(contains(report, "  Communicator ranks have different AllReduce operation counts\n"
                         "  3 ranks have launched up to operation 5\n"));
  CHECK(contains(report, "  Rank 3 has launched up to operation 4 -- GPU none managed by process " +
                             std::to_string(pids[3]) + " on node "));
  // JSON has every rank's count.
  const std::string json = status(ports[1], "SET FORMAT json\nSTATUS\n");
  CHECK(contains(json, "\"communicators_count\": 1"));
  CHECK(contains(json, "\"AllReduce\": 4"));
  CHECK(contains(json, "\"AllReduce\": 5"));
  CHECK(contains(json, "\"missing_ranks_count\": 0"));
  gate.open(1);
  CHECK(wait_all(pids) == 0);
}

TEST_CASE("RAS reports a stopped process as unresponsive and a killed one as dead, and a monitor sees it die",
          "[mp][ras]") {
  constexpr int n = 3;
  const std::vector<int> ports = ports_for(n);
  Gate gate;
  const auto pids = fork_job(ports, [&](int, ncclComm_t comm) {
    int bad = all_reduce_ok(comm, n);
    gate.wait();  // rank 2 is killed meanwhile: the others abort
    bad += ncclCommAbort(comm) != ncclSuccess;
    return bad;
  });
  std::string report = status_showing(ports[0], "RUNNING      OK");
  CHECK(contains(report, "    0         1         1         3         3         3   RUNNING      OK\n"));
  CHECK(contains(report, "Errors\n======\n\nWarnings\n========\n\n"));
  // A timeout past the clock's range is as good as none: live peers answer
  // (it overflowed into the past, and every peer counted as timed out).
  report = status(ports[0], "TIMEOUT 10000000000\nSTATUS\n");
  CHECK(contains(report, "    0         1         1         3         3         3   RUNNING      OK\n"));

  // Stopped: it accepts (the kernel does) but never answers.
  kill(pids[2], SIGSTOP);
  report = status(ports[0], "TIMEOUT 1\nSTATUS\n");
  CHECK(contains(report, "INCOMPLETE\n  Missing communicator data from 1 job process\n  Process " +
                             std::to_string(pids[2]) + " on node "));
  CHECK(contains(report, "RUNNING  INCOMPLETE\n"));
  CHECK(contains(report, "INCOMPLETE\n  Missing communicator data from 1 rank\n"
                         "  Rank 2 -- GPU none managed by process " + std::to_string(pids[2])));
  CHECK(contains(report, "TIMEOUT\n  Encountered 1 communication timeout while gathering communicator data\n"));

  // A monitor on rank 1's process, then the stopped process killed.
  RasClient monitor(ports[1]);
  monitor.send("MONITOR all\n");
  CHECK(monitor.read("OK\n", 10) == "OK\n");
  kill(pids[2], SIGKILL);
  int st = 0;
  waitpid(pids[2], &st, 0);
  const std::string events = monitor.read("PEER_DEAD", 20);
  CHECK(contains(events, "PEER_DEAD: Process " + std::to_string(pids[2]) + " on node "));

  report = status(ports[0]);
  CHECK(contains(report, "DEAD\n  1 job process is considered dead (unreachable via the RAS network)\n  Process " +
                             std::to_string(pids[2])));
  CHECK(contains(report, "Missing communicator data from 1 rank\n  Rank 2 -- GPU none managed by process"));
  CHECK(report.find("TIMEOUT\n") == std::string::npos);  // the dead refuse at once
  gate.open(2);
  CHECK(wait_all({pids[0], pids[1]}) == 0);
}

TEST_CASE("RAS speaks NCCL's client protocol and refuses bad input", "[mp][ras]") {
  const std::vector<int> two = ports_for(2);
  const int port = two[0], off_port = two[1];
  Gate gate;
  const auto pids = fork_job(
      {port, off_port},
      [&](int, ncclComm_t comm) {
        int bad = all_reduce_ok(comm, 2);
        gate.wait();
        return bad + (ncclCommDestroy(comm) != ncclSuccess);
      },
      [](int r) {
        if (r == 1) setenv("NCCL_RAS_ENABLE", "0", 1);
      });
  {
    RasClient c(port);
    REQUIRE(c.fd >= 0);
    const std::pair<const char*, const char*> exchanges[] = {  // command, its one-line reply
        {"CLIENT PROTOCOL 2\n", "SERVER PROTOCOL 2\n"},
        {"timeout soon\r\n", "ERROR: Invalid timeout value soon\n"},
        {"TIMEOUT 2.5\n", "OK\n"},
        {"SET FORMAT yaml\n", "ERROR: Invalid format yaml\n"},
        {"frobnicate\n", "ERROR: Unknown command frobnicate\n"},
        {"MONITOR sometimes\n", "ERROR: Invalid event group 'sometimes'\n"},
        {"TIMEOUT \n", "OK\n"},  // empty: 0 (no timeout), as NCCL's strtol reads it
        {"TIMEOUT 10000000000\n", "OK\n"},  // as good as none (it overflowed the clock into the past)
    };
    for (const auto& [command, reply] : exchanges) {
      INFO(command);
      c.send(command);
      CHECK(c.read("\n") == reply);
    }
    c.send("set format JSON\nverbose status\n");
    const std::string json = c.read();  // to the end: the server closes
    CHECK(contains(json, "\"nccl_version\": \""));
    CHECK(contains(json, "\"communicators_count\": 1"));
    // Rank 1's process runs no RAS: its rank is missing, though its process is known.
    CHECK(contains(json, "\"missing_ranks_count\": 1"));
    CHECK(json.substr(json.size() - 2) == "}\n");
  }
  {
    // NCCL's strtok: spaces and empty groups are skipped.
    RasClient c(port);
    c.send("MONITOR  lifecycle,,trace \n");
    CHECK(c.read("\n") == "OK\n");
  }
  {
    // Idle clients, more than a process serves at once: the one past the
    // limit is told why, and the job's own peers are still answered.
    std::vector<std::unique_ptr<RasClient>> idle;
    for (int i = 0; i < 256; ++i) idle.push_back(std::make_unique<RasClient>(port));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    RasClient extra(port);
    CHECK(extra.read() == "ERROR: too many RAS clients are connected to this process; try again\n");
    idle.clear();
  }
  {
    RasClient c(port);
    c.send(std::string(2000, 'x'));  // no newline within NCCL's 1024 bytes: dropped
    CHECK(c.read() == "");
  }
  {
    RasClient c(port);
    c.send("SET FORMAT json\nDIAGNOSTICS\n");
    CHECK(c.read() == "OK\nERROR: diagnostics only supports text output\n");
  }
  {
    RasClient c(port);
    c.send("DIAGNOSTICS\n");
    const std::string lines = c.read();
    CHECK(contains(lines, " NCCL DIAG === RAS Diagnostics ===\n"));
    CHECK(contains(lines, " NCCL DIAG [INFO] diagnostics incomplete, gathered 1/2 ranks in comm 0x"));
    CHECK(contains(lines, " NCCL DIAG RAS diagnostics completed in "));
    CHECK(contains(lines, " ms across 1 RAS peers\n"));
  }
  const std::string client = std::string(BRAID_NCCLRAS) + " -h 127.0.0.1 -p ";
  auto run = [](const std::string& command, int* rc) {
    std::string out;
    FILE* p = popen((command + " 2>&1").c_str(), "r");
    char buf[4096];
    for (size_t k; (k = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, k);
    *rc = WEXITSTATUS(pclose(p));
    return out;
  };
  int rc = -1;
  std::string out = run(client + std::to_string(port), &rc);
  CHECK(rc == 0);
  CHECK(contains(out, "Communicators... ("));
  out = run(client + std::to_string(port) + " -t never", &rc);
  CHECK(rc == 1);
  CHECK(contains(out, "Invalid timeout: never"));
  out = run(client + std::to_string(off_port), &rc);  // NCCL_RAS_ENABLE=0 there: nobody listens
  CHECK(rc == 1);
  CHECK(contains(out, "Failed to connect to the NCCL RAS service!"));
  gate.open(2);
  CHECK(wait_all(pids) == 0);
}

TEST_CASE("RAS reports the thread-ranks of one process, each with its own status", "[mp][ras]") {
  constexpr int n = 4;
  const int port = free_port();
  Gate gate;
  const auto pids = fork_ranks(1, 60, 1, [&](int, const std::vector<ncclUniqueId>& ids) {
    listen_at(port);
    std::vector<int> bad(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, n, ids[0], r) != ncclSuccess) return void(++bad[r]);
        for (int i = 0; i < 3; ++i) bad[r] += all_reduce_ok(comm, n);
        float x = float(r);
        bad[r] += ncclBroadcast(&x, &x, 1, ncclFloat, 2, comm, nullptr) != ncclSuccess || x != 2;
        if (r < 2) bad[r] += ncclCommFinalize(comm) != ncclSuccess;
        gate.wait();
        bad[r] += ncclCommDestroy(comm) != ncclSuccess;
      });
    for (auto& t : threads) t.join();
    int total = 0;
    for (int b : bad) total += b;
    return total;
  });
  // Once both ranks 0 and 1 have finalized (a report between the two shows one).
  const std::string report = status_showing(port, "  2 ranks have status FINALIZE\n");
  CHECK(contains(report, "    0         1         1         4         4         4  FINALIZE  MISMATCH\n"));
  CHECK(contains(report, "  Communicator ranks have different status\n"
                         "  2 ranks have status FINALIZE\n"
                         "  2 ranks have status RUNNING\n\n"));
  CHECK(report.find("operation counts") == std::string::npos);
  const std::string json = status(port, "SET FORMAT json\nSTATUS\n");
  CHECK(contains(json, "\"ranks_count\": 4"));
  CHECK(contains(json, "\"Broadcast\": 1"));
  CHECK(contains(json, "\"AllReduce\": 3"));
  CHECK(contains(json, "\"finalize_called\": true"));
  gate.open(n);
  CHECK(wait_all(pids) == 0);
}

TEST_CASE("RAS diagnostics on demand compare every communicator's ranks, naming what differs", "[mp][ras]") {
  constexpr int n = 3;
  const std::vector<int> ports = ports_for(n);
  Gate gate;
  const auto pids = fork_job(
      ports,
      [&](int r, ncclComm_t comm) {
        ncclComm_t half = nullptr;
        int bad = ncclCommSplit(comm, r < 2 ? 0 : NCCL_SPLIT_NOCOLOR, r, &half, nullptr) != ncclSuccess;
        gate.wait();
        if (half) bad += ncclCommDestroy(half) != ncclSuccess;
        return bad + (ncclCommDestroy(comm) != ncclSuccess);
      },
      [](int r) {
        if (r != 2) return;
        setenv("NCCL_RAS_TEST_MARK", "two", 1);
        setenv("BRAID_TEST_API_TOKEN", "hunter2", 1);
        setenv("BRAID_TEST_NOT_UTF8", "\xff\xfe", 1);  // travels in JSON: replaced, never thrown on
      });
  // Once both communicators show with every rank: a process registers its
  // rank of the split on its own time, so one rank of it may show first.
  const std::string lines = status_until(ports[1], "DIAGNOSTICS\n", [](const std::string& r) {
    return contains(r, "across 2 ranks") && !contains(r, "diagnostics incomplete");
  });
  CHECK(contains(lines, "across 3 ranks"));
  CHECK_FALSE(contains(lines, "diagnostics incomplete"));
  CHECK(contains(lines, "NCCL DIAG [OK]   library: braid "));
  CHECK(contains(lines, "NCCL DIAG [INFO] NCCL environment: mismatch across 3 ranks in comm 0x"));
  CHECK(contains(lines, "NCCL DIAG [INFO] NCCL environment: NCCL_RAS_TEST_MARK=two on rank(s) {2}\n"));
  CHECK(contains(lines, "NCCL DIAG [INFO] NCCL environment: NCCL_RAS_TEST_MARK=(unset) on rank(s) {0,1}\n"));
  // Each process listens at its own NCCL_RAS_ADDR here: that differs in both communicators.
  CHECK(contains(lines, "NCCL DIAG [INFO] NCCL environment: 2 NCCL_* env var(s) differ across 3 ranks in comm 0x"));
  CHECK(contains(lines, "NCCL DIAG [INFO] NCCL environment: 1 NCCL_* env var(s) differ across 2 ranks in comm 0x"));
  CHECK(contains(lines, "NCCL DIAG [OK]   braid environment: BRAID_* env vars consistent across 2 ranks in comm 0x"));
  CHECK(contains(lines, "BRAID_TEST_API_TOKEN=<hidden, hash "));
  CHECK(lines.find("hunter2") == std::string::npos);
  CHECK(contains(lines, " ms across 3 RAS peers\n"));
  gate.open(n);
  CHECK(wait_all(pids) == 0);
}

TEST_CASE("RAS CONTROL PROFILER_MASK sets every process's profiler activation mask", "[mp][ras]") {
  const std::vector<int> ports = ports_for(2);
  char log_path[] = "/tmp/braid_ras_profiler_XXXXXX";
  close(mkstemp(log_path));
  ScopedEnv plugin("NCCL_PROFILER_PLUGIN", BRAID_TEST_PROFILER_LIB);
  ScopedEnv log("BRAID_TEST_PROFILER_LOG", log_path);
  Gate gate;
  const auto pids = fork_job(ports, [&](int, ncclComm_t comm) {
    int bad = all_reduce_ok(comm, 2) + all_reduce_ok(comm, 2);
    gate.wait();  // the mask is set to none meanwhile
    for (int i = 0; i < 3; ++i) bad += all_reduce_ok(comm, 2);
    bad += ncclCommDestroy(comm) != ncclSuccess;
    return bad;
  });
  auto colls = [&] {
    std::string text;
    if (FILE* f = std::fopen(log_path, "r")) {
      char buf[4096];
      for (size_t k; (k = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, k);
      std::fclose(f);
    }
    int n = 0;
    for (size_t at = 0; (at = text.find("start Coll ", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  for (int i = 0; i < 200 && colls() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(colls() == 4);
  {
    RasClient c(ports[0]);
    c.send("CONTROL PROFILER_MASK sometimes\n");
    CHECK(c.read("\n") == "ERROR: Invalid profiler mask value 'sometimes'\n");
    c.send("control profiler_mask coll,bogus\n");
    CHECK(c.read("\n") == "ERROR: Invalid profiler mask value 'coll,bogus'\n");
    c.send("CONTROL VOLUME 11\n");
    CHECK(c.read("\n") == "ERROR: Unknown CONTROL subcommand 'VOLUME'\n");
  }
  FILE* p = popen((std::string(BRAID_NCCLRAS) + " -h 127.0.0.1 -p " + std::to_string(ports[0]) +
                   " CONTROL PROFILER_MASK none").c_str(), "r");
  char reply[64] = {};
  CHECK(std::fgets(reply, sizeof reply, p) == std::string("OK\n"));  // once every process that answers has it
  CHECK(WEXITSTATUS(pclose(p)) == 0);
  gate.open(2);
  CHECK(wait_all(pids) == 0);
  CHECK(colls() == 4);  // neither process made another event
  unlink(log_path);
}

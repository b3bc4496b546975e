// This host's ranks of a communicator that spans hosts: the program each
// rdma guest runs (tests/rdma/run.sh).  Ranks meet through NCCL_COMM_ID.
//
//   cross_host_ranks SUITE FIRST_RANK LOCAL_RANKS NRANKS
//
// Forks LOCAL_RANKS processes, ranks FIRST_RANK.., and runs SUITE in each:
//   short        every collective at 1, 4099 and 300000 floats (in place
//                and not), every datatype with every reduction op, grouped
//                send/recv of every datatype between every pair, one-sided
//                puts with signals between every pair, MoE dispatch and
//                combine, braidAlltoAllv (stores within a guest, RMA
//                between them), and a GIN AlltoAll of the device API
//                (gin_alltoall.h; GIN over the net between the guests):
//                exact
//   full         short, and every collective at 4 MB and 16 MB as well
//   kill         collectives until the last rank of the job kills itself;
//                every survivor's call must then fail with ncclRemoteError
//                or ncclSystemError within BRAID_TIMEOUT (+5 s), its
//                async error say so, and ncclCommAbort return within 2 s
//   gin-kill     a devComm with GIN between the guests, then the last rank
//                of the job kills itself: every survivor's
//                ncclCommGetAsyncError must say ncclRemoteError within
//                BRAID_TIMEOUT (+5 s), the other guest's ranks hearing it
//                from GIN's receiver (nothing else of theirs talks to it)
//   failover     AllReduces (1 MB) and AlltoAlls (64 KB a pair), each
//                checked exact, while rank 0 runs $FAILOVER_DOWN after the
//                10th, its %s the InfiniBand device rank 0's connections
//                took first (a command that takes that port down); with
//                NCCL_IB_RESILIENCY_PORT_FAILOVER=1 every call must still
//                succeed, exact (the connections on that port move to
//                their standby paths: ib_failover.h).  With $FAILOVER_UP
//                (after the 20th: the port up again) and
//                $FAILOVER_OTHER_DOWN (after the 30th, %o its second
//                device), under NCCL_IB_RESILIENCY_PORT_RECOVERY=1 too,
//                and a log saying a failed path stood by again
//   stream       rank 1 sends rank 0 16 messages of 4 MB, each checked
//                exact, pausing 2 s before the 5th, and rank 0 runs
//                $FAILOVER_DOWN from another thread 1 s into the pause,
//                while it waits for the 5th: every message must arrive,
//                over the standby path; with $EXPECT_SLOWEST, each within
//                that many seconds, the pause included, and with
//                $FAILOVER_SAYS, rank 0's log saying why it failed over
//   rails        every collective at 4 MB, and send/recv of every
//                datatype at 2^17 elements a message: exact (two
//                ports a guest, each carrying its share: rails_guest.sh)
//   init-fails   init must fail, with ncclSystemError and the message
//                in $EXPECT_ERROR (a wrong NCCL_IB_HCA)
//   call-fails   init may succeed; then the first AllReduce, or init,
//                must fail with ncclRemoteError or ncclSystemError within
//                $EXPECT_WITHIN seconds, saying one of $EXPECT_ERROR's
//                '|'-separated alternatives (a GID the peer cannot reach;
//                a rank whose peer failed first sees the peer leave); with
//                $FAILOVER_DOWN, rank 0 runs it first (%s, %o: as for
//                failover; every port down for good)
// With EXPECT_TRANSPORT (e.g. "shm+IB"), a rank whose communicator took
// another transport fails; with EXPECT_LOG as well, one whose init log
// lacks one of its ';'-separated texts (e.g. the queue pairs' traffic class).  With
// TRAFFIC_CLASS, the communicator's config has that trafficClass.  Exit status 0
// when every rank did what its suite asks.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "alltoallv_calls.h"
#include "cross_host_sweep.h"
#include "moe_layer.h"
#if __has_include(<nccl_device/core.h>)  // NVIDIA's device headers, for the GIN client
#include "gin_alltoall.h"
#define CROSS_HOST_GIN 1
#endif

using namespace mp;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// With $EXPECT_TRANSPORT, whether this process's log has `what` followed by it.
bool log_says(int rank, const char* what, bool net_only = false);
std::string my_log();  // this process's log (with $EXPECT_TRANSPORT)

int report(int rank, Failures& f, const char* what, Clock::time_point t0) {
  std::fprintf(stderr, "rank %d: %s %s in %.1f s\n", rank, what, f.count ? "FAILED" : "exact", seconds_since(t0));
  return f.count ? 1 : 0;
}

int sweep(int rank, int n, ncclComm_t comm, bool full) {
  Failures f;
  auto t0 = Clock::now();
  every_collective(rank, n, comm, f, {1, 4099, 300000});
  report(rank, f, "every collective", t0);
  t0 = Clock::now();
  every_datatype(rank, n, comm, f, 1003);
  report(rank, f, "every datatype and op", t0);
  t0 = Clock::now();
  every_send_recv(rank, n, comm, f, 5000);
  report(rank, f, "send/recv of every datatype", t0);
  t0 = Clock::now();
  every_put_signal(rank, n, comm, f, 300000);
  if (!log_says(rank, "one-sided RMA over ")) f.fail("no one-sided RMA on the expected transport");
  report(rank, f, "put/signal between every pair", t0);
  t0 = Clock::now();
  moe_test::Case moe;
  moe.experts = 4 * n;
  moe.top_k = 4;
  moe.hidden = 256;
  moe.max_tokens = 64;
  moe.dtype = ncclBfloat16;
  moe_test::layers_body(moe, 10)(rank, n, comm, f);
  moe_test::calls_body(moe_test::A2aCase{.type = ncclFloat32, .max_count = 5000, .calls = 10, .seed = 3})(rank, n,
                                                                                                          comm, f);
  report(rank, f, "MoE dispatch/combine and AlltoAllv", t0);
#ifdef CROSS_HOST_GIN
  t0 = Clock::now();
  gin_host::gin_alltoall(rank, n, comm, f);
  if (!log_says(rank, "ranks of other hosts over ", true)) f.fail("GIN between the guests is not on the expected net");
  report(rank, f, "GIN AlltoAll between every pair", t0);
#endif
  if (full) {
    t0 = Clock::now();
    every_collective(rank, n, comm, f, {1 << 20, 1 << 22});
    report(rank, f, "every collective at 4 MB and 16 MB", t0);
  }
  return f.count ? 1 : 0;
}

// The last rank dies after a few calls; the others must see it promptly.
int kill_suite(int rank, int n, ncclComm_t comm) {
  const double timeout_s = double(std::atoll(std::getenv("BRAID_TIMEOUT") ? std::getenv("BRAID_TIMEOUT") : "300"));
  std::vector<float> in(1 << 18), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(rank + 1) * float(i % 13);
  const float sum = float(n * (n + 1) / 2);
  auto last_ok = Clock::now();
  ncclResult_t r = ncclSuccess;
  for (int call = 0; call < 100000; ++call) {
    if (rank == n - 1 && call == 5) raise(SIGKILL);
    r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
    if (r != ncclSuccess) break;
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != sum * float(i % 13)) {
        std::fprintf(stderr, "rank %d: a call that succeeded gave wrong data\n", rank);
        return 1;
      }
    last_ok = Clock::now();
  }
  const double took = seconds_since(last_ok);
  std::fprintf(stderr, "rank %d: after the kill: %s in %.1f s: %s\n", rank, ncclGetErrorString(r), took,
               ncclGetLastError(comm));
  if (r != ncclRemoteError && r != ncclSystemError) return 1;
  if (took > timeout_s + 5) return 1;
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || (async != ncclRemoteError && async != ncclSystemError))
    return 1;
  auto t = Clock::now();
  if (ncclCommAbort(comm) != ncclSuccess || seconds_since(t) > 2) return 1;
  return 0;
}

int rails_suite(int rank, int n, ncclComm_t comm) {
  Failures f;
  const auto t0 = Clock::now();
  every_collective(rank, n, comm, f, {1 << 20});
  every_send_recv(rank, n, comm, f, 1 << 17);
  return report(rank, f, "every collective and send/recv, large", t0);
}

// The InfiniBand devices this rank's connections use, in order: the NET
// line names them, "device 0 (rxe0, ...); the nearest..." or "devices 0
// (rxe0, ...), 1 (rxe1, ...); the nearest...".
std::vector<std::string> net_devices(int rank) {
  const std::string log = my_log();
  const size_t line = log.find("transport on device");
  const std::string net = line == std::string::npos ? "" : log.substr(line, log.find("; the nearest", line) - line);
  std::vector<std::string> devices;
  for (size_t open = net.find(" ("); open != std::string::npos; open = net.find(" (", open + 2))
    devices.push_back(net.substr(open + 2, net.find(',', open) - open - 2));
  if (devices.empty()) std::fprintf(stderr, "rank %d: the log names no device: %s\n", rank, log.c_str());
  return devices;
}

// The command in $name, its %s the device this rank's connections use
// first and %o its second.
std::string port_command(const char* name, const std::vector<std::string>& devices) {
  std::string cmd = std::getenv(name) ? std::getenv(name) : "";
  for (auto [mark, device] : {std::pair{"%s", devices[0]}, std::pair{"%o", devices.back()}})
    for (size_t at; (at = cmd.find(mark)) != std::string::npos;) cmd.replace(at, 2, device);
  return cmd;
}

// Rank 0 takes a port down mid-run (and, for port recovery, up again and
// then the other down); every call must succeed, exact.  Each round is an
// AllReduce and an AlltoAll, so every pair's connections carry data,
// whichever port a rank's are on.
int failover_suite(int rank, int n, ncclComm_t comm) {
  constexpr int kCalls = 40, kDownAfter = 10, kUpAfter = 20, kOtherDownAfter = 30;
  constexpr size_t kBlock = 1 << 14;  // AlltoAll floats per pair
  std::vector<float> in(1 << 18), out(in.size()), a2a_in(kBlock * size_t(n)), a2a_out(a2a_in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(rank + 1) * float(i % 13);
  for (size_t i = 0; i < a2a_in.size(); ++i) a2a_in[i] = float(rank * 1000 + int(i / kBlock)) + float(i % kBlock);
  const float sum = float(n * (n + 1) / 2);
  const std::vector<std::string> devices = net_devices(rank);
  if (devices.empty()) return 1;
  // $FAILOVER_DOWN after call 10, $FAILOVER_UP after 20, $FAILOVER_OTHER_DOWN after 30 (rank 0's).
  const std::pair<int, std::string> steps[] = {{kDownAfter, port_command("FAILOVER_DOWN", devices)},
                                               {kUpAfter, port_command("FAILOVER_UP", devices)},
                                               {kOtherDownAfter, port_command("FAILOVER_OTHER_DOWN", devices)}};
  auto t0 = Clock::now();
  std::vector<double> took;  // each round's seconds: the failover's shows as the slowest
  for (int call = 0; call < kCalls; ++call) {
    const auto round = Clock::now();
    for (const auto& [after, cmd] : steps)
      if (rank == 0 && call == after && !cmd.empty()) {
        std::fprintf(stderr, "rank 0: after call %d: %s\n", call, cmd.c_str());
        if (std::system(cmd.c_str()) != 0) return 1;
      }
    const ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
    if (r != ncclSuccess) {
      std::fprintf(stderr, "rank %d: call %d: %s: %s\n", rank, call, ncclGetErrorString(r), ncclGetLastError(comm));
      return 1;
    }
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != sum * float(i % 13)) {
        std::fprintf(stderr, "rank %d: call %d gave wrong data at %zu\n", rank, call, i);
        return 1;
      }
    if (ncclAlltoAll(a2a_in.data(), a2a_out.data(), kBlock, ncclFloat, comm, nullptr) != ncclSuccess) {
      std::fprintf(stderr, "rank %d: AlltoAll %d: %s\n", rank, call, ncclGetLastError(comm));
      return 1;
    }
    for (size_t i = 0; i < a2a_out.size(); ++i)  // block p came from rank p, its block for this rank
      if (a2a_out[i] != float(int(i / kBlock) * 1000 + rank) + float(i % kBlock)) {
        std::fprintf(stderr, "rank %d: AlltoAll %d gave wrong data at %zu\n", rank, call, i);
        return 1;
      }
    took.push_back(seconds_since(round));
    if (took.back() > 1.0) std::fprintf(stderr, "rank %d: round %d took %.1f s\n", rank, call, took.back());
  }
  const double total = seconds_since(t0);
  std::sort(took.begin(), took.end());
  const std::string after = my_log();
  const bool recovered = after.find("again (NCCL_IB_RESILIENCY_PORT_RECOVERY)") != std::string::npos;
  std::fprintf(stderr, "rank %d: %d rounds exact in %.1f s (median %.2f s, slowest %.2f s)%s%s\n", rank, kCalls,
               total, took[took.size() / 2], took.back(),
               after.find("failing over") != std::string::npos ? ", a connection failed over" : "",
               recovered ? ", a path stood by again" : "");
  if (std::getenv("FAILOVER_UP") && !recovered) {
    std::fprintf(stderr, "rank %d: no connection's failed path stood by again after FAILOVER_UP\n", rank);
    return 1;
  }
  return 0;
}

// Rank 1 sends rank 0 a stream of messages (4 MB each, checked exact).
// Before the 5th it pauses 2 s; rank 0, its receive for the 5th posted
// (and so its credits out), runs $FAILOVER_DOWN from another thread 1 s
// into the pause.  Rank 0 then posts nothing that could fail on the dead
// port: it learns of it from the port's asynchronous event and fails over
// at once (ib_events.h), so rank 1 writes on the standby path; or, under
// NCCL_IB_RETURN_ASYNC_EVENTS=0, rank 1's writes into the dead port run out
// of retries first (BRAID_IB_RETRY_CNT tries of 4.096 us *
// 2^BRAID_IB_TIMEOUT, 8.6 s at the defaults).  With $EXPECT_SLOWEST, every
// message, the pause included, must arrive within that many seconds; with
// $FAILOVER_SAYS, rank 0's log must have that text.
int stream_suite(int rank, int n, ncclComm_t comm) {
  constexpr int kMessages = 16, kDownAfter = 4;
  constexpr size_t kCount = 1 << 20;
  if (n != 2) return 1;
  std::vector<float> buf(kCount);
  auto value = [](int m, size_t i) { return float(m * 7 + int(i % 1021)); };
  const std::vector<std::string> devices = net_devices(rank);
  if (devices.empty()) return 1;
  const std::string down = port_command("FAILOVER_DOWN", devices);
  std::thread taking_down;
  std::atomic<int> down_rc{0};
  double slowest = 0;
  const auto t0 = Clock::now();
  for (int m = 0; m < kMessages; ++m) {
    if (rank == 0 && m == kDownAfter && !down.empty()) {
      std::fprintf(stderr, "rank 0: after message %d, in 1 s, from another thread: %s\n", m, down.c_str());
      taking_down = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        down_rc = std::system(down.c_str());
      });
    }
    if (rank == 1 && m == kDownAfter) std::this_thread::sleep_for(std::chrono::seconds(2));
    const auto t = Clock::now();
    ncclResult_t r;
    if (rank == 1) {
      for (size_t i = 0; i < kCount; ++i) buf[i] = value(m, i);
      r = ncclSend(buf.data(), kCount, ncclFloat, 0, comm, nullptr);
    } else {
      r = ncclRecv(buf.data(), kCount, ncclFloat, 1, comm, nullptr);
    }
    if (r != ncclSuccess) {
      std::fprintf(stderr, "rank %d: message %d: %s: %s\n", rank, m, ncclGetErrorString(r), ncclGetLastError(comm));
      if (taking_down.joinable()) taking_down.join();
      return 1;
    }
    slowest = std::max(slowest, seconds_since(t));
    if (rank == 0)
      for (size_t i = 0; i < kCount; ++i)
        if (buf[i] != value(m, i)) {
          std::fprintf(stderr, "rank 0: message %d gave wrong data at %zu\n", m, i);
          return 1;
        }
  }
  if (taking_down.joinable()) taking_down.join();
  const bool failed_over = my_log().find("failing over") != std::string::npos;
  std::fprintf(stderr, "rank %d: %d messages exact in %.1f s, the slowest %.2f s%s\n", rank, kMessages,
               seconds_since(t0), slowest, failed_over ? ", a connection failed over" : "");
  const char* says = std::getenv("FAILOVER_SAYS");
  if (rank == 0 && says && my_log().find(says) == std::string::npos) {
    std::fprintf(stderr, "rank 0: the log does not say why as expected: %s\n", says);
    return 1;
  }
  const char* expect = std::getenv("EXPECT_SLOWEST");
  if (expect && slowest >= std::atof(expect)) {
    std::fprintf(stderr, "rank %d: a message took %.2f s, not under %s s\n", rank, slowest, expect);
    return 1;
  }
  return down_rc == 0 && (down.empty() || failed_over) ? 0 : 1;
}

#ifdef CROSS_HOST_GIN
// A devComm with GIN to the other guest's ranks; the last rank dies.
int gin_kill_suite(int rank, int n, ncclComm_t comm) {
  const double timeout_s = double(std::atoll(std::getenv("BRAID_TIMEOUT") ? std::getenv("BRAID_TIMEOUT") : "300"));
  Failures f;
  ncclDevCommRequirements reqs = {};
  reqs.ginSignalCount = 1;
  ncclDevComm dev = {};
  MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
  if (!log_says(rank, "ranks of other hosts over ", true)) f.fail("GIN between the guests is not on the expected net");
  barrier_all(comm, f);
  if (f.count) return 1;
  // A collective returns once its last fragments are handed to the NIC, as
  // NCCL's does once its proxy has them: a process killed at once can take
  // them with it, and a peer still in the barrier then fails there.  A
  // moment lets them go; what the test waits for comes after the kill.
  if (rank == n - 1) usleep(300 * 1000), raise(SIGKILL);
  const auto t0 = Clock::now();
  ncclResult_t async = ncclSuccess;
  while (async == ncclSuccess && seconds_since(t0) < timeout_s + 5) {
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return 1;
    usleep(1000);
  }
  const std::string why = ncclGetLastError(comm);
  std::fprintf(stderr, "rank %d: after the kill: %s in %.1f s: %s\n", rank, ncclGetErrorString(async),
               seconds_since(t0), why.c_str());
  const bool other_guest = rank < n / 2;  // the dead rank is the last of the second guest's
  if (async != ncclRemoteError || (other_guest && why.find("GIN receiver") == std::string::npos)) return 1;
  return ncclCommAbort(comm) == ncclSuccess ? 0 : 1;
}
#endif

// Whether `what` holds one of the '|'-separated alternatives of $EXPECT_ERROR.
bool says(const char* what) {
  const char* expected = std::getenv("EXPECT_ERROR");
  if (!expected) return true;
  std::string alternatives = expected;
  for (size_t begin = 0; begin <= alternatives.size();) {
    size_t end = alternatives.find('|', begin);
    if (end == std::string::npos) end = alternatives.size();
    if (std::string(what).find(alternatives.substr(begin, end - begin)) != std::string::npos) return true;
    begin = end + 1;
  }
  return false;
}

// With $EXPECT_TRANSPORT set, init logs to a file of this process, and the
// communicator's transport (as "ready: ... transport MODE (NAME)" says) must
// start with it: the traffic took the path the test is about.
void log_init_to_file() {
  if (!std::getenv("EXPECT_TRANSPORT")) return;
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_SUBSYS", "INIT,BOOTSTRAP,NET", 1);  // BOOTSTRAP: the interface each socket listens on
  setenv("BRAID_DEBUG_FILE", "/tmp/cross_host_ranks.%p.log", 1);
}
std::string my_log() {
  std::string log;
  if (FILE* f = std::fopen(("/tmp/cross_host_ranks." + std::to_string(getpid()) + ".log").c_str(), "r")) {
    char buf[4096];
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;) log.append(buf, got);
    std::fclose(f);
  }
  return log;
}
bool took_expected_transport(int rank) {
  const char* expected = std::getenv("EXPECT_TRANSPORT");
  if (!expected) return true;
  const std::string log = my_log();
  const size_t at = log.find(" ready: ");
  const size_t open = at == std::string::npos ? at : log.find(" (", log.find("transport ", at));
  const bool ok = open != std::string::npos && log.compare(open + 2, std::strlen(expected), expected) == 0;
  if (!ok) std::fprintf(stderr, "rank %d: not on transport %s: %s\n", rank, expected, log.c_str());
  return ok;
}

// With $EXPECT_LOG (and $EXPECT_TRANSPORT, which turns the log on), whether
// the init log holds each of its ';'-separated texts.
bool log_has_expected(int rank) {
  const char* expected = std::getenv("EXPECT_LOG");
  if (!expected || !std::getenv("EXPECT_TRANSPORT")) return true;
  const std::string log = my_log(), all = expected;
  for (size_t begin = 0; begin <= all.size();) {
    const size_t end = std::min(all.find(';', begin), all.size());
    const std::string says = all.substr(begin, end - begin);
    begin = end + 1;
    if (log.find(says) != std::string::npos) continue;
    std::fprintf(stderr, "rank %d: the log does not say '%s': %s\n", rank, says.c_str(), log.c_str());
    return false;
  }
  return true;
}

// Whether the log has `what` followed by $EXPECT_TRANSPORT (with
// `net_only`, by its net: the part after "shm+", as GIN names it; sockets
// are its "TCP streams").
bool log_says(int rank, const char* what, bool net_only) {
  const char* expected = std::getenv("EXPECT_TRANSPORT");
  if (!expected) return true;
  std::string path = expected;
  if (net_only && path.rfind("shm+", 0) == 0) path = path.substr(4);
  if (net_only && path == "socket") path = "TCP streams";  // GIN's own sockets, as it names them
  const std::string log = my_log(), want = std::string(what) + path;
  if (log.find(want) != std::string::npos) return true;
  std::fprintf(stderr, "rank %d: the log does not say '%s': %s\n", rank, want.c_str(), log.c_str());
  return false;
}

int one_rank(const std::string& suite, int rank, int n) {
  log_init_to_file();
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;  // NCCL_COMM_ID names the root
  ncclComm_t comm = nullptr;
  auto t0 = Clock::now();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (const char* tc = std::getenv("TRAFFIC_CLASS")) config.trafficClass = std::atoi(tc);
  ncclResult_t init = ncclCommInitRankConfig(&comm, n, id, rank, &config);
  if (suite == "init-fails") {
    const char* why = ncclGetLastError(nullptr);
    std::fprintf(stderr, "rank %d: init: %s in %.1f s: %s\n", rank, ncclGetErrorString(init), seconds_since(t0), why);
    return init == ncclSystemError && says(why) ? 0 : 1;
  }
  if (suite == "call-fails") {
    const double within = std::atof(std::getenv("EXPECT_WITHIN") ? std::getenv("EXPECT_WITHIN") : "60");
    ncclResult_t r = init;
    std::string why = ncclGetLastError(nullptr);
    if (r == ncclSuccess) {
      std::vector<float> in(1 << 16, 1.f), out(in.size());
      if (rank == 0 && std::getenv("FAILOVER_DOWN")) {
        const std::vector<std::string> devices = net_devices(rank);
        if (devices.empty()) return 1;
        const std::string cmd = port_command("FAILOVER_DOWN", devices);
        std::fprintf(stderr, "rank 0: before the call: %s\n", cmd.c_str());
        if (std::system(cmd.c_str()) != 0) return 1;
      }
      t0 = Clock::now();
      r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
      why = ncclGetLastError(comm);
    }
    std::fprintf(stderr, "rank %d: %s %s in %.1f s: %s\n", rank, init == ncclSuccess ? "first call" : "init",
                 ncclGetErrorString(r), seconds_since(t0), why.c_str());
    if (comm) ncclCommAbort(comm);
    return (r == ncclRemoteError || r == ncclSystemError) && seconds_since(t0) <= within && says(why.c_str()) ? 0 : 1;
  }
  if (init != ncclSuccess) {
    std::fprintf(stderr, "rank %d: init failed: %s: %s\n", rank, ncclGetErrorString(init), ncclGetLastError(nullptr));
    return 1;
  }
  std::fprintf(stderr, "rank %d: init in %.1f s\n", rank, seconds_since(t0));
  if (!took_expected_transport(rank) || !log_has_expected(rank)) return 1;
  if (suite == "gin-kill") {
#ifdef CROSS_HOST_GIN
    return gin_kill_suite(rank, n, comm);
#else
    std::fprintf(stderr, "rank %d: built without NVIDIA's nccl_device headers: no GIN client\n", rank);
    return 1;
#endif
  }
  int rc = suite == "kill"       ? kill_suite(rank, n, comm)
           : suite == "failover" ? failover_suite(rank, n, comm)
           : suite == "stream"   ? stream_suite(rank, n, comm)
           : suite == "rails"    ? rails_suite(rank, n, comm)
                                 : sweep(rank, n, comm, suite == "full");
  if (suite != "kill" && ncclCommDestroy(comm) != ncclSuccess) rc = 1;
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: %s short|full|kill|gin-kill|failover|stream|init-fails|call-fails FIRST_RANK LOCAL_RANKS "
                 "NRANKS\n",
                 argv[0]);
    return 2;
  }
  const std::string suite = argv[1];
  const int first = std::atoi(argv[2]), local = std::atoi(argv[3]), n = std::atoi(argv[4]);
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int i = 0; i < local; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(1800);  // a hang fails instead of holding the guest
      _exit(one_rank(suite, first + i, n));
    }
    pids.push_back(pid);
  }
  int bad = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    const int rank = first + int(i);
    const bool killed_on_purpose = (suite == "kill" || suite == "gin-kill") && rank == n - 1 && WIFSIGNALED(status);
    if (!killed_on_purpose && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::fprintf(stderr, "rank %d: %s %d\n", rank, WIFSIGNALED(status) ? "killed by signal" : "exit status",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      ++bad;
    }
  }
  return bad ? 1 : 0;
}

// Faults with real processes and threads:
//  - a peer SIGKILLed in the middle of collectives (shared memory, TCP, TCP
//    with TLS), or of send/recv between hosts in TCP slices:
//    every survivor's call fails with ncclRemoteError/ncclSystemError within
//    BRAID_TIMEOUT, GetAsyncError reports it, ncclCommAbort returns promptly,
//    and no call that returned success delivered wrong data;
//  - ncclCommAbort from a watchdog thread releases a rank blocked in a
//    collective whose peer never comes;
//  - a bootstrap root that never appears (or died) fails init cleanly;
//  - hellos with the right magic but an impossible rank are dropped.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <chrono>

#include "collective_check.h"
#include "scoped_env.h"
#include "survivor.h"
#include "tls_key.h"

using namespace mp;

namespace {

// n ranks as processes; the last one is SIGKILLed by the parent after a
// while.  Reaps children as they exit so a dead peer is seen as dead.
// `count` floats per call: 4 MiB runs schedules on the transport (above the
// one-sided two-shot's sizes, host_tuning.h), 64 B runs one-shot (eager
// for Broadcast, where the root runs ahead until the dead rank's slots fill).
// setup(rank) runs in each rank before its init.
void kill_one_mid_collective(int n, const char* transport, size_t count = 1 << 20, Call call = Call::AllReduce,
                             const std::function<void(int)>& setup = {}) {
  setenv("BRAID_TIMEOUT", "3", 1);
  setenv("BRAID_TRANSPORT", transport, 1);
  std::vector<pid_t> pids = fork_ranks(n, 90, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    if (setup) setup(r);
    return survivor(r, n, ids[0], 3, count, call);
  });
  REQUIRE(int(pids.size()) == n);
  unsetenv("BRAID_TIMEOUT");
  unsetenv("BRAID_TRANSPORT");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // init done, collectives running
  REQUIRE(kill(pids.back(), SIGKILL) == 0);
  for (int i = 0; i < n; ++i) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    int r = int(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    INFO("rank " << r << " (" << transport << ")");
    if (r == n - 1) {
      CHECK(WIFSIGNALED(status));
      continue;
    }
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == kOk);
  }
}

// n ranks as processes, `rounds` times: the last rank reaches one call
// late, so its peers sleep waiting for it, and exits the moment its call
// returns, without ncclCommDestroy (a job that ends at once).  What it
// posted stays readable, so every peer's call must still succeed exactly:
// its going away is not an error once it has done its part.  (A peer that
// woke to its post and looked for it again only after first seeing it
// dead reported it as "exited during a one-shot collective".)
int last_rank_leaves_at_once(int n, int rounds, size_t count, Call call) {
  int bad = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<pid_t> pids = fork_ranks(n, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, n, ids[0], r) != ncclSuccess) return int(kInit);
      std::vector<float> in(count, float(r + 1)), out(count);
      // Rank n-1 is the Broadcast's root: the one the others wait for.
      auto run = [&] {
        return call == Call::AllReduce
                   ? ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr)
                   : ncclBroadcast(in.data(), out.data(), count, ncclFloat, n - 1, comm, nullptr);
      };
      if (run() != ncclSuccess) return int(kBadCode);  // every connection made
      if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (run() != ncclSuccess) return int(kBadCode);
      const float expected = call == Call::AllReduce ? float(n * (n + 1) / 2) : float(n);
      for (float x : out)
        if (x != expected) return int(kSucceededWrong);
      return int(kOk);  // and exit, the communicator left as it is
    });
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (exit_code(status) != kOk) {
        std::fprintf(stderr, "round %d: rank process %d ended with %d\n", round, int(pid), exit_code(status));
        ++bad;
      }
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("a rank that exits the moment its one-shot AllReduce returns does not fail its peers", "[mp][faults]") {
  CHECK(last_rank_leaves_at_once(4, 12, 16, Call::AllReduce) == 0);
}

TEST_CASE("a root that exits the moment its eager Broadcast returns does not fail its peers", "[mp][faults]") {
  CHECK(last_rank_leaves_at_once(4, 12, 16, Call::Broadcast) == 0);
}

TEST_CASE("a rank that exits the moment its AllReduce on the shm slots returns does not fail its peers",
          "[mp][faults]") {
  CHECK(last_rank_leaves_at_once(4, 12, 1 << 21, Call::AllReduce) == 0);  // 8 MiB: ring
}

TEST_CASE("a rank that exits the moment its two-shot AllReduce returns does not fail its peers", "[mp][faults]") {
  CHECK(last_rank_leaves_at_once(4, 12, 1 << 18, Call::AllReduce) == 0);  // 1 MiB: one-sided, CMA
}

TEST_CASE("a peer killed mid-collective: survivors fail within BRAID_TIMEOUT, abort is prompt (shm)", "[mp][faults]") {
  kill_one_mid_collective(3, "shm");
}

TEST_CASE("a peer killed mid-collective: survivors fail within BRAID_TIMEOUT, abort is prompt (TCP)", "[mp][faults]") {
  kill_one_mid_collective(3, "socket");
}

TEST_CASE("a peer killed mid-collective: survivors fail within BRAID_TIMEOUT, abort is prompt (TCP with TLS)",
          "[mp][faults][tls]") {
  ScopedTlsKey key("braid-test-only-faults-psk-0123456789abcdef");  // the ranks inherit it
  REQUIRE(key.ok);
  kill_one_mid_collective(3, "socket");
}

TEST_CASE("a peer killed amid send/recv between hosts in TCP slices: survivors fail within BRAID_TIMEOUT",
          "[mp][faults][socket][p2p]") {
  // Rank 2 on a host of its own; 4 MiB messages in 4 slices to and from it.
  kill_one_mid_collective(3, "socket", 1 << 20, Call::SendRecv, [](int rank) {
    setenv("BRAID_HOSTID", rank < 2 ? "faults-host-a" : "faults-host-b", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "4", 1);
  });
}

TEST_CASE("a peer killed mid-collective: survivors fail within BRAID_TIMEOUT, abort is prompt (net plugin)",
          "[mp][faults][plugin]") {
  setenv("NCCL_NET_PLUGIN", BRAID_NET_PLUGIN_LIB, 1);  // braid's own: TCP here
  kill_one_mid_collective(3, "plugin");
  unsetenv("NCCL_NET_PLUGIN");
}

// Its parent reaps the killed rank only after the survivors have ended: a
// zombie all along, which kill(pid, 0) finds; its pidfd says it exited.
TEST_CASE("a peer killed and left unreaped (a zombie): survivors fail at once, not at BRAID_TIMEOUT", "[mp][faults]") {
  setenv("BRAID_TIMEOUT", "60", 1);
  setenv("BRAID_TRANSPORT", "shm", 1);
  const int n = 3;
  std::vector<pid_t> pids = fork_ranks(n, 90, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    return survivor(r, n, ids[0], 3, 1 << 20, Call::AllReduce);  // failing within 3 + 5 s
  });
  unsetenv("BRAID_TIMEOUT");
  unsetenv("BRAID_TRANSPORT");
  REQUIRE(int(pids.size()) == n);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  REQUIRE(kill(pids.back(), SIGKILL) == 0);
  CHECK(reap_with_one_killed(pids, n - 1) == 0);  // in rank order: the killed one last
}

TEST_CASE("a peer killed amid one-shot AllReduces: survivors fail within BRAID_TIMEOUT", "[mp][faults]") {
  kill_one_mid_collective(3, "shm", 16);
}

TEST_CASE("a peer killed amid eager Broadcasts: survivors fail within BRAID_TIMEOUT", "[mp][faults]") {
  kill_one_mid_collective(3, "shm", 16, Call::Broadcast);
}

TEST_CASE("a peer killed amid pulled Broadcasts (process_vm_readv): survivors fail within BRAID_TIMEOUT",
          "[mp][faults]") {
  setenv("BRAID_CMA", "on", 1);
  kill_one_mid_collective(3, "shm", 1 << 18, Call::Broadcast);
  unsetenv("BRAID_CMA");
}

namespace {

// Rank 1 of 2 never calls; rank 0's `call` of `count` floats (a Broadcast
// from rank 1) is released only by ncclCommAbort from a watchdog thread.
void abort_releases_blocked_call(size_t count, Call call = Call::AllReduce) {
  setenv("BRAID_TIMEOUT", "60", 1);  // only the abort can release it in time
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comms[2] = {nullptr, nullptr};
  // Catch2's assertions are not thread-safe: the peer thread only records its result.
  ncclResult_t peer_init = ncclInternalError;
  std::thread peer([&] { peer_init = ncclCommInitRank(&comms[1], 2, id, 1); });
  ncclResult_t init = ncclCommInitRank(&comms[0], 2, id, 0);
  peer.join();
  REQUIRE(init == ncclSuccess);
  REQUIRE(peer_init == ncclSuccess);
  ncclComm_t comm = comms[0];
  std::atomic<bool> stop_polling{false};
  std::atomic<int> abort_result{-1};
  std::atomic<double> abort_took{0};
  // PyTorch's watchdog: poll GetAsyncError, then abort.
  std::thread watchdog([&] {
    for (int i = 0; i < 30; ++i) {
      ncclResult_t e;
      ncclCommGetAsyncError(comm, &e);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto t = Clock::now();
    abort_result = ncclCommAbort(comm);
    abort_took = seconds_since(t);
  });
  auto start = Clock::now();
  std::vector<float> in(count, 1.f), out(count, -1.f);
  // Rank 1 never calls: rank 0 is stuck here until the abort.
  ncclResult_t r = call == Call::AllReduce
                       ? ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr)
                       : ncclBroadcast(in.data(), out.data(), in.size(), ncclFloat, 1, comm, nullptr);
  double took = seconds_since(start);
  watchdog.join();
  stop_polling = true;
  CHECK(r != ncclSuccess);
  CHECK(took < 10);
  CHECK(abort_result == ncclSuccess);
  CHECK(abort_took < 5);
  CHECK(ncclCommDestroy(comms[1]) == ncclSuccess);
  unsetenv("BRAID_TIMEOUT");
}

}  // namespace

// One-sided schedules (algorithms/one_sided.cc): the survivors wait on
// signals and copy straight from and to the dead rank's memory with CMA.
TEST_CASE("a peer killed amid one-sided AllReduces: survivors fail within BRAID_TIMEOUT", "[mp][faults]") {
  for (const char* algo : {"allreduce=twoshot", "allreduce=oneshot"}) {
    INFO(algo);
    setenv("BRAID_ALGO", algo, 1);
    kill_one_mid_collective(3, "shm", 1 << 16);
  }
  unsetenv("BRAID_ALGO");
}

TEST_CASE("ncclCommAbort from a watchdog thread releases a rank blocked in a collective", "[mp][faults][threads]") {
  abort_releases_blocked_call(1 << 16);
}

TEST_CASE("ncclCommAbort from a watchdog thread releases a rank blocked in a one-shot AllReduce",
          "[mp][faults][threads]") {
  abort_releases_blocked_call(16);
}

TEST_CASE("ncclCommAbort from a watchdog thread releases a rank blocked in an eager Broadcast",
          "[mp][faults][threads]") {
  abort_releases_blocked_call(16, Call::Broadcast);
}

TEST_CASE("ncclCommAbort from another thread while several ranks are mid-collective", "[mp][faults][threads]") {
  // Both ranks run large allreduces in a loop; an outside thread aborts both.
  // Each call returns success with exact data or an error; never wrong data.
  ncclComm_t comms[2];
  REQUIRE(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess);
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      std::vector<int32_t> in(1 << 18, r + 1), out(1 << 18);
      for (int it = 0; it < 100000; ++it) {
        ncclResult_t res = ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comms[r], nullptr);
        if (res != ncclSuccess) {
          ++errors;
          return;
        }
        if (std::count(out.begin(), out.end(), 3) != ptrdiff_t(out.size())) ++wrong;
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t = Clock::now();
  CHECK(ncclCommAbort(comms[0]) == ncclSuccess);
  CHECK(ncclCommAbort(comms[1]) == ncclSuccess);
  CHECK(seconds_since(t) < 5);
  for (auto& th : ranks) th.join();
  CHECK(wrong == 0);
  CHECK(errors == 2);
}

namespace {

// An NCCL_COMM_ID naming a port nobody listens on (only rank 0 would host a
// root there).
std::string comm_id_nobody_hosts() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);  // the port is free again and nobody listens on it
  return fmt::format("127.0.0.1:{}", ntohs(addr.sin_port));
}

}  // namespace

TEST_CASE("a bootstrap root that never appears fails init cleanly", "[mp][faults][bootstrap]") {
  setenv("NCCL_COMM_ID", comm_id_nobody_hosts().c_str(), 1);
  setenv("BRAID_TIMEOUT", "2", 1);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  auto start = Clock::now();
  ncclResult_t r = ncclCommInitRank(&comm, 2, id, 1);
  double took = seconds_since(start);
  unsetenv("NCCL_COMM_ID");
  unsetenv("BRAID_TIMEOUT");
  CHECK((r == ncclSystemError || r == ncclRemoteError));
  CHECK(comm == nullptr);
  CHECK(took < 8);
  std::string msg = ncclGetLastError(nullptr);
  INFO(msg);
  CHECK(msg.find("bootstrap root") != std::string::npos);
}

TEST_CASE("NCCL_SOCKET_RETRY_CNT bounds the retries toward a root that never appears, as NCCL",
          "[mp][faults][bootstrap]") {
  setenv("NCCL_COMM_ID", comm_id_nobody_hosts().c_str(), 1);
  setenv("NCCL_SOCKET_RETRY_CNT", "2", 1);
  setenv("NCCL_SOCKET_RETRY_SLEEP_MSEC", "50", 1);
  setenv("BRAID_TIMEOUT", "60", 1);  // far beyond: the count must end it
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  const auto start = Clock::now();
  const ncclResult_t r = ncclCommInitRank(&comm, 2, id, 1);
  const double took = seconds_since(start);
  for (const char* name : {"NCCL_COMM_ID", "NCCL_SOCKET_RETRY_CNT", "NCCL_SOCKET_RETRY_SLEEP_MSEC", "BRAID_TIMEOUT"})
    unsetenv(name);
  CHECK(r == ncclRemoteError);
  CHECK(comm == nullptr);
  CHECK(took >= 0.15);  // slept 50 and 100 ms, then failed at the third refusal
  CHECK(took < 30);
  const std::string msg = ncclGetLastError(nullptr);
  INFO(msg);
  CHECK(msg.find("still after 2 retries (NCCL_SOCKET_RETRY_CNT=2, NCCL_SOCKET_RETRY_SLEEP_MSEC=50)") !=
        std::string::npos);
}

TEST_CASE("a unique id whose root process died fails init cleanly", "[mp][faults][bootstrap]") {
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    ncclUniqueId id;
    int ok = ncclGetUniqueId(&id) == ncclSuccess;
    if (ok) (void)!write(pipefd[1], &id, sizeof(id));
    _exit(ok ? 0 : 1);  // the root listener dies with this process
  }
  ncclUniqueId id;
  REQUIRE(read(pipefd[0], &id, sizeof(id)) == ssize_t(sizeof(id)));
  int status = 0;
  waitpid(pid, &status, 0);
  close(pipefd[0]);
  close(pipefd[1]);
  setenv("BRAID_TIMEOUT", "2", 1);
  ncclComm_t comm = nullptr;
  auto start = Clock::now();
  ncclResult_t r = ncclCommInitRank(&comm, 2, id, 0);
  unsetenv("BRAID_TIMEOUT");
  CHECK((r == ncclSystemError || r == ncclRemoteError));
  CHECK(seconds_since(start) < 8);
}

TEST_CASE("hellos with the right magic but impossible ranks are dropped, the job goes on", "[mp][faults][bootstrap]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  const AnyAddress root = root_address(id);
  uint64_t magic;
  std::memcpy(&magic, id.internal + 8, sizeof(magic));
  struct Hello {
    uint64_t magic;
    int32_t rank, nranks;
    AnyAddress listener;
  };
  const Hello bad[] = {{magic, 7, 2, {}}, {magic, -1, 2, {}}, {magic, 0, 0, {}}, {magic, 0, 1 << 30, {}}};
  std::vector<int> fds;
  for (const Hello& h : bad) {
    int fd = ::socket(root.sa.sa_family, SOCK_STREAM, 0);
    REQUIRE(::connect(fd, &root.sa, root.length()) == 0);
    REQUIRE(::write(fd, &h, sizeof(h)) == ssize_t(sizeof(h)));
    fds.push_back(fd);
  }
  std::vector<std::thread> threads;
  std::vector<int> ok(2, 0);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, 2, id, r) != ncclSuccess) return;
      int32_t x = r + 1, y = 0;
      ok[r] = ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, comm, nullptr) == ncclSuccess && y == 3;
      ncclCommDestroy(comm);
    });
  for (auto& t : threads) t.join();
  for (int fd : fds) ::close(fd);
  CHECK(ok[0] == 1);
  CHECK(ok[1] == 1);
}

// A rank out of file descriptors cannot open its connection to its peer
// (AllReduce), nor accept its peer's (Broadcast from rank 0).  The second
// stayed queued, so the listener polled readable forever: the call hung
// until BRAID_TIMEOUT (spinning a core) and blamed a dead peer.  Its peer,
// whose connection it never accepted, fails once it is gone.
TEST_CASE("a rank out of file descriptors fails its call at once, saying so, over TCP", "[mp][faults]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers' runtime probes memory through a pipe: with no descriptor
  // left it cannot, and UBSan then reports every virtual call as on a bad object.
  SUCCEED("skipped under sanitizers: their runtime needs file descriptors");
  return;
#endif
  ScopedEnv timeout("BRAID_TIMEOUT", "30");
  for (bool broadcast : {false, true}) {
    INFO((broadcast ? "Broadcast" : "AllReduce"));
    const auto start = std::chrono::steady_clock::now();
    CHECK(run_ranks_as_processes(
              2,
              [broadcast](int rank, int, ncclComm_t comm, Failures& f) {
                // Rank 0 starts once rank 1 is out of descriptors (a directory
                // says so: making one takes none), or rank 1's progress thread
                // would accept rank 0's connection before.
                const std::string full = fmt::format("/tmp/braid-test-fds-full-{}", getppid());
                if (rank == 1) {  // a limit just above the highest open descriptor, then filled
                  int highest = 0;
                  for (int fd = 0; fd < 65536; ++fd)
                    if (fcntl(fd, F_GETFD) != -1) highest = fd;
                  const rlimit limit{rlim_t(highest + 1), rlim_t(highest + 1)};
                  setrlimit(RLIMIT_NOFILE, &limit);
                  while (open("/dev/null", O_RDONLY) >= 0) {
                  }
                  mkdir(full.c_str(), 0700);
                } else {
                  for (int i = 0; i < 10000 && access(full.c_str(), F_OK) != 0; ++i) usleep(1000);
                  rmdir(full.c_str());
                }
                std::vector<float> data(1 << 16, 1.0f);
                const ncclResult_t r =
                    broadcast ? ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat, 0, comm, nullptr)
                              : ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, comm, nullptr);
                const std::string why = ncclGetLastError(comm);
                if (rank == 1 && (r == ncclSuccess || why.find("Too many open files") == std::string::npos))
                  f.fail(fmt::format("rank 1: {}", why));
                if (rank == 0 && !broadcast && r == ncclSuccess) f.fail("rank 0: the AllReduce succeeded");
                ncclCommAbort(comm);
                std::_Exit(f.count ? 1 : 0);
              },
              60, [](int rank) { setenv("BRAID_HOSTID", rank ? "host-b" : "host-a", 1); }) == 0);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  }
}

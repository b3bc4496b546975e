// What the device API's GIN tests share: the setups every GIN body runs
// on, and waiting for the asynchronous error a faulted proxy reports.
#pragma once

#include <fmt/format.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>

#include "harness.h"
#include "process_log.h"
#include "scoped_env.h"

namespace mp {

// Runs `body` as 3-4 thread ranks, 2-3 process ranks, thread ranks whose
// GIN queues hold 2 descriptors (posting waits for the proxy's credit),
// 4 processes on two emulated hosts (GIN between them over TCP), and, where
// this process may make them, 3 processes in pid namespaces of their own
// (all pid 2, as in containers).  The number of setups that failed.
inline int run_gin_setups(const RankBody& body, const std::string& host_prefix) {
  int failed = run_ranks_as_threads(4, body) != 0;
  failed += run_ranks_as_processes(3, body) != 0;
  {
    ScopedEnv depth("NCCL_GIN_PROXY_QUEUE_SIZE", "2");
    failed += run_ranks_as_threads(4, body) != 0;
  }
  failed += run_ranks_as_processes(4, body, 60, [&](int rank) {
              setenv("BRAID_HOSTID", (host_prefix + std::to_string(rank / 2)).c_str(), 1);
            }) != 0;
  if (can_make_pid_namespaces()) failed += run_ranks_as_processes(3, body, 60, {}, {}, true) != 0;
  return failed;
}

// Ranks on two emulated hosts (rank / 2) whose network between them is
// braid's own net plugin (TCP inside, as an external plugin is loaded), so
// that GIN between hosts goes over the net transport's pipes
// (src/runtime/gin_pipes.h).  Fragments of 4 KiB and two of them in flight
// per connection: a put of a few KiB spans several, and a sender waits for
// the receiver's credit.  Each process logs INIT to a file of its own,
// which gin_said_over reads.
inline std::function<void(int)> gin_over_net(const std::string& host_prefix) {
  return [=](int rank) {
    setenv("BRAID_HOSTID", (host_prefix + std::to_string(rank / 2)).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank / 2 + 1).c_str(), 1);
    setenv("BRAID_TRANSPORT", "plugin", 1);
    setenv("NCCL_NET_PLUGIN", BRAID_NET_PLUGIN_LIB, 1);
    setenv("BRAID_NET_SLOT_BYTES", "4096", 1);
    setenv("BRAID_NET_SLOTS", "2", 1);
    log_to_own_file("INIT");
  };
}
// Whether this process's log says its GIN reached the other host's ranks
// over `path`: the net plugin ("BraidSocket"), or GIN's "TCP streams".
inline void gin_said_over(Failures& f, const std::string& path = "BraidSocket") {
  const std::string log = own_log();
  if (log.find("ranks of other hosts over " + path) == std::string::npos)
    f.fail("GIN between hosts is not said to go over " + path + ": " + log);
}

// Polls ncclCommGetAsyncError until it reports an error, for at most
// `seconds`: that error, or ncclSuccess if none came.
inline ncclResult_t await_async_error(ncclComm_t comm, Failures& f, int seconds = 20) {
  ncclResult_t async = ncclSuccess;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (async == ncclSuccess && std::chrono::steady_clock::now() < until) {
    MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
    sched_yield();
  }
  return async;
}

}  // namespace mp

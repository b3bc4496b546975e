// What the device API's GIN tests share: the setups every GIN body runs
// on, and waiting for the asynchronous error a faulted proxy reports.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "harness.h"
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

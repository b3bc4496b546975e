// What the shared-memory board tests (arrival and duration boards) open:
// a board of this process's name space, every rank this process.
#pragma once

#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "src/base/host_identity.h"
#include "src/transport/peer_processes.h"
#include "src/transport/shm_board.h"

namespace board_test {

// A name no other test process uses: /braid-test-<kind>-<pid>-<what>.
inline std::string board_name(const char* kind, const char* what) {
  return "/braid-test-" + std::string(kind) + "-" + std::to_string(::getpid()) + "-" + what;
}

// The processes of ranks that are the given processes of this host and pid
// namespace, as a communicator's init finds them.
inline std::shared_ptr<const braid::PeerProcesses> processes_of(const std::vector<int32_t>& pids, int rank) {
  braid::TransportContext ctx;
  ctx.rank = rank;
  ctx.nranks = int(pids.size());
  for (int32_t pid : pids) {
    braid::PeerInfo p;
    p.pid = pid;
    p.pid_ns = braid::pid_namespace();
    ctx.peers.push_back(p);
  }
  return braid::PeerProcesses::local(ctx);
}

// `pids` (default: every rank this process).
inline braid::BoardSetup setup_for(const std::string& name, int rank, int n, std::chrono::milliseconds timeout,
                                   std::vector<int32_t> pids = {}) {
  braid::BoardSetup s;
  s.name = name;
  s.what = "the test's board";
  s.rank = rank;
  s.nranks = n;
  if (pids.empty()) pids.assign(size_t(n), int32_t(::getpid()));
  s.processes = processes_of(pids, rank);
  s.timeout = timeout;
  return s;
}

}  // namespace board_test

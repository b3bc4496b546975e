// RAS: NCCL's reliability, availability and serviceability queries, on
// braid (NCCL 2.24's subsystem; its report formats are 2.30's).
//
// Every process with a communicator runs one RAS service (NCCL_RAS_ENABLE=1,
// the default): a thread listening on two sockets.
//  - The client socket, NCCL_RAS_ADDR (localhost:28028), shared by every
//    process of the host (SO_REUSEPORT: the kernel gives each connection to
//    one of them, and any can answer).  `ncclras` (tools/ncclras), or `nc`,
//    speaks NCCL's line protocol there (ras_client.cc): STATUS, VERBOSE
//    STATUS, SET FORMAT json, TIMEOUT, MONITOR, DIAGNOSTICS, CONTROL.
//  - The peer socket, an ephemeral port on the bootstrap's interface, which
//    every rank publishes at init: the processes a process shares a
//    communicator with are its peers.
// A status query gathers every process's report (ras_collect.cc): the
// answering process asks its peers, learns theirs from their answers, and
// asks those too, until every process of the job reachable that way
// answered, refused (it is gone: dead) or did not answer in time
// (unresponsive).  There is no standing mesh and no keep-alive traffic:
// nothing runs until someone asks, and a monitor (MONITOR) probes its peers
// each second while it is connected.
//
// Differences from NCCL (docs/compatibility.md): a process is dead as soon
// as its peer port refuses connections (its process exited), not after 60 s
// of missed keep-alives; the answering process asks every peer itself
// (NCCL floods its overlay ring); CONTROL PROFILER_MASK answers OK once it
// is set everywhere (NCCL answers at once).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/schedule.h"
#include "src/base/sock_addr.h"

struct ncclComm;

namespace braid {

namespace ras {
// The collectives NCCL's RAS counts, in its order (ncclFunc_t).  (No JSON
// here: every file of the runtime includes this one through comm.h.)
inline constexpr int kCounted = 5;
inline constexpr const char* kCountedNames[kCounted] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                                        "AllReduce"};
}  // namespace ras

// What RAS reads of a communicator from its own thread; its owner writes.
struct RasCommState {
  std::array<std::atomic<uint64_t>, ras::kCounted> launched{};  // per counted collective
  std::atomic<bool> finalize_called{false};
  std::atomic<bool> destroy_called{false};
  // A launch of `c` (-1: taken back).  The owner's thread only: a store, no atomic add.
  void count_launch(Collective c, int64_t n = 1) {
    const int k = counted_index(c);
    if (k >= 0) launched[size_t(k)].store(launched[size_t(k)].load(std::memory_order_relaxed) + uint64_t(n),
                                          std::memory_order_relaxed);
  }
  // NCCL's ncclFunc_t order; -1: a collective RAS does not count (AlltoAll, Gather, Scatter).
  static int counted_index(Collective c);
};

// One rank of a communicator, as its init published it.
struct RasRank {
  SockAddr addr;  // its process's RAS peer socket (port 0: RAS off there)
  int64_t pid = -1;
  int cuda_dev = -1;
};

// This process's RAS peer address, starting the service on the first call,
// listening at `ip` (the first communicator's bootstrap address); false (and
// a zero address) where RAS is off or could not start.
bool ras_peer_address(const SockAddr& ip, SockAddr* out);
// A communicator whose init exchanged its ranks' RasRank, and no longer.
// rank0_host and rank0_pid name it with its hash (ras::CommId); `model` is
// the GPU this rank runs on ("" on the host backend).
void ras_comm_added(ncclComm* comm, const std::vector<RasRank>& ranks, uint64_t rank0_host, uint64_t rank0_pid,
                    const std::string& model);
void ras_comm_removed(const ncclComm* comm);

}  // namespace braid

// How a host rank reaches a peer's buffers in a one-sided schedule
// (schedule.h: Put, Get, GetReduce after the peer's Signal).
//
// A Signal carries where the sender's buffers of the call are (PeerBuffers)
// and, for each of them that lies in shareable memory (ncclMemAlloc on the
// host backend, and the backend's own scratch: src/transport/host_memory.h),
// the allocation that holds it.  The Wait that takes the signal decides, per
// buffer, how this rank will touch it:
//  - a peer of this process: by load and store at its own address;
//  - shareable memory of another process: mapped here (once per allocation,
//    kept in the rank's PeerMemoryCache) and then by load and store;
//  - anything else of another process (a malloc'd user buffer): by CMA,
//    process_vm_readv/writev at the peer's address, a system call per copy.
#pragma once

#include <atomic>
#include <cstdint>

#include "braid/schedule.h"
#include "src/base/status.h"
#include "src/ops/op_step.h"
#include "src/transport/host_memory.h"
#include "src/transport/peer_memory_cache.h"

namespace braid {

using PeerMemory = PeerMemoryCache<PeerMapping>;

// A host Signal's message.  shared[] is indexed by BufferKind.
struct HostSignal {
  PeerBuffers buffers;
  SharedHandle shared[3];
};

// What this rank's Signals carry for a call on `b` (`bytes` of each buffer,
// by BufferKind; 0 where it has none).
HostSignal host_signal_of(const StepBuffers& b, const uint64_t bytes[3], uint64_t pid, uint64_t process);

// A peer's buffers of this call, as this rank reaches them.
struct PeerReach {
  PeerBuffers peer;     // its addresses (pid 0: no signal taken yet)
  StepBuffers at;       // where each buffer is: mapped here, or the peer's address where not
  bool direct[3] = {};  // by BufferKind: load and store at `at` (else CMA at the peer's address)
  bool known() const { return peer.pid != 0; }
};

// Takes a peer's signal (`mine`: this rank's own, `buffers`: its call).
// Maps what it can through `cache`; a mapping that fails leaves that buffer
// to CMA.
PeerReach reach_peer(const HostSignal& signal, const PeerBuffers& mine, const StepBuffers& buffers, PeerMemory* cache);

// Allocations of other processes this process has mapped (tests).
std::atomic<uint64_t>& peer_memory_opens();

}  // namespace braid

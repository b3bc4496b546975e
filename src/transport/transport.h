// Transport: moves fragments between the ranks of one communicator.
//
// A connection is (sender rank, receiver rank, channel).  Each connection is a
// FIFO of fragments; a fragment is up to slot_bytes() of data and carries its
// own length (0 is allowed).  Both ends are non-blocking so one thread can
// drive many lanes cooperatively: try_acquire reports "not yet" instead of
// waiting, and the executor decides how to back off and when to give up.
//
// Zero-copy shape: the sender writes its data (or a reduction result) straight
// into the slot it acquired; the receiver reads straight from the slot and
// releases it.  Shared memory really does this; sockets stage through a buffer.
//
// Connections are set up lazily on first use; setup that needs the peer is
// also non-blocking (try_acquire says "not yet" until it is done).
// Ops on the hot path make no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/sock_addr.h"
#include "src/base/status.h"
#include "src/transport/transport_policy.h"

namespace braid {

class Doorbell;

// A shared-memory slot holds this many of the fragments BRAID_SHM_SLOT_BYTES
// sets, so that calls with large chunks can send wider ones
// (src/plan/host_tuning.h, call_tile_bytes).
constexpr uint64_t kShmSlotFragments = 2;
// The smallest fragment a transport takes: a smaller BRAID_SHM_SLOT_BYTES
// or BRAID_SOCKET_SLOT_BYTES is raised to it, so that a Signal (144 bytes,
// src/exec/host) and small frames fit (below it every call with either failed).
constexpr uint64_t kMinFragmentBytes = 256;

class SendPipe {
 public:
  virtual ~SendPipe() = default;
  // Reserves the next free slot for a fragment of at most `max_bytes`.  On
  // success *slot points at that much writable memory (min(max_bytes,
  // slot_bytes())), or is nullptr when no slot is free yet.  A bound below
  // the slot lets a transport back only what the fragment can touch
  // (shared memory: a ring of small messages holds a few pages, not the
  // ring); kWholeSlot for a writer that fills slots as far as they go.
  static constexpr size_t kWholeSlot = SIZE_MAX;
  virtual Status try_acquire(void** slot, size_t max_bytes) = 0;
  Status try_acquire(void** slot) { return try_acquire(slot, kWholeSlot); }
  // Publishes the acquired slot holding `bytes` (<= slot_bytes()).
  virtual Status commit(size_t bytes) = 0;
  // From the next fragment on, cycles through only the first `n` slots of
  // the connection (n clamped to [kMinSlots, slots()]), so a call that keeps
  // many connections busy at once keeps the memory its fragments pass
  // through small enough to stay in cache (slots_per_connection,
  // src/plan/host_tuning.h).  Safe at any moment, also between two
  // fragments of a call: the receiver goes where each fragment says the
  // next one is.  Transports without slot rings ignore it.
  virtual void use_slots(int n) { (void)n; }
};

class RecvPipe {
 public:
  virtual ~RecvPipe() = default;
  // Takes the next fragment.  On success *data/*bytes describe it, or *data is
  // nullptr when none has arrived yet.
  virtual Status try_acquire(const void** data, size_t* bytes) = 0;
  // Returns the fragment's slot to the sender.
  virtual Status release() = 0;
};

// What every rank learns about every other at init (bootstrap allgather).
struct PeerInfo {
  uint64_t host_hash = 0;     // same value <=> same host (BRAID_HOSTID overrides)
  uint64_t machine_hash = 0;  // same value <=> same machine, whatever BRAID_HOSTID says
  int32_t pid = 0;
  // The peer's data listeners, if any: "ip:port" or "[ipv6]:port", comma-separated, one per
  // interface it listens on (at most kMaxDataInterfaces: socket.cc spreads connections over them).
  char socket_addr[400] = {};
  uint64_t pid_ns = 0;        // pid_namespace(): the pid names the peer only where this is equal
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // The transport that carries `peer`'s pipes (the router's choice).
  virtual const char* peer_path(int peer) const {
    (void)peer;
    return name();
  }
  // Pipes are owned by the transport and live until it is destroyed.
  virtual Status send_pipe(int peer, int channel, SendPipe** out) = 0;
  virtual Status recv_pipe(int peer, int channel, RecvPipe** out) = 0;
  // Paths of their own that connections to `peer` on different channels
  // take (a net transport over several NICs), the same on every rank: a
  // large call between hosts runs in that many slices to fill them.
  virtual uint32_t wire_paths(int peer) const {
    (void)peer;
    return 1;
  }
  virtual size_t slot_bytes() const = 0;
  // Fragments a sender may post on one connection before the receiver takes any.
  virtual int slots() const = 0;
  // Makes every pending and future try_acquire fail (ncclCommAbort).
  virtual void abort() = 0;
  // Where this rank can sleep until a peer commits or releases a fragment on
  // any of its pipes (doorbell.h), or nullptr where some traffic would not
  // ring it or it is not set up yet: then the caller polls.
  virtual Doorbell* doorbell() { return nullptr; }
  // Bytes of memory its connections hold now (slot rings, staging), for
  // ncclCommMemStats.  (0: one that holds none of its own, as tests' fakes.)
  virtual uint64_t bytes_held() const { return 0; }
};

// The pid by which this process can ask whether `peer`'s process still
// exists (kill(pid, 0)), or 0 where it cannot.  A peer in another pid
// namespace (a container sharing /dev/shm and the host name, but not its
// pids) has a pid that names another process here, or none: asking about it
// would report a live rank dead.  Its pidfd answers instead (PeerProcesses).
inline int32_t watchable_pid(const PeerInfo& peer, const PeerInfo& me) {
  return peer.pid_ns == me.pid_ns && me.pid_ns != 0 ? peer.pid : 0;
}

// Whether ranks `a` and `b` are threads of one process: the same pid in the
// same pid namespace.  Equal pids alone are not: ranks in containers with
// pid namespaces of their own often have small, equal pids.
inline bool same_process(const PeerInfo& a, const PeerInfo& b) { return a.pid == b.pid && a.pid_ns == b.pid_ns; }

// How many of `peers` share the host of peers[rank] (itself included).
inline int ranks_on_host(const std::vector<PeerInfo>& peers, int rank) {
  int n = 0;
  for (const PeerInfo& p : peers) n += p.host_hash == peers[rank].host_hash;
  return n > 0 ? n : 1;
}
// Which of its host's ranks peers[rank] is, in rank order (0: the first).
inline int index_on_host(const std::vector<PeerInfo>& peers, int rank) {
  int k = 0;
  for (int r = 0; r < rank; ++r) k += peers[size_t(r)].host_hash == peers[size_t(rank)].host_hash;
  return k;
}
// How many share its cores: ranks that BRAID_HOSTID places on different
// hosts of one machine still compete for them (idle_polls_for).
inline int ranks_on_machine(const std::vector<PeerInfo>& peers, int rank) {
  int n = 0;
  for (const PeerInfo& p : peers) n += p.machine_hash == peers[rank].machine_hash;
  return n > 0 ? n : 1;
}

class PeerProcesses;

struct TransportContext {
  uint64_t comm_hash = 0;  // unique per communicator, same on every rank
  int rank = 0;
  int nranks = 0;
  std::vector<PeerInfo> peers;  // indexed by rank, includes self
  // This host's other processes, to ask whether a peer exited
  // (peer_processes.h; null: each user makes PeerProcesses::local's).
  std::shared_ptr<const PeerProcesses> processes;
  // Which transports the ranks agreed to use (the communicator's, for every
  // transport made later: one-sided RMA's, GIN's).
  TransportPolicy policy;
  // The config's trafficClass (NCCL 2.25): 0..255, -1 unset (net.h's NetCommConfig).
  int traffic_class = -1;
  // This rank's GPU's PCI bus id ("0000:1b:00.0"; "": none): the net device
  // nearest it carries its traffic (src/transport/net/nic_affinity.h).
  std::string gpu_pci_bus_id;
};

// Shared memory between processes (and threads) on one host.
Status make_shm_transport(const TransportContext& ctx, std::unique_ptr<Transport>* out);

// TCP sockets.  Listening starts in socket_listen (before the bootstrap
// allgather, so the address can be published in PeerInfo::socket_addr).
// SocketListener is implemented in socket.cc (derive from this base).
class SocketListener {
 public:
  virtual ~SocketListener() = default;
};
// Listens, on any port, at `ip` (the bootstrap's interface: Bootstrap::address), or
// where BRAID_/NCCL_SOCKET_IFNAME passes several interfaces at each (data_addresses, src/base/net.h);
// *address lists them for PeerInfo::socket_addr.
Status socket_listen(const SockAddr& ip, std::unique_ptr<SocketListener>* out, std::string* address);
Status make_socket_transport(const TransportContext& ctx, std::unique_ptr<SocketListener> listener,
                             std::unique_ptr<Transport>* out);

}  // namespace braid

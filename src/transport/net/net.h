// Net: braid's view of a network in the shape of NCCL's net plugin ABI
// (ncclNet_t: listen/connect/accept, memory registration, isend/irecv/test).
//
// Why that shape: it is the one interface every inter-node network for
// NCCL already speaks.  braid's own networks (InfiniBand verbs, TCP) are
// written to it, an external plugin (NCCL_NET_PLUGIN) is wrapped into it
// (plugin_net.cc), and the same objects are exported as a plugin library
// NCCL itself can load (plugins/).  One transport (net_transport.h) turns
// any Net into braid's pipes.
//
// Semantics are ncclNet's: a connection is one-way (a send comm at one end,
// a recv comm at the other); connect and accept never block (nullptr: call
// again); the n-th isend on a send comm lands in the n-th irecv on its recv
// comm; isend/irecv may give no request (nullptr: cannot start yet, call
// again); a request is freed when test reports it done.  Only single
// receives (n = 1) are used.  Errors carry a message: ncclSystemError for a
// network failure, ncclRemoteError where the peer is gone, ncclInternalError
// for misuse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "src/base/status.h"

namespace braid {

constexpr size_t kNetHandleBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE
struct NetHandle {
  unsigned char bytes[kNetHandleBytes];
};

// A communicator's settings for its connections (NCCL's ncclNetCommConfig_t).
struct NetCommConfig {
  // The config's trafficClass (NCCL 2.25), 0..255; -1: unset.  InfiniBand:
  // NCCL_IB_TC wins over it, and unset both are 0.  TCP has none.
  int traffic_class = -1;
};

// NCCL_PTR_* bits.
constexpr int kNetPtrHost = 0x1;
constexpr int kNetPtrCuda = 0x2;
constexpr int kNetPtrDmaBuf = 0x4;

struct NetProperties {
  std::string name;      // the device's
  std::string pci_path;
  uint64_t guid = 0;
  int ptr_support = kNetPtrHost;
  bool reg_is_global = false;  // a registration serves every comm of the device
  int speed_mbps = 0;
  int port = 0;
  float latency_us = 0;
  int max_comms = 65536;
  int max_recvs = 1;  // grouped receives
  size_t max_p2p_bytes = size_t(1) << 30;
  // The device's rail and network plane (NCCL 2.30: NCCL_IB_HCA's
  // name:port:rail:plane, a v12 plugin's railId/planeId); -1 where unknown.
  // Connections stay on one rail where every device has one (net_transport.h).
  int rail = -1;
  int plane = -1;
};

// ", rail R, plane P" for INFO lines: the parts a device has.
inline std::string rail_text(int rail, int plane) {
  return (rail >= 0 ? ", rail " + std::to_string(rail) : "") + (plane >= 0 ? ", plane " + std::to_string(plane) : "");
}

class Net {
 public:
  virtual ~Net() = default;
  virtual const char* name() const = 0;  // for logs: may say more than the net's own name
  // The name the network answers to, as NCCL_NET matches it: NCCL's
  // ncclNet_t name ("IB", "Socket", a plugin's).
  virtual const char* net_name() const { return name(); }
  virtual int devices() const = 0;
  virtual Status properties(int dev, NetProperties* out) = 0;

  // `config` is the communicator's, as NCCL gives a plugin its own with
  // each communicator.  braid's nets read it where they connect: the
  // receiving end follows the sender's, as NCCL's InfiniBand net does.
  virtual Status listen(int dev, const NetCommConfig& config, NetHandle* handle, void** listen_comm) = 0;
  // `handle` is the listener's, kept by the caller between calls: a net may
  // keep its connection's progress in it (NCCL's do).
  virtual Status connect(int dev, const NetCommConfig& config, NetHandle* handle, void** send_comm) = 0;
  virtual Status accept(void* listen_comm, void** recv_comm) = 0;
  virtual Status close_listen(void* listen_comm) = 0;
  virtual Status close_send(void* send_comm) = 0;
  virtual Status close_recv(void* recv_comm) = 0;

  // `comm` is a send or recv comm; type is kNetPtrHost or kNetPtrCuda.
  virtual Status reg_mr(void* comm, void* data, size_t bytes, int type, void** mhandle) = 0;
  virtual Status dereg_mr(void* comm, void* mhandle) = 0;

  virtual Status isend(void* send_comm, void* data, size_t bytes, int tag, void* mhandle, void** request) = 0;
  virtual Status irecv(void* recv_comm, void* data, size_t bytes, int tag, void* mhandle, void** request) = 0;
  // *bytes: what was sent or received.
  virtual Status test(void* request, bool* done, size_t* bytes) = 0;

  // Optional, braid's own nets only: a file descriptor that turns readable
  // when a completion arrives on a comm armed with arm_events, so a waiter
  // can sleep in poll() instead of polling test.  -1: poll test instead.
  virtual int event_fd() { return -1; }
  // Asks for one event at the next completion of `comm`.  Test the comm's
  // requests once more after arming, before sleeping.
  virtual Status arm_events(void* comm) {
    (void)comm;
    return Status::ok();
  }
  // Reads and acknowledges the events that made event_fd readable.
  virtual void consume_events() {}
};

}  // namespace braid

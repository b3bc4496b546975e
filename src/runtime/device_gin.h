// A device communicator's GIN context (GPU-initiated networking) on NCCL
// 2.28.9's proxy backend, served by braid's proxy (src/devapi/gin_proxy.h).
//
// The device side is the headers' inline code: it writes 64-byte
// descriptors into per-target queues, bumps producer indices, and polls
// consumer indices, counters and its signal array, all reached through
// one ncclGinProxyGpuCtx_t that the devComm's ginHandles[] names.  This
// object lays that memory out and runs the proxy thread that consumes the
// queues.  The signal array is a symmetric allocation
// (src/runtime/lsa_space.h), so a put's signal add lands in the target's
// array through the flat range, and a descriptor's window tokens resolve
// through the space's GIN tables: the source in this rank's allocation,
// the destination in the target's copy.  Ranks of other LSA teams (other
// hosts) are reached over TCP (src/devapi/gin_tcp.h): one stream from each
// rank to each such rank, whose receiver thread applies the frames to this
// rank's windows and signals in stream order.  A descriptor the proxy
// refuses, or a peer that fails, is a fault that ncclCommGetAsyncError
// reports: a TCP stream that ends without its close, and, watched by the
// idle proxy through a pidfd, an LSA peer's process that exits.  (The
// headers' own device-side waits cannot time out: a kernel spinning in one
// keeps spinning; the host learns of the fault and can abort.)
#pragma once

#include <memory>
#include <vector>

#include "src/base/status.h"
#include "src/devapi/gin_memory.h"
#include "src/devapi/gin_proxy.h"
#include "src/devapi/gin_tcp.h"
#include "src/runtime/lsa_space.h"

namespace braid {

class Bootstrap;

class DeviceGin {
 public:
  // Collective over the communicator (the signal array is placed as a
  // symmetric allocation).  `signal_memory`: a zeroed shareable allocation
  // of `signals` words, owned from here on.  `signals` and `counters` are
  // at least 1 and at most 2^16 (the descriptor's ids are 16 bits).
  // `peers`: every rank's PeerInfo (whose processes to watch).
  static Status create(LsaSpace& space, Bootstrap& bootstrap, const std::vector<PeerInfo>& peers,
                       void* signal_memory, uint32_t signals, uint32_t counters, uint32_t queue_size,
                       std::unique_ptr<DeviceGin>* out);
  ~DeviceGin();

  void* device_context() const { return context_; }  // an ncclGinProxyGpuCtx_t
  // The first error of the proxy (ok while there is none).
  Status fault() const { return fault_.failed() ? fault_.get() : Status::ok(); }

 private:
  explicit DeviceGin(DeviceApiMemory& memory) : memory_(memory) {}
  // Collective: a TCP link to every rank outside this LSA team, and the
  // receiver of theirs.
  Status connect_other_hosts(LsaSpace& space, Bootstrap& bootstrap, uint32_t signals,
                             std::vector<std::unique_ptr<devapi::GinLink>>* links);
  // pidfds of the LSA peers in other processes, and the check of them.
  void watch_lsa_peers(const LsaSpace& space, const std::vector<PeerInfo>& peers);
  Status check_lsa_peers() const;
  DeviceApiMemory& memory_;
  void* context_ = nullptr;
  void* queues_ = nullptr;  // GFDs, producer and consumer indices, counters: one block
  void* signals_ = nullptr;
  std::unique_ptr<LsaWindow> signals_window_;
  devapi::GinFault fault_;
  struct WatchedPeer {
    int rank, pid, pidfd;
  };
  std::vector<WatchedPeer> watched_;
  std::unique_ptr<devapi::GinTcpReceiver> receiver_;
  std::unique_ptr<devapi::GinProxy> proxy_;
};

}  // namespace braid

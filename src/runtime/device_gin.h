// A device communicator's GIN contexts (GPU-initiated networking) on NCCL's
// proxy backend, served by braid's proxy (src/devapi/gin_proxy.h): 2.28.9's
// contexts (64-byte descriptors, each a 48-byte ncclGinProxyGpuCtx_t of its
// own) or 2.30's array of them (128-byte descriptors, 72-byte contexts that add
// signal offsets and get bookkeeping, which only the device touches).
//
// The device side is the headers' inline code: it writes descriptors into
// per-target queues, bumps producer indices, and polls consumer indices,
// counters and its signal array (host memory the device maps:
// src/runtime/gin_signals.h), all reached through the
// ncclGinProxyGpuCtx_t that the devComm's ginHandles[] names (2.30: indexed
// by context).  This object lays that memory out and makes the proxy that
// consumes every context's queues, which the communicator's one GIN
// progress thread steps with its other devComms' (src/devapi/gin_progress.h).  Context c's signals are
// words [c * signals, (c + 1) * signals) of one signal array, which every
// LSA peer maps, so a put's signal add lands in the target's array; a
// descriptor's window tokens resolve through the space's GIN tables
// (src/runtime/lsa_space.h): the source in this rank's allocation, the
// destination in the target's copy in the flat range.  Bytes move through
// the memory's GinMemoryOps: plain copies on the host backend, the copy
// engines on a GPU.  Ranks of other LSA teams (other
// hosts) are reached over TCP (src/devapi/gin_tcp.h): one stream from each
// rank to each such rank, whose receiver thread applies the frames to this
// rank's windows and signals in stream order; where the communicator's
// network between hosts is InfiniBand verbs or an NCCL net plugin, over
// that instead (src/runtime/gin_pipes.h), with the same order, unless
// BRAID_GIN_NET=socket.  A descriptor the proxy
// refuses, or a peer that fails, is a fault that ncclCommGetAsyncError
// reports: a TCP stream that ends without its close, and an LSA peer's
// process that exits (the communicator's DeviceLiveness watches those; the
// idle proxy asks it).  A fault raises the liveness word, which 2.29's and
// 2.30's device-side waits read as their abortFlag (device_liveness.h).
#pragma once

#include <memory>
#include <vector>

#include "src/base/status.h"
#include "src/devapi/gin_memory.h"
#include "src/devapi/gin_progress.h"
#include "src/devapi/gin_proxy.h"
#include "src/devapi/gin_tcp.h"
#include "src/runtime/device_liveness.h"
#include "src/runtime/gin_pipes.h"
#include "src/runtime/gin_signals.h"
#include "src/runtime/lsa_space.h"

namespace braid {

class Bootstrap;
class Net;

// What the devComm asked for.  `signals` and `counters` (per context) are
// at least 1 and fit the format's ids (16 bits in format 1; 24 and 23 in
// format 2).
struct DeviceGinShape {
  devapi::GfdFormat format = devapi::GfdFormat::kV1;
  uint32_t contexts = 1;  // format 1: up to 4, each its own struct; format 2: an array
  uint32_t signals = 1;
  uint32_t counters = 1;
  uint32_t queue_size = 256;  // a power of two
  // The context struct the kernel's headers read, by NCCL's
  // NCCL_GIN_PROXY_GPU_CONTEXT_VERSION: 1, 48 bytes (2.28.9's, and format 2
  // for 2.30.3-2.30.4's headers); 2, 72 bytes (2.30.5-2.31); 3, 80 bytes
  // (2.32).
  int context_version = 1;
  // Gets consumed once landed (GinQueues::gets_consumed_landed), for
  // kernels whose flush may post no flush descriptor.
  bool gets_consumed_landed = false;
  // The requirements' ginTrafficClass (2.30), 0..255, over the
  // communicator's trafficClass for GIN's connections; -1: the communicator's.
  int traffic_class = -1;
};

class DeviceGin {
 public:
  // Collective over the communicator (the signal array is shared with the
  // LSA peers, the other hosts' ranks connected).  The space's memory must
  // serve GIN (DeviceApiMemory::gin_ops).  `transport`: the communicator's
  // ranks.  Its proxy is stepped by `progress` (the communicator's GIN
  // thread) until this is destroyed; it faults when `liveness` is raised,
  // and its faults raise it (both outlive this).
  static Status create(LsaSpace& space, Bootstrap& bootstrap, const TransportContext& transport,
                       const DeviceGinShape& shape, devapi::GinProgress& progress, DeviceLiveness& liveness,
                       std::unique_ptr<DeviceGin>* out);
  ~DeviceGin();

  // What ginHandles[] holds: context c's ncclGinProxyGpuCtx_t in
  // ginHandles[c] (format 1), or the array of them in ginHandles[0]
  // (format 2).
  void* device_context(uint32_t c = 0) const { return static_cast<char*>(context_) + c * context_bytes_; }
  // The first error of the proxy (ok while there is none).
  Status fault() const { return fault_.failed() ? fault_.get() : Status::ok(); }

 private:
  explicit DeviceGin(DeviceApiMemory& memory) : memory_(memory) {}
  // Collective: a link to every rank outside this LSA team, and the
  // receiver of theirs: over the communicator's net where it has one (as
  // BRAID_TRANSPORT chooses), else TCP.
  Status connect_other_hosts(LsaSpace& space, Bootstrap& bootstrap, const TransportContext& transport,
                             uint32_t signal_words, std::vector<std::unique_ptr<devapi::GinLink>>* links);
  Status connect_over_net(LsaSpace& space, Bootstrap& bootstrap, const TransportContext& transport, Net* net,
                          uint32_t signal_words, std::vector<std::unique_ptr<devapi::GinLink>>* links);
  Status connect_over_tcp(LsaSpace& space, Bootstrap& bootstrap, uint32_t signal_words,
                          std::vector<std::unique_ptr<devapi::GinLink>>* links);
  DeviceApiMemory& memory_;
  void* context_ = nullptr;
  size_t context_bytes_ = 0;  // one context's struct
  // Every context's descriptors, consumer indices and counters (host
  // memory the device maps), and its producer indices (and in format 2
  // signal offsets and get indices; device memory).
  void* host_block_ = nullptr;
  bool host_block_registered_ = false;
  void* device_block_ = nullptr;
  std::unique_ptr<GinSignalArray> signals_;
  devapi::GinFault fault_;
  std::unique_ptr<devapi::GinTcpReceiver> receiver_;
  // Over a net: GIN's own transport (its pipes outlive the links and the
  // receiver that use them) and the receiver.
  std::unique_ptr<Transport> net_transport_;
  std::unique_ptr<GinPipeReceiver> pipe_receiver_;
  std::unique_ptr<devapi::GinProxy> proxy_;
  devapi::GinProgress* progress_ = nullptr;  // stepping proxy_ (set once it is)
};

}  // namespace braid

// A device communicator's GIN signal array: every context's signals, in
// host memory that every LSA peer maps, so that their proxies add into it
// with host atomics (src/devapi/gin_memory.h), and that the device reads
// through the address its memory gives for it (DeviceApiMemory::
// host_register: the same address on the host backend, a mapped, pinned
// page range on a GPU).  On a GPU the host has no atomic on device memory,
// and the proxy must not launch a kernel to add (a user's persistent
// kernel may hold every SM, waiting for that very signal); so the signals
// live on the host, as NCCL's proxy keeps its counters there, and the
// device polls them across the bus.
//
// The array is a memfd (src/transport/host_memory.h) whose descriptor
// reaches the LSA peers in other processes with SCM_RIGHTS
// (src/transport/fd_passing.h); threads of one process use its address.
// Ranks of other LSA teams (other hosts) reach it through this rank's TCP
// receiver instead.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/base/status.h"
#include "src/devapi/teams.h"
#include "src/exec/device_api_memory.h"
#include "src/transport/transport.h"

namespace braid {

class Bootstrap;

class GinSignalArray {
 public:
  // Collective over the communicator: `words` zeroed signal words on every
  // rank, each rank's mapped by its LSA peers.  Fails on every rank when
  // any rank cannot share or map it.
  static Status create(DeviceApiMemory& memory, const TransportContext& ctx, Bootstrap& bootstrap,
                       const devapi::LsaShape& lsa, uint64_t words, std::unique_ptr<GinSignalArray>* out);
  ~GinSignalArray();
  GinSignalArray(const GinSignalArray&) = delete;
  GinSignalArray& operator=(const GinSignalArray&) = delete;

  uint64_t* host() const { return mine_; }                       // this rank's, for its receiver and host waits
  uint64_t* device() const { return device_; }                   // this rank's, as its device reads it
  uint64_t* lsa_peer(int i) const { return peers_[size_t(i)]; }  // LSA rank i's (this rank's too), mapped here

 private:
  explicit GinSignalArray(DeviceApiMemory& memory) : memory_(memory) {}
  Status share(const TransportContext& ctx, Bootstrap& bootstrap, const devapi::LsaShape& lsa, uint64_t bytes);

  DeviceApiMemory& memory_;
  uint64_t* mine_ = nullptr;
  uint64_t* device_ = nullptr;
  bool registered_ = false;
  std::vector<uint64_t*> peers_;
  std::vector<std::pair<void*, size_t>> maps_;  // peers' arrays mapped here
};

}  // namespace braid

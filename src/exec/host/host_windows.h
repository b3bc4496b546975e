// The windows of a host-backend communicator that every rank can load and
// store directly (ncclCommWindowRegister): threads of one process, or
// ncclMemAlloc memory (src/transport/host_memory.h) of processes on one
// host.  Calls whose buffers lie in them run single-copy
// (src/exec/host/single_copy.h); a window some rank cannot reach is not
// kept here (its calls run the schedule).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/base/status.h"
#include "src/exec/backend.h"
#include "src/transport/host_memory.h"

namespace braid {

class Bootstrap;

struct HostWindow {
  uint64_t seq = 0;  // registration order, the same on every rank
  std::vector<WindowExtent> ranks;
  std::vector<char*> views;  // every rank's base as this process sees it
  std::vector<std::unique_ptr<PeerMapping>> mappings;  // what views point into
};

class HostWindows {
 public:
  // Maps every rank's part of `window` where this process can, and agrees
  // with the peers (a bootstrap allgather) whether all could: *direct.
  // Collective over the communicator's ranks.  A window the runtime mapped
  // already (WindowInfo::mapped) is direct at once, on every rank.
  Status add(const TransportContext& comm, Bootstrap& bootstrap, const WindowInfo& window, bool* direct);
  void remove(uint64_t seq);

  // The mapped window registered `seq`-th, or nullptr.
  const HostWindow* by_seq(uint64_t seq) const;
  // The mapped window holding [p, p + bytes) of rank `rank`, or nullptr.
  const HostWindow* holding(int rank, const void* p, uint64_t bytes) const;

 private:
  std::vector<std::unique_ptr<HostWindow>> windows_;
};

}  // namespace braid

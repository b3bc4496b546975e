// The communicator: what ncclComm_t points at.
//
// It owns the bootstrap (control messages), the transports (data), the
// planner's schedule cache and the scratch memory.  A communicator is used by
// one thread at a time (NCCL's rule); the only fields touched from other
// threads are the atomics (abort, async error).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nccl.h"
#include "src/core/bootstrap.h"
#include "src/core/status.h"
#include "src/transport/transport.h"

namespace braid {
struct Schedule;
class PlanCache;
class DeviceBackend;
class RealComm;
}  // namespace braid

struct ncclComm {
  int rank = -1;
  int nranks = 0;
  int cuda_device = -1;  // -1: host backend
  ncclConfig_t config{};
  uint64_t comm_hash = 0;
  uint64_t tile_bytes = 0;  // fragment size every rank agreed on at init

  std::unique_ptr<braid::Bootstrap> bootstrap;
  std::vector<braid::PeerInfo> peers;
  std::unique_ptr<braid::Transport> transport;  // routes each peer to shm or sockets
  std::unique_ptr<braid::PlanCache> plans;
  // Set when the communicator runs on a GPU (see src/exec/device_backend.h);
  // null: the host executor runs its work.
  std::unique_ptr<braid::DeviceBackend> device;
  // Its twin on the real NCCL (BRAID_NCCL_LIB), made on the first forwarded call.
  std::unique_ptr<braid::RealComm> real;
  std::vector<char> scratch;  // grow-only, for schedules that use scratch chunks

  std::atomic<bool> aborting{false};
  std::atomic<int> async_error{ncclSuccess};
  bool finalized = false;
  std::mutex error_mutex;
  std::string last_error;

  ncclComm();
  ~ncclComm();
};

namespace braid {

// Runs the whole init protocol for one rank (bootstrap, peer exchange,
// transports).  Leaves *comm ready for collectives.
Status comm_init(ncclComm* comm, const ncclUniqueId& id, int nranks, int rank, const ncclConfig_t* config);

// Live-communicator registry: lets the API tell a valid handle from a
// destroyed or garbage one without touching freed memory.
void comm_register(ncclComm* comm);
bool comm_unregister(ncclComm* comm);  // false if it was not live
bool comm_is_live(const ncclComm* comm);

// Identity of this host (BRAID_HOSTID overrides), as a hash.
uint64_t host_hash();

// The routing transport: shared memory to ranks on this host, sockets to
// others (BRAID_TRANSPORT forces one).
Status make_router_transport(const TransportContext& ctx, std::unique_ptr<Transport> shm,
                             std::unique_ptr<Transport> socket, std::unique_ptr<Transport>* out);

}  // namespace braid

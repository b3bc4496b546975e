// The communicator: what ncclComm_t points at.
//
// It owns the bootstrap (control messages), the transports (data), the
// planner's schedule cache and the scratch memory.  A communicator is used by
// one thread at a time (NCCL's rule); the only fields touched from other
// threads are the atomics (abort, async error).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nccl.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/host_memory.h"
#include "src/runtime/live_comms.h"
#include "src/base/status.h"
#include "src/plan/output_stores.h"
#include "src/transport/transport.h"

namespace braid {
struct Schedule;
class PlanCache;
class DeviceBackend;
class RealComm;
class Task;
class EagerBoard;
class OneShotBoard;
struct DirectGuard;
template <class Option>
class MeasuredChooser;
enum class CopyPath : uint8_t;
enum class SlotStores : uint8_t;
struct SlotLeases;

// BRAID_CMA: whether collectives between processes may pull (and push)
// peers' buffers with cross-memory attach (src/transport/cross_memory.h).  Ordered:
// ranks use the least any of them asks for.
enum class CmaMode : int32_t { Off = 0, Auto = 1, On = 2 };

// Work a non-blocking communicator runs in the background (its init, or a
// group).  Shared by every communicator the work touches; `done` flips once,
// after the worker wrote every result it will write.
struct AsyncJob {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  ncclResult_t result = ncclSuccess;
  // Blocks until done; false if `timeout_ms` passed first.
  bool wait(int64_t timeout_ms);
  void finish(ncclResult_t r);
};

// A ncclRedOpCreatePreMulSum op: sum of (scalar * input).  Immediate scalars
// are copied at creation; "device" ones (host memory on this backend) are
// read when a collective runs, as NCCL reads them when its kernel runs.
struct PreMulSumOp {
  ncclDataType_t type = ncclFloat;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  uint64_t immediate = 0;         // the scalar's bytes (up to 8)
  const void* pointer = nullptr;  // ncclScalarDevice
};

// One ncclCommRegister registration (the handle points at it).
struct Registration {
  void* base = nullptr;
  size_t size = 0;
};
}  // namespace braid

// A window from ncclCommWindowRegister: every rank's base and size, gathered
// at registration (the device AlltoAll API reads peers' entries).  On the
// host backend a window is also "direct" when this process can load and
// store every rank's window (threads of one process, or ncclMemAlloc memory
// of processes on one host, see src/transport/host_memory.h); every rank of the
// communicator agrees on that at registration.
struct ncclWindow_vidmem {
  ncclComm* comm = nullptr;
  int flags = 0;
  uint64_t seq = 0;  // registration order, the same on every rank
  struct Extent {
    uint64_t base = 0;
    uint64_t size = 0;
  };
  std::vector<Extent> ranks;  // indexed by rank; ranks[comm->rank] is ours
  bool direct = false;
  std::vector<char*> views;   // direct: every rank's base as this process sees it
  std::vector<std::unique_ptr<braid::PeerMapping>> mappings;  // what views point into
};

struct ncclComm {
  int rank = -1;
  int nranks = 0;
  int cuda_device = -1;  // -1: host backend
  ncclConfig_t config NCCL_CONFIG_INITIALIZER;
  uint64_t comm_hash = 0;
  uint64_t tile_bytes = 0;       // fragment size every rank agreed on at init
  uint64_t wide_tile_bytes = 0;  // the widest every transport's slot takes (calls with large chunks)
  bool check_args = false;  // BRAID_CHECK, read once at init (src/runtime/group_check.cc)

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
  // The host tasks of the last group, kept so a repeated call can reuse
  // them instead of allocating: its schedule task
  // (src/exec/host/collective_task.h) and the last direct task around one
  // (src/exec/host/direct_task.h).
  std::unique_ptr<braid::Task> spare_task, spare_direct_task;
  // Blocking collectives (of the Collective bits in oneshot_collectives)
  // with at most this many input bytes per rank, outside groups, run on a
  // shared board: one-shot (src/exec/host/oneshot.h), or eager for the
  // rooted ones (src/exec/host/eager.h).  Agreed at init, 0 where not every
  // rank is on this host.  Each board opens on its first use.
  uint64_t oneshot_max_bytes = 0;
  uint32_t oneshot_collectives = 0;
  uint64_t oneshot_calls = 0;
  std::unique_ptr<braid::OneShotBoard> oneshot;
  uint64_t eager_calls = 0;
  std::unique_ptr<braid::EagerBoard> eager;

  std::atomic<bool> aborting{false};
  std::atomic<int> async_error{ncclSuccess};
  bool finalized = false;
  std::mutex error_mutex;
  std::string last_error;

  std::atomic<bool> ready{false};  // init finished: transport and bootstrap exist
  // ncclCommRevoke: no new work; in-flight work is stopped.  `stop` is what
  // the executor watches (abort or revoke).
  std::atomic<bool> revoked{false};
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};  // groups executing on this comm right now
  // Non-blocking communicators (config.blocking == 0): the background job in
  // flight, if any (init or a group).
  std::mutex job_mutex;
  std::shared_ptr<braid::AsyncJob> job;
  bool nonblocking() const { return config.blocking == 0; }

  // Per-communicator objects the API hands out (touched by the owning thread).
  std::map<int, braid::PreMulSumOp> user_ops;  // key: ncclRedOp_t value >= ncclNumOps
  int next_user_op = ncclNumOps;
  std::map<void*, std::unique_ptr<braid::Registration>> registrations;
  std::map<ncclWindow_vidmem*, std::unique_ptr<ncclWindow_vidmem>> windows;
  uint64_t windows_registered = 0;  // ncclWindow_vidmem::seq of the next one
  bool has_direct_window = false;   // one was ever registered (a collective fact)
  // Calls of at least this many bytes whose buffers lie in direct windows run
  // single-copy (src/exec/host/direct_task.h); agreed at init, UINT64_MAX: never.
  uint64_t direct_min_bytes = UINT64_MAX;
  // Every rank is a thread of this process (host buffers): any buffer is
  // reachable from every rank, so calls of direct_min_bytes or more run
  // single-copy on plain user buffers too, without windows.
  bool one_process = false;
  std::shared_ptr<braid::DirectGuard> direct_guard;  // with one_process (direct_task.h)
  // The pull path (direct_task.h): between processes of this host, calls
  // of the collectives in pull_collectives moving at least pull_min_bytes
  // on plain buffers exchange descriptors first (agreed at init), and then
  // every rank pulls its peers' inputs with process_vm_readv if every rank
  // could read every other at init (can_pull, carried in the descriptors)
  // and rank 0's copy_paths chooses it (always, with pull_always).
  uint32_t pull_collectives = 0;
  uint64_t pull_min_bytes = UINT64_MAX;
  bool pull_always = false;
  bool can_pull = false;
  std::unique_ptr<braid::MeasuredChooser<braid::CopyPath>> copy_paths;  // rank 0 only
  std::unique_ptr<braid::SlotLeases> slot_leases;     // with pull_collectives
  // Where ranks outnumber cores (BRAID_CMA=auto), a call rank 0 times on
  // the slots ends with the pull path's "done" exchange, so both ways are
  // timed until every rank is done (src/plan/copy_path.h).
  bool time_slot_calls_to_all_done = false;
  // How the executor stores into the send slots on calls that stream their
  // output (src/plan/slot_stores.h), this rank's own choice: streamed
  // always, timed by slot_stores (BRAID_SLOT_STORES=auto where every rank
  // has a core), or, with neither, through the cache.
  bool stream_slots_always = false;
  std::unique_ptr<braid::MeasuredChooser<braid::SlotStores>> slot_stores;
  // The last-level cache this rank runs under and how many of the
  // communicator's ranks share it: which outputs the executor streams
  // (src/plan/output_stores.h).
  braid::CacheShare cache_share;

  ncclComm();
  ~ncclComm();
};

namespace braid {

// Runs the whole init protocol for one rank (bootstrap, peer exchange,
// transports).  Leaves *comm ready for collectives.
Status comm_init(ncclComm* comm, const ncclUniqueId& id, int nranks, int rank, const ncclConfig_t* config);
// The same with several roots (ncclCommInitRankScalable): rank r meets the
// others through ids[root_of_rank(r)] (see bootstrap.h).
Status comm_init_scalable(ncclComm* comm, const std::vector<ncclUniqueId>& ids, int nranks, int rank,
                          const ncclConfig_t* config);

// Live-communicator registry (src/runtime/live_comms.h): lets the API tell a
// valid handle from a destroyed or garbage one without touching freed
// memory, and without a lock.
void comm_register(ncclComm* comm);
bool comm_unregister(ncclComm* comm);  // false if it was not live
bool comm_is_live(const ncclComm* comm);
// Runs fn(comm) only if comm is live; no ncclCommAbort/Destroy can free it
// meanwhile (they wait for it in comm_wait_idle).
template <class F>
bool comm_if_live(ncclComm* comm, F&& fn) {
  return live_comms().if_live(comm, [&] { fn(comm); });
}

// Marks comm as in use by a group (false if it is not live), until
// comm_release, which may run on another thread (a non-blocking group's
// worker).  Abort and Destroy unregister first and then wait until no use
// is left, so a communicator is never freed under a thread running on it.
// (An API call's own use of its communicator is a CommUse, src/shim/api.h.)
bool comm_acquire(ncclComm* comm);
void comm_release(ncclComm* comm);
// Waits until nothing runs on an (unregistered) comm: no group (running)
// and no thread's use (LiveComms::in_use); false on timeout.
bool comm_wait_idle(ncclComm* comm, int64_t timeout_ms);
// Waits for the communicator's background job (non-blocking mode), bounded by
// BRAID_TIMEOUT; its failure is not this call's failure.
Status comm_wait_job(ncclComm* comm);
// What ncclCommGetAsyncError reports: a sticky error, else ncclInProgress
// while background work (or a revoked group) is still running, else the
// outcome of the last background job.
ncclResult_t comm_async_state(ncclComm* comm);

}  // namespace braid

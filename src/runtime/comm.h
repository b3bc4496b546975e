// The communicator: what ncclComm_t points at.
//
// It owns the bootstrap (control messages), the transports (data), the
// planner's schedule cache and the backend that runs its work.  A
// communicator is used by one thread at a time (NCCL's rule); the only
// fields touched from other threads are the atomics (abort, async error).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "nccl.h"
#include "src/base/status.h"
#include "src/bootstrap/bootstrap.h"
#include "src/exec/backend.h"
#include "src/ops/reduction.h"
#include "src/plan/planner.h"
#include "src/runtime/live_comms.h"
#include "src/runtime/lsa_space.h"
#include "src/runtime/profiler.h"
#include "src/runtime/tuner.h"
#include "src/runtime/ras_service.h"
#include "src/transport/transport.h"

namespace braid {

struct CommSetup;  // src/runtime/init.h

// Work a non-blocking communicator runs in the background (its init, or a
// group).  Shared by every communicator the work touches, each with its own
// outcome (a group's setup may fail on one while the others' work ran);
// `done` flips once, after the worker wrote every result it will write.
struct AsyncJob {
  using Outcomes = std::vector<std::pair<const ncclComm*, ncclResult_t>>;
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Outcomes outcomes;  // a communicator not listed: ncclSuccess
  // Blocks until done; false if `timeout_ms` passed first.
  bool wait(int64_t timeout_ms);
  void finish(Outcomes of_comm);
  ncclResult_t outcome_of(const ncclComm* comm) const;  // with `mutex` held
};

// One ncclCommRegister registration (the handle points at it).
struct Registration {
  void* base = nullptr;
  size_t size = 0;
};
}  // namespace braid

namespace braid {
// A window from ncclCommWindowRegister, as the host sees it: every rank's
// extent, gathered at registration, and its registration order (the same
// on every rank).  What a backend makes of it (the host's direct windows)
// is the backend's.  ncclWindow_t points at `device`'s struct, the bytes
// NCCL's device code reads (src/runtime/lsa_space.h), whose winHost points
// back here.
struct Window {
  ncclComm* comm = nullptr;
  int flags = 0;
  uint64_t seq = 0;
  std::vector<WindowExtent> ranks;  // indexed by rank
  WindowInfo info;  // as the backend got it (again after ncclCommResume)
  std::unique_ptr<LsaWindow> device;
  ~Window();  // forgets the owner (window_owner)
};
// The communicator that registered window `win`, for the calls that name
// only a window (nullptr if none did, or it was deregistered).
ncclComm* window_owner(ncclWindow_t win);
void set_window_owner(ncclWindow_t win, ncclComm* comm);
// Device communicators from ncclDevCommCreate (src/runtime/device_comm.h).
class DeviceComms;
}  // namespace braid

struct ncclComm {
  int rank = -1;
  int nranks = 0;
  int cuda_device = -1;  // -1: not on the CUDA backend
  ncclConfig_t config NCCL_CONFIG_INITIALIZER;
  // The config's netName, copied at the call: the caller's string may be
  // gone by the time a non-blocking init reads it.  "" where none.
  std::string net_name;
  uint64_t comm_hash = 0;
  bool check_args = false;  // BRAID_CHECK, agreed at init (src/runtime/group_check.cc)
  // NCCL_CHECK_MODE=DEBUG_LOCAL/DEBUG_GLOBAL or NCCL_CHECK_POINTERS=1: each
  // host buffer must be mapped memory (src/shim/api_coll.cc); this rank's own.
  bool check_pointers = false;

  std::unique_ptr<braid::Bootstrap> bootstrap;
  std::vector<braid::PeerInfo> peers;
  std::unique_ptr<braid::Transport> transport;  // routes each peer to shm or sockets
  std::unique_ptr<braid::PlanCache> plans;
  // Runs the communicator's work (src/exec/backend.h); set when init is done.
  std::unique_ptr<braid::Backend> backend;
  // Held where the backend is swapped after init (ncclCommSuspend, Resume)
  // and by ncclCommGetAsyncError's poll of it, which may run in another
  // thread (a watchdog) at the same time.
  std::mutex backend_mutex;
  // Communicators being made from this one (Split, Shrink, Grow) while
  // their call runs: an abort of this one stops their inits too.
  std::mutex deriving_mutex;
  std::vector<ncclComm*> deriving;

  std::atomic<bool> aborting{false};
  std::atomic<int> async_error{ncclSuccess};  // set by braid::set_async_error
  bool finalized = false;
  std::mutex error_mutex;
  std::string last_error;
  std::string async_cause;  // what set async_error (under error_mutex), for the calls it refuses

  std::atomic<bool> ready{false};  // init finished: transport, bootstrap and backend exist
  // The bootstrap exists (set once init's rendezvous is over): an abort can
  // wake init's later exchanges, its final barrier among them.
  std::atomic<bool> bootstrap_up{false};
  // ncclCommRevoke: no new work; in-flight work is stopped.  `stop` is what
  // the backends watch (abort or revoke).
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
  // Symmetric memory (NCCL's device API), from the first window on; it
  // outlives the windows and device communicators placed in it.
  std::unique_ptr<braid::LsaSpace> lsa;
  std::map<ncclWindow_t, std::unique_ptr<braid::Window>> windows;  // key: the struct ncclWindow_t points at
  uint64_t windows_registered = 0;  // Window::seq of the next one
  std::unique_ptr<braid::DeviceComms> dev_comms;

  // ncclCommSuspend: the backend and the transport are gone until
  // ncclCommResume rebuilds them (src/runtime/init.h); only queries, Resume,
  // Destroy and Abort work meanwhile.
  bool suspended = false;
  uint32_t resumes = 0;  // how often; tells each rebuild's connections apart
  std::unique_ptr<braid::CommSetup> setup;  // what init decided, for the rebuild
  // ncclCommGetUniqueId: the id of a grow this rank coordinates, until the
  // grow consumes it.
  bool grow_id_pending = false;
  ncclUniqueId grow_id{};
  // NCCL_VERSION_CODE of the header the caller was built with, as its
  // ncclConfig_t said (a derived communicator's config-less call inherits
  // it); 0 when no config told.  Results 2.28's header lacks (ncclTimeout)
  // are not returned to older callers (src/shim/api_common.cc).
  unsigned client_version = 0;
  braid::CommProfiler profiler;  // a profiler plugin's context and events (src/runtime/profiler.h)
  braid::CommTuner tuner;  // a tuner plugin's context (src/runtime/tuner.h); finalized as the comm is freed
  braid::RasCommState ras;       // what RAS queries read (src/runtime/ras_service.h)

  ncclComm();
  ~ncclComm();
};

namespace braid {

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
// Marks comm failed after a collective setup step that some rank left
// midway, which leaves the bootstrap out of step: `why` stays as its
// asynchronous error, so later calls are refused, and its bootstrap is
// aborted, so that peers waiting in that step fail at once (and break
// theirs) instead of at BRAID_TIMEOUT or reading the next step as that one.
void break_comm(ncclComm* comm, const Status& why);
// Makes `why` comm's sticky asynchronous error unless it has one already;
// true when it did.  Its text is kept, so that the calls refused later say
// what broke the communicator, not only that something did.
bool set_async_error(ncclComm* comm, const Status& why);
// That text ("" while there is none).
std::string async_cause(ncclComm* comm);
// What ncclCommGetAsyncError reports: a sticky error, else ncclInProgress
// while background work (or a revoked group) is still running, else the
// outcome of the last background job.
ncclResult_t comm_async_state(ncclComm* comm);

}  // namespace braid

// A backend runs a communicator's work; every communicator has one.
//
//   host         host buffers; the host executor (src/exec/host): schedules,
//                one-shot and eager boards, the direct and pull paths
//   cuda         device buffers; one kernel per call on the caller's stream
//                (src/exec/cuda), asynchronous like NCCL
//   host-staged  device buffers of ranks on several hosts: copied to host
//                memory, run by a host backend, copied back (host_staged.h)
//
// The runtime (src/runtime/group.cc) queues a group's calls per
// communicator and at ncclGroupEnd hands each backend its part.  Backends of
// one kind run their parts together, through their kind's GroupRunner: the
// host executor drives every communicator of a group in one cooperative
// loop, since a group may span several communicators driven by one thread
// (ncclCommInitAll), which would deadlock if each ran alone.  Errors a
// backend hits after a call returned (a kernel's) surface through
// poll_error(), which ncclCommGetAsyncError reports, as in NCCL.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "nccl.h"
#include "src/base/status.h"
#include "src/exec/device_api_memory.h"
#include "src/plan/call.h"
#include "src/plan/device_tuning.h"
#include "src/transport/host_memory.h"
#include "src/transport/transport.h"

namespace braid {

class Backend;
class Bootstrap;
class PlanCache;

// One communicator's part of a group: its collectives in call order, then
// its sends and receives as one concurrent batch, then its one-sided calls
// (every write, then every wait).
struct CommWork {
  Backend* backend = nullptr;
  std::vector<CollectiveCall> collectives;
  std::vector<P2PCall> p2ps;
  std::vector<RmaCall> rma;
};

// Runs (or, on a device, enqueues) the part of a group on every
// communicator whose backend has this runner.
using GroupRunner = Status (*)(std::span<CommWork> work);

// What a backend is made from: the communicator's ranks and peers, its
// control and data channels, its planner, and the flag that stops its waits
// (ncclCommAbort, ncclCommRevoke).  All outlive the backend.
struct BackendContext {
  TransportContext comm;  // rank, nranks, comm hash, every rank's PeerInfo
  Bootstrap* bootstrap = nullptr;
  Transport* transport = nullptr;  // shared memory and sockets (src/transport/router.h)
  PlanCache* plans = nullptr;
  const std::atomic<bool>* stop = nullptr;
  // The most blocks a collective's kernel launch takes (config maxCTAs,
  // NCCL_MAX_CTAS, NCCL_MAX_NCHANNELS; the least of every rank's).
  int32_t max_ctas = INT32_MAX;
  // One-sided RMA (ncclConfig_t numRmaCtx, numRmaSig, rmaEagerInit; agreed at init).
  int rma_contexts = 1, rma_signals = 1;
  bool rma_eager = false;  // set up RMA with the backend, not at the first window
  // A bit per Collective a fixed schedule is pinned to (BRAID_ALGO, a
  // schedule file; agreed): no fast path may replace it.
  uint32_t pinned_collectives = 0;
  // A bit per Collective whose LL path NCCL_PROTO excludes (src/plan/nccl_proto.h; agreed).
  uint32_t ll_excluded_collectives = 0;
  // CUDA backend: the communicator's settings (channels, slots, slot bytes,
  // the LL limit), agreed at init from BRAID_CUDA_* and the tuning table
  // (src/plan/device_tuning.h), and the table's per-call choices.
  // AllReduce, ReduceScatter, AllGather and AlltoAll whose message
  // (message_bytes) is at most cuda.ll_max_bytes may run the LL protocol.
  CommTuning cuda;
  std::shared_ptr<const DeviceTuning> cuda_calls;
  // NCCL_CHECK_MODE's local check: a device buffer must be the
  // communicator's device's (src/exec/device_buffer_check.h).
  bool check_buffer_devices = false;
};

// The memory a backend holds for its communicator (ncclCommMemStats).
struct MemoryHeld {
  uint64_t releasable = 0;  // what ncclCommSuspend gives back: slots, boards, staging, device FIFOs
  uint64_t persistent = 0;  // what stays while suspended
};

// A window from ncclCommWindowRegister as every rank registered it: its
// registration order (the same on every rank) and each rank's extent.
struct WindowExtent {
  uint64_t base = 0;
  uint64_t size = 0;
};
struct WindowInfo {
  uint64_t seq = 0;
  std::vector<WindowExtent> ranks;  // indexed by rank
  std::vector<SharedHandle> handles;  // what each rank's memory can be mapped by (src/transport/host_memory.h)
  // Where each rank's part is already mapped in this process (the runtime's
  // symmetric memory, src/runtime/lsa_space.h), for every rank or for none:
  // a backend that maps peers' memory can use these instead.
  std::vector<char*> mapped;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual GroupRunner group_runner() const = 0;
  // A blocking call outside any group may take a path of the backend's own
  // (the host's boards): *ran says whether it did; otherwise the runtime
  // runs it as a group of one.  runs_alone tells beforehand (for a profiler,
  // whose events must start first).
  virtual bool runs_alone(const CollectiveCall& call) const {
    (void)call;
    return false;
  }
  virtual Status run_alone(const CollectiveCall& call, bool* ran) {
    (void)call;
    *ran = false;
    return Status::ok();
  }
  // Fragments each of its connections buffers: a schedule needing more
  // (Schedule::slots) could deadlock on it.
  virtual int connection_slots() const = 0;
  // Whether it runs one-sided schedules (schedule.h): every rank loads and
  // stores every peer's buffers.  The same answer on every rank.
  virtual bool runs_one_sided() const { return false; }
  // Whether `call`, as it stands, takes the backend's LL path (the CUDA
  // backend's) when no late rank claims it: what a tuner plugin is offered
  // as NCCL's RING/LL (src/plan/tuner_choice.h).  The same on every rank.
  virtual bool takes_ll_path(const CollectiveCall& call) const {
    (void)call;
    return false;
  }
  // Ok, or the first error the backend hit asynchronously, with why.
  virtual Status poll_error() { return Status::ok(); }
  // Releases everything waiting on a peer (ncclCommAbort).
  virtual void abort() {}
  // Stops in-flight work on purpose, with no error to report
  // (ncclCommRevoke); quiescent() once what it enqueued has ended.  Host
  // work watches the communicator's `stop` instead.
  virtual void revoke() {}
  virtual bool quiescent() { return true; }
  // A window every rank just registered (collective: every rank of the
  // communicator calls it for the same window), and one this rank dropped.
  virtual Status window_registered(const WindowInfo& window) {
    (void)window;
    return Status::ok();
  }
  virtual void window_deregistered(uint64_t seq) { (void)seq; }
  // Where `peer`'s part of window `seq`, at `offset`, is in this process
  // (the device API's ncclGetPeerDevicePointer, which has checked `peer`
  // and `offset` against the window): *out is null, and the status ok,
  // where the backend does not map it here.
  virtual Status window_peer_pointer(uint64_t seq, int peer, uint64_t offset, void** out) {
    (void)seq, (void)peer, (void)offset;
    *out = nullptr;
    return Status::ok();
  }

  // The memory NCCL's device API lives in on this backend
  // (ncclCommWindowRegister, ncclDevCommCreate): host memory unless the
  // backend's kernels run elsewhere.
  virtual DeviceApiMemory& device_api_memory() { return host_device_api_memory(); }

  // What this backend (with the transports it drives) holds now; the
  // communicator's own transport is counted by the runtime.
  virtual MemoryHeld memory_held() const { return {}; }

  // One-sided RMA on registered windows.  A write lands in the peer's
  // window and then raises its signal; a wait returns once the signals it
  // names arrived, and consumes them.  Neither needs the peer to call
  // anything.  rma_start is collective (every rank, at the first window or
  // at init with rma_eager): it connects the ranks for one-sided traffic.
  virtual bool has_rma() const { return false; }
  virtual Status rma_start() { return no_rma(); }
  virtual bool rma_started() const { return false; }
  virtual Status rma_write(const RmaCall& call) { (void)call; return no_rma(); }
  virtual Status rma_wait(const RmaCall& call) { (void)call; return no_rma(); }
  // Signals that arrived and were not waited for yet.
  virtual uint64_t rma_signals_pending() const { return 0; }

 protected:
  Status no_rma() const {
    return BRAID_ERROR(ncclInvalidUsage, "one-sided RMA (ncclPutSignal, ncclSignal, ncclWaitSignal) is not "
                       "implemented on the {} backend", name());
  }
};

}  // namespace braid

// A device backend executes a communicator's work on an accelerator instead
// of the host executor: asynchronously, on the caller's stream.
//
// The front end (argument checks, groups, planning) is shared; at GroupEnd a
// communicator with a device backend hands it its planned collectives and its
// send/recv batch instead of building host tasks.  Errors the device hits
// later (a dead peer, an abort, mismatched sizes) surface through
// poll_error(), which ncclCommGetAsyncError reports, as in NCCL.
#pragma once

#include <memory>
#include <vector>

#include "braid/schedule.h"
#include "src/core/group.h"
#include "src/core/status.h"

struct ncclComm;

namespace braid {

class HostStagedBackend;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual const char* name() const = 0;
  // Enqueue one collective on call.stream, running `schedule`.
  virtual Status collective(const CollectiveCall& call, const std::shared_ptr<const Schedule>& schedule) = 0;
  // Enqueue one group's send/recv batch (on the first call's stream).
  virtual Status p2p(const std::vector<P2PCall>& calls) = 0;
  // ncclSuccess, or the first error the device reported.
  virtual ncclResult_t poll_error() = 0;
  // Releases every kernel waiting on a peer (ncclCommAbort).
  virtual void abort() = 0;
  // Non-null for communicators whose device buffers are staged through the
  // host executor (src/exec/host_staged.h): their groups run as one batch.
  virtual HostStagedBackend* host_staged() { return nullptr; }
  // Fragments each of its connections buffers (a schedule needing more,
  // Schedule::slots, could deadlock); 0 where its data goes through the
  // communicator's host transport.
  virtual int slots() const { return 0; }
};

// What a rank tells the others at init so that all pick the same backend.
struct DeviceProbe {
  int32_t usable = 0;  // 1: this rank can and wants to run the CUDA backend
  int32_t device = -1;
};

// Looks at BRAID_BACKEND and the CUDA devices visible to this process.
DeviceProbe probe_device_backend();

// ncclMemAlloc's memory where communicators run the CUDA backend: device
// memory on the current device, `alignment`-aligned (a power of two).
Status device_mem_alloc(size_t bytes, size_t alignment, void** out);
Status device_mem_free(void* p);

// Creates the CUDA backend for an initialised communicator (bootstrap and
// peers ready).  Fails cleanly when braid was built without CUDA.
Status make_cuda_backend(ncclComm* comm, int device, std::unique_ptr<DeviceBackend>* out);
// The same for a communicator with ranks on other hosts: device buffers
// staged through the host executor (src/exec/host_staged.h).
Status make_cuda_staged_backend(ncclComm* comm, int device, std::unique_ptr<DeviceBackend>* out);

}  // namespace braid

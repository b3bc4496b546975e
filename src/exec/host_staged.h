// Host-staged device communicators: device buffers, host data path.
//
// A CUDA communicator whose ranks span hosts cannot map its peers' memory
// (CUDA IPC is per host) and braid has no InfiniBand transport yet.  Such a
// communicator still takes device buffers, as NCCL's does: each group copies
// its device inputs to host staging buffers, runs the work with the host
// executor over the host transports (TCP across hosts, shared memory within
// one), and copies the outputs back.  The copies are ordered on each call's
// stream and waited for, so a call returns when its outputs are on the device
// (synchronous, like the host backend; not capturable in a CUDA graph).
//
// All CUDA work goes through DeviceMemory, so the staging logic runs and is
// tested on CPUs with a stand-in whose "device" pages are inaccessible
// except inside its copy calls (tests/staged).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "src/base/status.h"
#include "src/exec/backend.h"
#include "src/exec/host/host_backend.h"

namespace braid {

// The device side of staging: copies ordered on a stream, and waiting.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Fails (ncclInvalidArgument, naming `what`) unless p is device memory.
  virtual Status check(const void* p, const char* what) = 0;
  // ncclInvalidUsage while `stream` is being captured into a CUDA graph.
  virtual Status check_not_capturing(void* stream) = 0;
  // Enqueue a copy on `stream`; complete only after wait(stream).
  virtual Status to_host(void* host, const void* device, size_t bytes, void* stream) = 0;
  virtual Status to_device(void* device, const void* host, size_t bytes, void* stream) = 0;
  virtual Status wait(void* stream) = 0;
  // Host memory the copies run fastest from (pinned, for CUDA).
  virtual void* host_alloc(size_t bytes) = 0;
  virtual void host_free(void* p) = 0;
};

class HostStagedBackend final : public Backend {
 public:
  HostStagedBackend(std::unique_ptr<DeviceMemory> memory, std::unique_ptr<HostBackend> host)
      : memory_(std::move(memory)), host_(std::move(host)) {}
  ~HostStagedBackend() override;
  const char* name() const override { return "host-staged"; }
  GroupRunner group_runner() const override;
  int connection_slots() const override { return host_->connection_slots(); }
  // Its host backend's memory (device copies are staged in host memory).
  MemoryHeld memory_held() const override { return host_->memory_held(); }
  // Errors are returned by the calls themselves (they complete before
  // returning); the host executor watches the communicator's stop flag.

  DeviceMemory& memory() { return *memory_; }
  HostBackend& host() { return *host_; }
  // Host staging memory for one group: grows between groups (the previous
  // group's copies are complete by then), never while one runs.
  Status reserve(size_t bytes, char** out);

 private:
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<HostBackend> host_;
  char* staging_ = nullptr;
  size_t capacity_ = 0;
};

// The staged backends' part of a group (their GroupRunner): stage in, run
// on their host backends (concurrently, as one group), stage out.  On
// failure no device output is written.
Status run_host_staged(std::span<CommWork> work);

}  // namespace braid

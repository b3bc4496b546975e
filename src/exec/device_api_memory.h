// The memory under NCCL's device API, as a backend provides it.
//
// A kernel written against nccl_device.h reads three kinds of memory that
// braid sets up (research doc 1.6, src/runtime/lsa_space.h):
//  - NCCL's structs (windows, the window table), which must be readable
//    where the kernel runs: device memory on a GPU, plain memory on the
//    host backend;
//  - one flat range of address space per communicator, where every LSA
//    peer's copy of each symmetric allocation is mapped at
//    base + peer * stride + offset;
//  - shareable allocations (ncclMemAlloc's, and a device communicator's
//    resource buffer), which the peers map there through a descriptor
//    passed to them (src/transport/fd_passing.h).
// The host backend does this with mmap of memfds; the CUDA backend with
// cuMem (address reservation, POSIX-fd export and import, mapping).  The
// runtime decides what goes where; a backend only provides these moves.
// For GPU-initiated networking it also lets the device reach host memory
// (the proxy's queues, consumer indices, counters and signals, which the
// host writes with plain stores and atomics), and says how the proxy
// copies into and out of windows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/status.h"
#include "src/devapi/gin_memory.h"

namespace braid {

// How peers reach the shareable allocation holding a buffer.
struct ExportedMemory {
  int fd = -1;            // -1: the buffer is not in a shareable allocation
  bool close_fd = false;  // a descriptor made for this export (cuMem), not the allocation's own (memfd)
  uint64_t offset = 0;    // of the buffer from the allocation's start
  uint64_t allocation_bytes = 0;
};

class DeviceApiMemory {
 public:
  virtual ~DeviceApiMemory() = default;
  virtual const char* name() const = 0;
  // The unit of mapping (a power of two): offsets and sizes in the flat
  // range are multiples of it.
  virtual uint64_t granularity() const = 0;
  // The size of the memory symmetric allocations come from (a GPU's, or
  // the host's), and which memory that is: ranks with the same id share it,
  // so one rank can never want more than its share of the size.
  virtual uint64_t capacity() const = 0;
  virtual uint64_t memory_id() const = 0;

  // Whether this memory can make shareable allocations at all (a device
  // that cannot export cuMem memory cannot).
  virtual bool can_share() const = 0;
  // How a GIN proxy copies into and out of this memory (src/devapi/
  // gin_memory.h); null where braid's proxy is not served on it.  Signal
  // adds go to host memory (host_register), never to this memory, except
  // where the ops can add in windows (2.30's VA signals).
  virtual const devapi::GinMemoryOps* gin_ops() const = 0;
  // Which shareable allocation holds [p, p + bytes) (fd -1 if none).
  virtual Status describe(const void* p, size_t bytes, ExportedMemory* out) = 0;
  // Address space for the flat range, `bytes` long, aligned to `align`.
  virtual Status reserve(uint64_t bytes, uint64_t align, char** base) = 0;
  virtual void release(char* base, uint64_t bytes) = 0;
  // Maps the first `bytes` of the allocation behind `fd` at `at` (inside a
  // reservation; both multiples of the granularity), and back.
  virtual Status map(int fd, uint64_t bytes, char* at) = 0;
  virtual void unmap(char* at, uint64_t bytes) = 0;

  // A shareable allocation of its own (a resource buffer), zeroed.
  virtual Status alloc_shareable(size_t bytes, void** out) = 0;
  virtual void free_shareable(void* p) = 0;
  virtual Status zero(void* p, size_t bytes) = 0;

  // Memory for NCCL's structs, zeroed; written from the host.
  virtual Status struct_alloc(size_t bytes, void** out) = 0;
  virtual Status struct_write(void* dst, const void* src, size_t bytes) = 0;
  virtual void struct_free(void* p) = 0;

  // Makes host memory [p, p + bytes) reachable from the device (pinned and
  // mapped on a GPU): `device` is the device's address of it.
  virtual Status host_register(void* p, size_t bytes, void** device) = 0;
  virtual void host_unregister(void* p) = 0;
};

// The host backend's: memfds and mmap.  One object, shared by all.
DeviceApiMemory& host_device_api_memory();

}  // namespace braid

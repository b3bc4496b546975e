// CUDA's virtual memory management (cuMem), what NCCL's symmetric memory
// is made of: physical allocations exportable as POSIX descriptors, mapped
// into address ranges braid reserves (research doc 1.9).
//
// The driver API comes through the runtime's entry-point lookup, not by
// linking libcuda, so that libnccl.so.2 still loads where there is no
// driver (the CPU machines that run the host backend).  cuMem needs a
// device that can export POSIX descriptors; elsewhere `available` says no
// and ncclMemAlloc keeps cudaMalloc (src/exec/cuda/cuda_memalloc.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/status.h"
#include "src/exec/device_api_memory.h"

namespace braid::vmm {

// Whether `device` can make exportable cuMem allocations.
bool available(int device);
// The allocation granularity of `device` (a power of two).
uint64_t granularity(int device);

// A physical allocation of `bytes` (rounded up to the granularity) on
// `device`, exportable as a POSIX fd, mapped at a fresh address readable
// and writable from `device` and every device that can access it.
Status alloc(int device, size_t bytes, void** out);
// Frees what alloc returned: false if `p` is not such an address.
bool free(void* p);

// Which cuMem allocation holds [p, p + bytes), as a descriptor made for
// the export (fd -1 if p is not cuMem memory, e.g. cudaMalloc's).
Status describe(const void* p, size_t bytes, ExportedMemory* out);

Status reserve(uint64_t bytes, uint64_t align, char** base);
void release(char* base, uint64_t bytes);
// Imports the allocation behind `fd` and maps its first `bytes` at `at`,
// readable and writable from `device`.
Status map(int device, int fd, uint64_t bytes, char* at);
void unmap(char* at, uint64_t bytes);

}  // namespace braid::vmm

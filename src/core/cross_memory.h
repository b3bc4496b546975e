// Cross-memory attach (CMA): copying straight out of another process's
// memory on this host with process_vm_readv, one kernel copy, without the
// other process doing anything, on buffers it never registered.
//
// The pull path (src/exec/host/direct_task.h) uses it where processes on one
// host run AllGather, AlltoAll and Broadcast on plain buffers: each rank
// reads its peers' inputs into its own output instead of receiving them
// through shared-memory slots.  The kernel allows it when the reader may
// ptrace the target (same user, and Yama's ptrace_scope, seccomp or a
// non-dumpable target may forbid it), so whether it works is found out by
// trying (cma_can_read), never assumed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "src/core/status.h"

namespace braid {

// Copies `bytes` from `remote` in process `pid` to `local`.  Errors: the
// process is gone (ncclRemoteError), the range is not mapped there
// (ncclRemoteError), or the kernel refuses (ncclSystemError).
Status cma_read(pid_t pid, void* local, uint64_t remote, size_t bytes);

// A value at a fixed address of this process, different in every process
// (a forked child gets its own): a peer that reads it back through CMA
// proves it may read this process's memory.
struct CmaProbe {
  uint64_t address = 0;
  uint64_t value = 0;
};
CmaProbe cma_probe_of_this_process();

// Whether this process can read `probe` of process `pid` (and reads the
// value it was told).
bool cma_can_read(pid_t pid, const CmaProbe& probe);

}  // namespace braid

// Cross-memory attach (CMA): copying straight out of (or into) another
// process's memory on this host with process_vm_readv (writev), one kernel
// copy, without the other process doing anything, on buffers it never
// registered.
//
// The pull path (src/exec/host/single_copy.h) uses it where processes on one
// host run collectives on plain buffers: each rank reads its peers' inputs
// instead of receiving them through shared-memory slots (and a reduction
// writes its share of the result into its peers' outputs).  The kernel
// pins and maps the other process's pages one at a time, so the copy runs
// at user-space memcpy speed on huge pages and several times slower on
// 4 KiB pages (perf/copy_path_probe -H).  The kernel allows it when the
// caller may ptrace the target (same user, and Yama's ptrace_scope, seccomp
// or a non-dumpable target may forbid it), reading and writing alike, so
// whether it works is found out by trying (cma_can_read), never assumed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "src/base/status.h"

namespace braid {

// Copies `bytes` from `remote` in process `pid` to `local`.  Errors: the
// process is gone (ncclRemoteError), the range is not mapped there
// (ncclRemoteError), or the kernel refuses (ncclSystemError).
Status cma_read(pid_t pid, void* local, uint64_t remote, size_t bytes);
// Copies `bytes` from `local` to `remote` in process `pid` (process_vm_writev:
// the same permission as reading); the same errors, and a range that is not
// writable there is ncclRemoteError too.
Status cma_write(pid_t pid, uint64_t remote, const void* local, size_t bytes);

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

#include "src/core/cross_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

namespace braid {

Status cma_read(pid_t pid, void* local, uint64_t remote, size_t bytes) {
  char* to = static_cast<char*>(local);
  while (bytes > 0) {
    iovec here{to, bytes};
    iovec there{reinterpret_cast<void*>(remote), bytes};
    ssize_t got = process_vm_readv(pid, &here, 1, &there, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      if (err == ESRCH) return BRAID_ERROR(ncclRemoteError, "process {} is gone (process_vm_readv)", pid);
      if (err == EFAULT)
        return BRAID_ERROR(ncclRemoteError, "{} bytes at {:#x} are not mapped in process {} (process_vm_readv)",
                           bytes, remote, pid);
      return BRAID_ERROR(ncclSystemError, "process_vm_readv from process {}: {}", pid, std::strerror(err));
    }
    if (got == 0)  // a partial read stops at an unmapped page: the next call names it
      return BRAID_ERROR(ncclRemoteError, "{} bytes at {:#x} are not mapped in process {} (process_vm_readv)", bytes,
                         remote, pid);
    to += got;
    remote += uint64_t(got);
    bytes -= size_t(got);
  }
  return Status::ok();
}

namespace {
std::atomic<uint64_t> probe_word{0};
}

CmaProbe cma_probe_of_this_process() {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd() ^ 1;
  }();
  // Mixed with the pid: a forked child must not pass for its parent.
  const uint64_t value = seed ^ (uint64_t(getpid()) * 0x9e3779b97f4a7c15ull);
  probe_word.store(value, std::memory_order_relaxed);
  return CmaProbe{reinterpret_cast<uint64_t>(&probe_word), value};
}

bool cma_can_read(pid_t pid, const CmaProbe& probe) {
  uint64_t seen = 0;
  return cma_read(pid, &seen, probe.address, sizeof seen).is_ok() && seen == probe.value;
}

}  // namespace braid

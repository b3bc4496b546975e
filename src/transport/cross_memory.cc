#include "src/transport/cross_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

namespace braid {

namespace {

// One process_vm_readv or process_vm_writev, repeated over partial
// transfers until done or failed.
Status cma_copy(pid_t pid, char* local, uint64_t remote, size_t bytes, bool write) {
  const char* call = write ? "process_vm_writev" : "process_vm_readv";
  auto unmapped = [&] {
    return BRAID_ERROR(ncclRemoteError, "{} bytes at {:#x} are not mapped{} in process {} ({})", bytes, remote,
                       write ? " writable" : "", pid, call);
  };
  while (bytes > 0) {
    iovec here{local, bytes};
    iovec there{reinterpret_cast<void*>(remote), bytes};
    const ssize_t moved =
        write ? process_vm_writev(pid, &here, 1, &there, 1, 0) : process_vm_readv(pid, &here, 1, &there, 1, 0);
    if (moved < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      if (err == ESRCH) return BRAID_ERROR(ncclRemoteError, "process {} is gone ({})", pid, call);
      if (err == EFAULT) return unmapped();
      return BRAID_ERROR(ncclSystemError, "{} in process {}: {}", call, pid, std::strerror(err));
    }
    if (moved == 0) return unmapped();  // a partial transfer stops at a bad page: the next call names it
    local += moved;
    remote += uint64_t(moved);
    bytes -= size_t(moved);
  }
  return Status::ok();
}

}  // namespace

Status cma_read(pid_t pid, void* local, uint64_t remote, size_t bytes) {
  return cma_copy(pid, static_cast<char*>(local), remote, bytes, false);
}

Status cma_write(pid_t pid, uint64_t remote, const void* local, size_t bytes) {
  return cma_copy(pid, const_cast<char*>(static_cast<const char*>(local)), remote, bytes, true);
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

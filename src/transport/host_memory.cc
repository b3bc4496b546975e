#include "src/transport/host_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "src/base/host_identity.h"

namespace braid {
namespace {

struct Allocation {
  size_t bytes = 0;
  int fd = -1;
  uint64_t serial = 0;
};

std::mutex mutex;
uint64_t last_serial = 0;  // under mutex

std::map<uintptr_t, Allocation>& allocations() {  // start address -> allocation
  static auto* live = new std::map<uintptr_t, Allocation>;  // never freed: used from exit paths
  return *live;
}

}  // namespace

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }

Status host_shared_alloc(size_t bytes, void** out) {
  *out = nullptr;
  const size_t page = page_size();
  // The memory is sparse until touched: an allocation past the machine's
  // memory and swap would succeed here and end in the OOM killer later.
  // Refused now, as an overcommitting malloc refuses it (and NCCL's cuMem).
  struct sysinfo machine{};
  const uint64_t most = sysinfo(&machine) == 0 ? (uint64_t(machine.totalram) + machine.totalswap) * machine.mem_unit
                                               : UINT64_MAX;
  if (bytes > most || bytes > SIZE_MAX - page)
    return BRAID_ERROR(ncclSystemError, "cannot allocate {} bytes of host memory: more than this machine's memory "
                       "and swap ({} bytes)", bytes, most);
  bytes = (bytes + page - 1) / page * page;
  int fd = memfd_create("braid-memalloc", MFD_CLOEXEC);
  if (fd < 0) return BRAID_ERROR(ncclSystemError, "memfd_create: {}", std::strerror(errno));
  if (ftruncate(fd, off_t(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    return BRAID_ERROR(ncclSystemError, "cannot allocate {} bytes of shareable host memory: {}", bytes,
                       std::strerror(err));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return BRAID_ERROR(ncclSystemError, "mmap of {} bytes: {}", bytes, std::strerror(err));
  }
  std::lock_guard<std::mutex> lock(mutex);
  allocations()[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, fd, ++last_serial};
  *out = p;
  return Status::ok();
}

bool host_shared_free(void* p) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = allocations().find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations().end()) return false;
    a = it->second;
    allocations().erase(it);
  }
  munmap(p, a.bytes);
  ::close(a.fd);
  return true;
}

SharedHandle host_shared_handle(const void* p, size_t bytes) {
  SharedHandle h;
  h.pid = int32_t(this_pid());
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = allocations().upper_bound(addr);
  if (it == allocations().begin()) return h;
  --it;
  if (addr + bytes > it->first + it->second.bytes) return h;
  h.fd = it->second.fd;
  h.offset = addr - it->first;
  h.serial = it->second.serial;
  h.allocation_bytes = it->second.bytes;
  return h;
}

SharedBuffer::~SharedBuffer() {
  if (data_) host_shared_free(data_);
}

Status SharedBuffer::reserve(size_t bytes) {
  if (bytes <= capacity_) return Status::ok();
  if (data_) host_shared_free(data_);
  data_ = nullptr;
  capacity_ = 0;
  BRAID_TRY(host_shared_alloc(bytes, &data_));
  capacity_ = bytes;
  return Status::ok();
}

PeerMapping::~PeerMapping() { munmap(map_, map_bytes_); }

Status map_peer_range(const SharedHandle& h, size_t bytes, std::unique_ptr<PeerMapping>* out) {
  if (h.fd < 0) return BRAID_ERROR(ncclInvalidUsage, "pid {}'s buffer is not shareable memory", h.pid);
  std::string path = fmt::format("/proc/{}/fd/{}", h.pid, h.fd);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return BRAID_ERROR(ncclSystemError, "open {}: {}", path, std::strerror(errno));
  Status s = std::move(map_shared_fd(fd, h, bytes, out)).context(path);
  ::close(fd);
  return s;
}

Status map_shared_fd(int fd, const SharedHandle& h, size_t bytes, std::unique_ptr<PeerMapping>* out) {
  const size_t page = page_size();
  const uint64_t first = h.offset / page * page;
  const size_t map_bytes = std::max<size_t>(1, h.offset - first + bytes);
  void* map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(first));
  if (map == MAP_FAILED)
    return BRAID_ERROR(ncclSystemError, "mmap of pid {}'s memory: {}", h.pid, std::strerror(errno));
  *out = std::make_unique<PeerMapping>(map, map_bytes, static_cast<char*>(map) + (h.offset - first));
  return Status::ok();
}

}  // namespace braid

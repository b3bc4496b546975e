#include "src/transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "src/transport/host_memory.h"

namespace braid {
namespace {

// This process's mappings by name.  An entry leaves when its name is
// unlinked (a later object under the name is another segment) or when its
// last user unmaps it (then the weak pointer has expired).
struct Registry {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<ShmSegment>> by_name;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: segments may outlive static destruction
  return *r;
}

// Whether `fd` is at least `bytes` long (its creator has sized it).
bool sized(int fd, size_t bytes) {
  struct stat st{};
  return ::fstat(fd, &st) == 0 && size_t(st.st_size) >= bytes;
}

// Sizes a new segment to `bytes`, its first `reserve` allocated.  fallocate
// fails with ENOSPC where /dev/shm is full (tmpfs undoes a partial one),
// and extends the size only once its pages are there; the ftruncate after
// it leaves the rest sparse, and the full size is what attachers wait for.
// Returns 0 or the errno.
int size_segment(int fd, size_t bytes, size_t reserve) {
  reserve = std::min(reserve, bytes);
  int r = 0;
  if (reserve) {
    do r = ::fallocate(fd, 0, 0, off_t(reserve));
    while (r != 0 && errno == EINTR);
  }
  if (r != 0 && errno != EOPNOTSUPP && errno != ENOSYS) return errno;  // else a file system without fallocate
  return ::ftruncate(fd, off_t(bytes)) == 0 ? 0 : errno;
}

// What to tell a user whose /dev/shm cannot hold a segment of `bytes`.
std::string no_room(const std::string& name, size_t bytes, int err) {
  constexpr double kMiB = 1 << 20;
  std::string room;
  struct statvfs fs{};
  if (::statvfs("/dev/shm", &fs) == 0)
    room = fmt::format(" ({:.1f} MiB in all, {:.1f} MiB free)", double(fs.f_blocks) * double(fs.f_frsize) / kMiB,
                       double(fs.f_bavail) * double(fs.f_frsize) / kMiB);
  const std::string size = bytes < (1 << 20) ? fmt::format("{} KiB", (bytes + 1023) / 1024)
                                              : fmt::format("{:.1f} MiB", double(bytes) / kMiB);
  return fmt::format("shm {}: /dev/shm has no room for {} more{}: {}. Give the ranks a larger /dev/shm "
                     "(docker run --shm-size=1g, or --ipc=host), lower BRAID_SHM_SLOTS, or set NCCL_SHM_DISABLE=1 "
                     "to connect the ranks of a host without shared memory",
                     name, size, room, std::strerror(err));
}

}  // namespace

Status ShmSegment::open(const std::string& name, size_t bytes, Mode mode, std::shared_ptr<ShmSegment>* out,
                        Opened* how, size_t reserve) {
  out->reset();
  *how = Opened::Shared;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.by_name.find(name);
  if (it != reg.by_name.end()) {
    if (auto seg = it->second.lock()) {
      if (mode == Mode::Create) return BRAID_ERROR(ncclSystemError, "shm {}: already exists", name);
      if (seg->bytes_ < bytes)
        return BRAID_ERROR(ncclInternalError, "shm {}: mapped with {} bytes, {} wanted", name, seg->bytes_, bytes);
      *out = std::move(seg);
      return Status::ok();
    }
    reg.by_name.erase(it);
  }

  int fd = -1;
  bool created = false;
  if (mode != Mode::Attach) {
    fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      if (int err = size_segment(fd, bytes, reserve); err != 0) {
        ::close(fd);
        ::shm_unlink(name.c_str());
        if (err == ENOSPC || err == ENOMEM)
          return BRAID_ERROR(ncclSystemError, "{}", no_room(name, std::min(reserve, bytes), err));
        return BRAID_ERROR(ncclSystemError, "shm {}: sizing it to {} bytes: {}", name, bytes, std::strerror(err));
      }
      created = true;
    } else if (errno != EEXIST || mode == Mode::Create) {
      return BRAID_ERROR(ncclSystemError, "shm_open {}: {}", name, std::strerror(errno));
    }
  }
  if (fd < 0) {
    fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      if (errno == ENOENT) return Status::ok();  // not created yet, or unlinked in between: a stale name
      return BRAID_ERROR(ncclSystemError, "shm_open {}: {}", name, std::strerror(errno));
    }
    if (!sized(fd, bytes)) {
      ::close(fd);
      return Status::ok();  // the creator has not sized it yet
    }
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    if (created) ::shm_unlink(name.c_str());
    return BRAID_ERROR(ncclSystemError, "mmap {}: {}", name, std::strerror(err));
  }
  std::shared_ptr<ShmSegment> seg(new ShmSegment(name, map, bytes));
  if (created) {
    // The reserve is allocated (fallocate) but not yet in the page cache,
    // where resident_bytes counts it: map it in now (no SIGBUS possible).
    if (Status s = seg->populate(0, std::min(reserve, bytes)); !s.is_ok()) {
      ::shm_unlink(name.c_str());
      return s;
    }
  }
  reg.by_name[name] = seg;
  *out = std::move(seg);
  *how = created ? Opened::Created : Opened::Mapped;
  return Status::ok();
}

// MADV_POPULATE_WRITE (Linux 5.14) allocates the pages and fails with
// EFAULT where a touch would have raised SIGBUS.  An older kernel refuses
// the advice (EINVAL): then each page is touched by a write that changes
// nothing, which cannot report a full /dev/shm.
Status ShmSegment::populate(size_t offset, size_t bytes) const {
  const uintptr_t page = page_size();
  const uintptr_t base = reinterpret_cast<uintptr_t>(base_);
  const uintptr_t begin = (base + offset) / page * page;
  const uintptr_t end = (base + std::min(offset + bytes, bytes_) + page - 1) / page * page;
  if (begin >= end) return Status::ok();
#ifdef MADV_POPULATE_WRITE
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) return Status::ok();
  if (errno == EFAULT || errno == ENOMEM)
    return BRAID_ERROR(ncclSystemError, "{}", no_room(name_, end - begin, ENOSPC));
  if (errno != EINVAL)
    return BRAID_ERROR(ncclSystemError, "shm {}: allocating {} bytes of it: {}", name_, end - begin,
                       std::strerror(errno));
#endif
  for (uintptr_t p = begin; p < end; p += page) __atomic_fetch_add(reinterpret_cast<char*>(p), 0, __ATOMIC_RELAXED);
  return Status::ok();
}

size_t ShmSegment::resident_bytes() const {
  // On a shared mapping of tmpfs, mincore reports the object's pages
  // (whoever allocated them), not only those this process touched.
  const size_t page = page_size();
  std::vector<unsigned char> present((bytes_ + page - 1) / page);
  if (::mincore(base_, present.size() * page, present.data()) != 0) return bytes_;
  size_t pages = 0;
  for (unsigned char p : present) pages += p & 1;
  return pages * page;
}

ShmSegment::~ShmSegment() { ::munmap(base_, bytes_); }

void ShmSegment::unlink(const std::string& name) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.by_name.erase(name);
  ::shm_unlink(name.c_str());
}

}  // namespace braid

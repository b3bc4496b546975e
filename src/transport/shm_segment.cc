#include "src/transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

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

}  // namespace

Status ShmSegment::open(const std::string& name, size_t bytes, Mode mode, std::shared_ptr<ShmSegment>* out,
                        Opened* how) {
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
      if (::ftruncate(fd, off_t(bytes)) != 0) {
        int err = errno;
        ::close(fd);
        ::shm_unlink(name.c_str());
        return BRAID_ERROR(ncclSystemError, "shm {}: ftruncate to {} bytes: {} (is /dev/shm large enough?)", name,
                           bytes, std::strerror(err));
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
  std::shared_ptr<ShmSegment> seg(new ShmSegment(map, bytes));
  reg.by_name[name] = seg;
  *out = std::move(seg);
  *how = created ? Opened::Created : Opened::Mapped;
  return Status::ok();
}

ShmSegment::~ShmSegment() { ::munmap(base_, bytes_); }

void ShmSegment::unlink(const std::string& name) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.by_name.erase(name);
  ::shm_unlink(name.c_str());
}

}  // namespace braid

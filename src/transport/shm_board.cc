#include "src/transport/shm_board.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/core/deadline.h"

namespace braid {
namespace {

// Idle polls between looks for a dead rank 0 (kill(pid, 0) is a syscall).
constexpr uint32_t kLivenessCheckEvery = 1 << 12;

}  // namespace

void make_pages_present(void* p, size_t bytes, bool creator) {
  if (creator) {
    std::memset(p, 0, bytes);
    return;
  }
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  volatile char sink = 0;
  for (size_t off = 0; off < bytes; off += page) sink = sink + static_cast<volatile char*>(p)[off];
}

BoardMap::~BoardMap() {
  if (map_) ::munmap(map_, bytes_);
  // The creator removes the name if some rank never attached (ENOENT otherwise).
  if (setup_.rank == 0 && !unlinked_ && !setup_.name.empty()) ::shm_unlink(setup_.name.c_str());
}

int BoardMap::dead_rank(const std::vector<int>& ranks) const {
  for (int r : ranks) {
    const int32_t pid = r < int(setup_.pids.size()) ? setup_.pids[r] : 0;
    if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) return r;
  }
  return -1;
}

Status BoardMap::open(BoardSetup setup, size_t bytes, const std::function<void(void*)>& init) {
  setup_ = std::move(setup);
  const BoardSetup& s = setup_;
  const char* name = s.name.c_str();
  Deadline deadline = Deadline::after(s.timeout);
  Waiter waiter;
  uint32_t polls = 0;
  // Why waiting stops early: the deadline, an abort, or rank 0 gone.
  auto stop_waiting = [&](const char* why) -> Status {
    if (deadline.expired() || (s.aborting && s.aborting->load()))
      return BRAID_ERROR(ncclRemoteError, "{}: {} {}", s.what, s.name, why);
    if (++polls % kLivenessCheckEvery == 0 && dead_rank({0}) == 0)
      return BRAID_ERROR(ncclRemoteError, "{}: rank 0 died before {} {}", s.what, s.name, why);
    waiter.pause();
    return Status::ok();
  };

  int fd = -1;
  if (s.rank == 0) {
    fd = ::shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return BRAID_ERROR(ncclSystemError, "shm_open {}: {}", s.name, std::strerror(errno));
    if (::ftruncate(fd, off_t(bytes)) != 0) {
      int err = errno;
      ::close(fd);
      ::shm_unlink(name);
      return BRAID_ERROR(ncclSystemError, "shm {}: ftruncate: {}", s.name, std::strerror(err));
    }
  } else {
    // Wait for the name *and* its full size.  Rank 0 creates the name and
    // sizes it in two system calls; in between the object exists with 0
    // bytes, and a rank that maps it then and reads `ready` takes SIGBUS (a
    // page past the end of the object): once the eager StragglAR test's
    // intermittent hang.
    for (;;) {
      fd = ::shm_open(name, O_RDWR, 0600);
      if (fd >= 0) {
        struct stat st{};
        if (::fstat(fd, &st) == 0 && size_t(st.st_size) >= bytes) break;
        ::close(fd);
        fd = -1;
      } else if (errno != ENOENT) {
        return BRAID_ERROR(ncclSystemError, "shm_open {}: {}", s.name, std::strerror(errno));
      }
      BRAID_TRY(stop_waiting("was never created"));
    }
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return BRAID_ERROR(ncclSystemError, "mmap {}: {}", s.name, std::strerror(errno));
  map_ = map;
  bytes_ = bytes;
  auto* header = static_cast<BoardHeader*>(map);
  char* body = static_cast<char*>(map) + sizeof(BoardHeader);
  if (s.rank == 0) {
    make_pages_present(body, bytes - sizeof(BoardHeader), true);
    if (init) init(map);
    header->ready.store(1, std::memory_order_release);
  }
  while (header->ready.load(std::memory_order_acquire) != 1) BRAID_TRY(stop_waiting("never became ready"));
  if (s.rank != 0) make_pages_present(body, bytes - sizeof(BoardHeader), false);
  if (header->attached.fetch_add(1) + 1 == uint32_t(s.nranks)) {
    ::shm_unlink(name);
    unlinked_ = true;
  }
  return Status::ok();
}

}  // namespace braid

#include "src/plan/arrival_board.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/core/deadline.h"
#include "src/core/log.h"

namespace braid {
namespace {

// Slots reused round robin.  Two would do (see the header: a rank is at most
// one call ahead of the slowest on the board); four leave room.
constexpr int kSlots = 4;
// Idle polls between looks for a dead peer process (kill(pid, 0) is a syscall).
constexpr uint32_t kLivenessCheckEvery = 1 << 12;

struct Slot {
  std::atomic<uint64_t> arrived;   // bit r: rank r is in this call
  std::atomic<int32_t> straggler;  // -1 until n-1 ranks arrived
  std::atomic<uint32_t> seen;      // ranks that read straggler; the n-th resets the slot
};

}  // namespace

struct ArrivalBoard::Layout {
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> attached;
  Slot slots[kSlots];
};

ArrivalBoard::~ArrivalBoard() {
  if (board_) ::munmap(board_, sizeof(Layout));
  // The creator removes the name if some rank never attached (ENOENT otherwise).
  if (setup_.rank == 0 && !unlinked_) ::shm_unlink(setup_.name.c_str());
}

int ArrivalBoard::dead_rank(uint64_t ranks) const {
  for (int r = 0; r < setup_.nranks; ++r) {
    if (!((ranks >> r) & 1)) continue;
    const int32_t pid = r < int(setup_.pids.size()) ? setup_.pids[r] : 0;
    if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) return r;
  }
  return -1;
}

Status ArrivalBoard::open(Setup setup, std::unique_ptr<ArrivalBoard>* out) {
  std::unique_ptr<ArrivalBoard> b(new ArrivalBoard());
  b->setup_ = std::move(setup);
  const Setup& s = b->setup_;
  const char* name = s.name.c_str();
  Deadline deadline = Deadline::after(s.timeout);
  Waiter waiter;
  uint32_t polls = 0;
  // Why waiting stops early: the deadline, an abort, or rank 0 gone.
  auto stop_waiting = [&](const char* what) -> Status {
    if (deadline.expired() || (s.aborting && s.aborting->load()))
      return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: {} {}", s.name, what);
    if (++polls % kLivenessCheckEvery == 0 && b->dead_rank(1) == 0)
      return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: rank 0 died before {} {}", s.name, what);
    waiter.pause();
    return Status::ok();
  };

  int fd = -1;
  if (s.rank == 0) {
    fd = ::shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return BRAID_ERROR(ncclSystemError, "shm_open {}: {}", s.name, std::strerror(errno));
    if (::ftruncate(fd, sizeof(Layout)) != 0) {
      int err = errno;
      ::close(fd);
      ::shm_unlink(name);
      return BRAID_ERROR(ncclSystemError, "shm {}: ftruncate: {}", s.name, std::strerror(err));
    }
  } else {
    // Wait for the name *and* its full size.  Rank 0 creates the name and
    // sizes it in two system calls; in between the object exists with 0
    // bytes, and a rank that maps it then and reads `ready` takes SIGBUS (a
    // page past the end of the object).  That was the eager test's
    // intermittent hang: about 1 run in 10 as processes on a loaded machine,
    // an attaching rank died of SIGBUS on its first eager call and the
    // others waited for its arrival bit until the test's alarm.
    for (;;) {
      fd = ::shm_open(name, O_RDWR, 0600);
      if (fd >= 0) {
        struct stat st{};
        if (::fstat(fd, &st) == 0 && size_t(st.st_size) >= sizeof(Layout)) break;
        ::close(fd);
        fd = -1;
      } else if (errno != ENOENT) {
        return BRAID_ERROR(ncclSystemError, "shm_open {}: {}", s.name, std::strerror(errno));
      }
      BRAID_TRY(stop_waiting("was never created"));
    }
  }
  void* map = ::mmap(nullptr, sizeof(Layout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return BRAID_ERROR(ncclSystemError, "mmap {}: {}", s.name, std::strerror(errno));
  b->board_ = static_cast<Layout*>(map);
  if (s.rank == 0) {
    // A fresh object is zero-filled, and straggler 0 would be a valid answer.
    for (Slot& slot : b->board_->slots) {
      slot.arrived.store(0);
      slot.straggler.store(-1);
      slot.seen.store(0);
    }
    b->board_->ready.store(1, std::memory_order_release);
  }
  while (b->board_->ready.load(std::memory_order_acquire) != 1) BRAID_TRY(stop_waiting("never became ready"));
  if (b->board_->attached.fetch_add(1) + 1 == uint32_t(s.nranks)) {
    ::shm_unlink(name);
    b->unlinked_ = true;
  }
  *out = std::move(b);
  return Status::ok();
}

Status ArrivalBoard::straggler_of_call(uint64_t call, int* straggler) {
  const int n = setup_.nranks;
  Slot& slot = board_->slots[call % kSlots];
  const uint64_t all = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1, me = uint64_t(1) << setup_.rank;
  const uint64_t now = slot.arrived.fetch_or(me) | me;
  // fetch_or is one read-modify-write, so exactly one rank sees n-1 bits.
  if (__builtin_popcountll(now) == n - 1) slot.straggler.store(__builtin_ctzll(all & ~now), std::memory_order_release);
  Deadline deadline = Deadline::after(setup_.timeout);
  Waiter waiter;
  uint32_t polls = 0;
  int32_t named;
  while ((named = slot.straggler.load(std::memory_order_acquire)) < 0) {
    if (deadline.expired() || (setup_.aborting && setup_.aborting->load()))
      return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: fewer than {} ranks reached the call", n - 1);
    if (++polls % kLivenessCheckEvery == 0) {
      int dead = dead_rank(all & ~slot.arrived.load());
      if (dead >= 0) return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: rank {} died before the call", dead);
    }
    waiter.pause();
  }
  if (slot.seen.fetch_add(1) + 1 == uint32_t(n)) {
    slot.arrived.store(0);
    slot.straggler.store(-1);
    slot.seen.store(0, std::memory_order_release);
  }
  *straggler = named;
  return Status::ok();
}

}  // namespace braid

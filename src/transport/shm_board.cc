#include "src/transport/shm_board.h"

#include <unistd.h>

#include <cstring>

#include "src/base/deadline.h"
#include "src/base/env.h"
#include "src/transport/peer_processes.h"
#include "src/transport/host_memory.h"
#include "src/transport/shm_segment.h"

namespace braid {
namespace {

// Idle polls between looks for a dead rank 0 (asking its pidfd is a syscall).
constexpr uint32_t kLivenessCheckEvery = 1 << 12;

}  // namespace

void make_pages_present(void* p, size_t bytes, bool creator) {
  if (creator) {
    std::memset(p, 0, bytes);
    return;
  }
  // Relaxed atomic loads: a peer may already be writing these bytes.
  const size_t page = page_size();
  char sink = 0;
  for (size_t off = 0; off < bytes; off += page) sink ^= __atomic_load_n(static_cast<char*>(p) + off, __ATOMIC_RELAXED);
  asm volatile("" : : "r"(sink));
}

BoardSetup board_setup(const TransportContext& comm, std::string name, std::string what,
                       const std::atomic<bool>* aborting) {
  BoardSetup s;
  s.name = std::move(name);
  s.what = std::move(what);
  s.rank = comm.rank;
  s.nranks = comm.nranks;
  s.processes = PeerProcesses::of(comm);
  s.timeout = std::chrono::seconds(env_int("BRAID_TIMEOUT"));
  s.aborting = aborting;
  return s;
}

BoardMap::~BoardMap() {
  // The creator removes the name if some rank never attached (ENOENT otherwise).
  if (setup_.rank == 0 && !unlinked_ && !setup_.name.empty()) ShmSegment::unlink(setup_.name);
}

int BoardMap::dead_rank(const std::vector<int>& ranks) const {
  for (int r : ranks)
    if (setup_.processes && setup_.processes->exited(r)) return r;
  return -1;
}

Status BoardMap::open(BoardSetup setup, size_t bytes, const std::function<void(void*)>& init) {
  begin_open(std::move(setup));
  const BoardSetup& s = setup_;
  Deadline deadline = Deadline::after(s.timeout);
  Waiter waiter;
  uint32_t polls = 0;
  for (;;) {
    const char* waiting_because = nullptr;
    BRAID_TRY(try_open(bytes, init, &waiting_because));
    if (!waiting_because) return Status::ok();
    // Why waiting stops early: the deadline, an abort, or rank 0 gone.
    if (deadline.expired() || (s.aborting && s.aborting->load()))
      return BRAID_ERROR(ncclRemoteError, "{}: {} {}", s.what, s.name, waiting_because);
    if (++polls % kLivenessCheckEvery == 0 && dead_rank({0}) == 0)
      return BRAID_ERROR(ncclRemoteError, "{}: rank 0 died before {} {}", s.what, s.name, waiting_because);
    waiter.pause();
  }
}

void BoardMap::begin_open(BoardSetup setup) { setup_ = std::move(setup); }

Status BoardMap::try_open(size_t bytes, const std::function<void(void*)>& init, const char** waiting_because) {
  const BoardSetup& s = setup_;
  *waiting_because = nullptr;
  if (open_) return Status::ok();
  // Rank 0 creates; the others wait for the name *and* its full size (see
  // shm_segment.h: a rank that maps it before rank 0 has sized it and reads
  // `ready` takes SIGBUS; once the eager StragglAR test's intermittent hang).
  if (!seg_) {
    const auto mode = s.rank == 0 ? ShmSegment::Mode::Create : ShmSegment::Mode::Attach;
    BRAID_TRY(ShmSegment::open(s.name, bytes, mode, &seg_, &how_));
    if (!seg_) {
      *waiting_because = "was never created";
      return Status::ok();
    }
    if (s.rank == 0) {
      make_pages_present(body(), bytes - sizeof(BoardHeader), true);
      if (init) init(seg_->base());
      header()->ready.store(1, std::memory_order_release);
    }
  }
  if (header()->ready.load(std::memory_order_acquire) != 1) {
    *waiting_because = "never became ready";
    return Status::ok();
  }
  if (how_ == ShmSegment::Opened::Mapped) make_pages_present(body(), bytes - sizeof(BoardHeader), false);
  if (header()->attached.fetch_add(1) + 1 == uint32_t(s.nranks)) {
    ShmSegment::unlink(s.name);
    unlinked_ = true;
  }
  open_ = true;
  return Status::ok();
}

BoardHeader* BoardMap::header() const { return static_cast<BoardHeader*>(seg_->base()); }
char* BoardMap::body() const { return static_cast<char*>(seg_->base()) + sizeof(BoardHeader); }

}  // namespace braid

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
  setup_ = std::move(setup);
  const BoardSetup& s = setup_;
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

  // Rank 0 creates; the others wait for the name *and* its full size (see
  // shm_segment.h: a rank that maps it before rank 0 has sized it and reads
  // `ready` takes SIGBUS; once the eager StragglAR test's intermittent hang).
  ShmSegment::Opened how;
  if (s.rank == 0) {
    BRAID_TRY(ShmSegment::open(s.name, bytes, ShmSegment::Mode::Create, &seg_, &how));
  } else {
    for (;;) {
      BRAID_TRY(ShmSegment::open(s.name, bytes, ShmSegment::Mode::Attach, &seg_, &how));
      if (seg_) break;
      BRAID_TRY(stop_waiting("was never created"));
    }
  }
  void* map = seg_->base();
  auto* header = static_cast<BoardHeader*>(map);
  char* body = static_cast<char*>(map) + sizeof(BoardHeader);
  if (s.rank == 0) {
    make_pages_present(body, bytes - sizeof(BoardHeader), true);
    if (init) init(map);
    header->ready.store(1, std::memory_order_release);
  }
  while (header->ready.load(std::memory_order_acquire) != 1) BRAID_TRY(stop_waiting("never became ready"));
  if (how == ShmSegment::Opened::Mapped) make_pages_present(body, bytes - sizeof(BoardHeader), false);
  if (header->attached.fetch_add(1) + 1 == uint32_t(s.nranks)) {
    ShmSegment::unlink(s.name);
    unlinked_ = true;
  }
  return Status::ok();
}

}  // namespace braid

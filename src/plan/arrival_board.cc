#include "src/plan/arrival_board.h"

#include "src/base/deadline.h"
#include "src/base/log.h"

namespace braid {
namespace {

// Slots reused round robin.  Two would do (see the header: a rank is at most
// one call ahead of the slowest on the board); four leave room.
constexpr int kSlots = 4;
// Idle polls between looks for a dead peer process (asking its pidfd is a syscall).
constexpr uint32_t kLivenessCheckEvery = 1 << 12;

struct Slot {
  std::atomic<uint64_t> arrived;   // bit r: rank r is in this call
  std::atomic<int32_t> straggler;  // -1 until n-1 ranks arrived
  std::atomic<uint32_t> seen;      // ranks that read straggler; the n-th resets the slot
};

}  // namespace

struct ArrivalBoard::Layout {
  BoardHeader header;
  Slot slots[kSlots];
};

ArrivalBoard::~ArrivalBoard() = default;

int ArrivalBoard::dead_rank(uint64_t ranks) const {
  std::vector<int> list;
  for (int r = 0; r < map_.setup().nranks; ++r)
    if ((ranks >> r) & 1) list.push_back(r);
  return map_.dead_rank(list);
}

Status ArrivalBoard::open(BoardSetup setup, std::unique_ptr<ArrivalBoard>* out) {
  std::unique_ptr<ArrivalBoard> b(new ArrivalBoard());
  // A fresh object is zero-filled, and straggler 0 would be a valid answer.
  BRAID_TRY(b->map_.open(std::move(setup), sizeof(Layout), [](void* map) {
    for (Slot& slot : static_cast<Layout*>(map)->slots) {
      slot.arrived.store(0);
      slot.straggler.store(-1);
      slot.seen.store(0);
    }
  }));
  b->board_ = static_cast<Layout*>(b->map_.base());
  *out = std::move(b);
  return Status::ok();
}

void ArrivalBoard::arrive(uint64_t call) {
  const BoardSetup& setup = map_.setup();
  const int n = setup.nranks;
  Slot& slot = board_->slots[call % kSlots];
  const uint64_t all = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1, me = uint64_t(1) << setup.rank;
  const uint64_t now = slot.arrived.fetch_or(me) | me;
  // fetch_or is one read-modify-write, so exactly one rank sees n-1 bits.
  if (__builtin_popcountll(now) == n - 1) slot.straggler.store(__builtin_ctzll(all & ~now), std::memory_order_release);
  polls_ = 0;
}

Status ArrivalBoard::poll(uint64_t call, int* straggler, bool* named) {
  const int n = map_.setup().nranks;
  Slot& slot = board_->slots[call % kSlots];
  const int32_t name = slot.straggler.load(std::memory_order_acquire);
  *named = name >= 0;
  if (!*named) {
    if (++polls_ % kLivenessCheckEvery != 0) return Status::ok();
    const uint64_t all = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
    const int dead = dead_rank(all & ~slot.arrived.load());
    // It may have arrived and then exited since the load: look again.
    if (dead >= 0 && !(slot.arrived.load() >> dead & 1) && slot.straggler.load() < 0)
      return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: rank {} died before the call", dead);
    return Status::ok();
  }
  if (slot.seen.fetch_add(1) + 1 == uint32_t(n)) {
    slot.arrived.store(0);
    slot.straggler.store(-1);
    slot.seen.store(0, std::memory_order_release);
  }
  *straggler = name;
  return Status::ok();
}

Status ArrivalBoard::straggler_of_call(uint64_t call, int* straggler) {
  arrive(call);
  return wait(call, straggler);
}

Status ArrivalBoard::wait(uint64_t call, int* straggler) {
  const BoardSetup& setup = map_.setup();
  Deadline deadline = Deadline::after(setup.timeout);
  Waiter waiter;
  for (bool named = false;;) {
    BRAID_TRY(poll(call, straggler, &named));
    if (named) return Status::ok();
    if (deadline.expired() || (setup.aborting && setup.aborting->load()))
      return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: fewer than {} ranks reached the call",
                         setup.nranks - 1);
    waiter.pause();
  }
}

}  // namespace braid

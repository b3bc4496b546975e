#include "src/plan/duration_board.h"

#include <fmt/ranges.h>

#include "src/base/deadline.h"

namespace braid {
namespace {

// Idle polls between looks for a dead peer process (asking its pidfd is a syscall).
constexpr uint32_t kLivenessCheckEvery = 1 << 12;

// The board: a BoardHeader, then from its second cache line the entries,
// [kSlots][nranks].
constexpr size_t kEntriesOffset = 64;
static_assert(sizeof(BoardHeader) <= kEntriesOffset);

}  // namespace

DurationBoard::~DurationBoard() = default;

Status DurationBoard::open(BoardSetup setup, std::unique_ptr<DurationBoard>* out) {
  std::unique_ptr<DurationBoard> b(new DurationBoard());
  const size_t bytes = kEntriesOffset + kSlots * size_t(setup.nranks) * sizeof(DurationEntry);
  // A fresh object is zero-filled, and seq 0 means nothing posted yet.
  BRAID_TRY(b->map_.open(std::move(setup), bytes, [](void*) {}));
  b->entries_ = reinterpret_cast<DurationEntry*>(static_cast<char*>(b->map_.base()) + kEntriesOffset);
  *out = std::move(b);
  return Status::ok();
}

DurationEntry* DurationBoard::entry(uint64_t call) const {
  const BoardSetup& s = map_.setup();
  return &entries_[(call % kSlots) * uint64_t(s.nranks) + uint64_t(s.rank)];
}

Status DurationBoard::gather(uint64_t call, std::vector<int64_t>* durations) const {
  const BoardSetup& s = map_.setup();
  DurationEntry* slot = &entries_[(call % kSlots) * uint64_t(s.nranks)];
  durations->assign(size_t(s.nranks), -1);
  Deadline deadline = Deadline::after(s.timeout);
  Waiter waiter;
  uint32_t polls = 0;
  std::vector<int> missing;
  for (;;) {
    missing.clear();
    for (int r = 0; r < s.nranks; ++r) {
      if ((*durations)[size_t(r)] >= 0) continue;
      const uint64_t seq = __atomic_load_n(&slot[r].seq, __ATOMIC_ACQUIRE);
      if (seq > call + 1)  // the slot was reused before this host read it: the protocol above is broken
        return BRAID_ERROR(ncclInternalError, "{}: rank {} posted tracked call {} over call {} unread", s.what, r,
                           seq - 1, call);
      if (seq == call + 1)
        (*durations)[size_t(r)] = __atomic_load_n(&slot[r].duration_ns, __ATOMIC_RELAXED);
      else
        missing.push_back(r);
    }
    if (missing.empty()) return Status::ok();
    if (deadline.expired() || (s.aborting && s.aborting->load()))
      return BRAID_ERROR(ncclRemoteError, "{}: rank(s) {} did not complete tracked call {}", s.what,
                         fmt::join(missing, ", "), call);
    if (++polls % kLivenessCheckEvery == 0) {
      const int dead = map_.dead_rank(missing);
      // It may have posted and then exited since the scan above: look again.
      if (dead >= 0 && __atomic_load_n(&slot[dead].seq, __ATOMIC_ACQUIRE) != call + 1)
        return BRAID_ERROR(ncclRemoteError, "{}: rank {} died before completing tracked call {}", s.what, dead, call);
    }
    waiter.pause();
  }
}

}  // namespace braid

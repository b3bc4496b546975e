#include "src/exec/host/eager.h"

#include "src/plan/host_path.h"

#include <algorithm>
#include <cstring>

#include "braid/chunking.h"
#include "src/ops/datatype.h"
#include "src/ops/host_kernels.h"

namespace braid {

// A slot's first 16 bytes: the number of the call whose data it holds.
struct EagerBoard::Slot {
  std::atomic<uint64_t> call;
  uint64_t pad;
  char data[1];  // really max_bytes_
};

// What each rank owns on the board: its doorbell, its progress, its slots.
struct EagerBoard::RankArea {
  DoorbellWord bell;
  alignas(64) std::atomic<uint64_t> done;  // the last call this rank finished
  std::atomic<uint32_t> mapped;            // 1 once this rank has the board mapped
  alignas(64) char slots[1];               // really depth_ * slot_stride_
};

namespace {

constexpr size_t kDataOffset = offsetof(EagerBoard::Slot, data);
constexpr size_t kSlotsOffset = offsetof(EagerBoard::RankArea, slots);

}  // namespace

EagerBoard::~EagerBoard() = default;

Status EagerBoard::open(BoardSetup setup, size_t max_bytes, std::unique_ptr<EagerBoard>* out) {
  std::unique_ptr<EagerBoard> b(new EagerBoard());
  b->rank_ = setup.rank;
  b->nranks_ = setup.nranks;
  b->max_bytes_ = max_bytes;
  b->slot_stride_ = round_up_to_line(kDataOffset + max_bytes);
  b->depth_ = int(std::clamp<size_t>(kEagerBoardBytes / (size_t(b->nranks_) * b->slot_stride_), 2, kEagerMaxDepth));
  b->rank_stride_ = round_up_to_line(kSlotsOffset + size_t(b->depth_) * b->slot_stride_);
  b->polls_ = idle_polls_for(setup.nranks);
  // A fresh object is zero-filled: no slot holds a call, no rank is done with one.
  BRAID_TRY(b->map_.open(std::move(setup), kBoardHeaderBytes + size_t(b->nranks_) * b->rank_stride_, nullptr));
  b->area(b->rank_)->mapped.store(1, std::memory_order_release);
  b->ring_all();
  int next = 0;  // the first rank not yet seen mapping it
  BRAID_TRY(b->waiter(b->map_.setup().aborting).wait([&] {
    while (next < b->nranks_ && b->area(next)->mapped.load(std::memory_order_acquire) == 1) ++next;
    return next < b->nranks_ ? next : -1;
  }));
  *out = std::move(b);
  return Status::ok();
}

EagerBoard::RankArea* EagerBoard::area(int rank) const {
  return reinterpret_cast<RankArea*>(static_cast<char*>(map_.base()) + kBoardHeaderBytes + size_t(rank) * rank_stride_);
}

EagerBoard::Slot* EagerBoard::slot(int rank, uint64_t call) const {
  return reinterpret_cast<Slot*>(area(rank)->slots + (call % uint64_t(depth_)) * slot_stride_);
}

BoardWaiter EagerBoard::waiter(const std::atomic<bool>* stop) const {
  return BoardWaiter{.map = &map_,
                     .bell = &area(rank_)->bell,
                     .polls = polls_,
                     .stop = stop,
                     .what = "an eager rooted collective"};
}

void EagerBoard::ring_all() {
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_) ring(&area(r)->bell);
}

// Fills this rank's slot for `call` once every rank is done with the call
// that used it last, and publishes it.
Status EagerBoard::write(uint64_t call, const void* data, size_t bytes, const std::atomic<bool>* stop) {
  const uint64_t freed_by = call > uint64_t(depth_) ? call - uint64_t(depth_) : 0;
  if (peers_done_ < freed_by) {
    uint64_t seen = UINT64_MAX;  // the least `done` among the peers, once all are past `freed_by`
    int next = 0;                // the first rank not yet seen past `freed_by`
    BRAID_TRY(waiter(stop).wait([&] {
      for (; next < nranks_; ++next) {
        if (next == rank_) continue;
        const uint64_t done = area(next)->done.load(std::memory_order_acquire);
        if (done < freed_by) break;
        seen = std::min(seen, done);
      }
      return next < nranks_ ? next : -1;
    }));
    peers_done_ = seen;
  }
  Slot* mine = slot(rank_, call);
  std::memcpy(mine->data, data, bytes);
  mine->call.store(call, std::memory_order_release);
  ring_all();
  return Status::ok();
}

Status EagerBoard::wait_written(uint64_t call, int writer, const std::atomic<bool>* stop) {
  const Slot* s = slot(writer, call);
  return waiter(stop).wait([&] { return s->call.load(std::memory_order_acquire) == call ? -1 : writer; });
}

Status EagerBoard::run(uint64_t call, const BoardCall& c, const std::atomic<bool>* stop) {
  const size_t block = c.count * datatype_size(c.type);
  const uint64_t payload = board_payload_bytes(c.collective, c.count, c.type, nranks_);
  if (payload > max_bytes_)
    return BRAID_ERROR(ncclInternalError, "eager {} of {} bytes on a {}-byte board", to_string(c.collective),
                       payload, max_bytes_);
  const bool root = rank_ == c.root;
  char* out = static_cast<char*>(c.output);
  auto copy = [](void* dst, const void* src, size_t n) {
    if (dst != src) std::memmove(dst, src, n);  // in place, root's own block may be the same bytes
  };
  switch (c.collective) {
    case Collective::Broadcast:
      if (root) {
        BRAID_TRY(write(call, c.input, block, stop));
        copy(out, c.input, block);
      } else {
        BRAID_TRY(wait_written(call, c.root, stop));
        std::memcpy(out, slot(c.root, call)->data, block);
      }
      break;
    case Collective::Scatter:
      if (root) {
        BRAID_TRY(write(call, c.input, block * nranks_, stop));
        copy(out, static_cast<const char*>(c.input) + size_t(rank_) * block, block);
      } else {
        BRAID_TRY(wait_written(call, c.root, stop));
        std::memcpy(out, slot(c.root, call)->data + size_t(rank_) * block, block);
      }
      break;
    case Collective::Gather:
      if (!root) {
        BRAID_TRY(write(call, c.input, block, stop));
        break;
      }
      copy(out + size_t(rank_) * block, c.input, block);
      for (int r = 0; r < nranks_; ++r) {
        if (r == rank_) continue;
        BRAID_TRY(wait_written(call, r, stop));
        std::memcpy(out + size_t(r) * block, slot(r, call)->data, block);
      }
      break;
    case Collective::Reduce: {
      // The root's input goes on the board too: folding from slots alone
      // keeps an in-place root correct whatever its rank.
      BRAID_TRY(write(call, c.input, block, stop));
      if (!root) break;
      for (int r = 0; r < nranks_; ++r) BRAID_TRY(wait_written(call, r, stop));
      auto data = [&](int r) { return slot(r, call)->data; };
      if (nranks_ == 1) std::memcpy(out, data(0), block);
      else reduce(out, data(0), data(1), c.count, c.type, c.op);
      for (int r = 2; r < nranks_; ++r) reduce(out, out, data(r), c.count, c.type, c.op);
      if (c.divisor > 0) divide_by(out, c.count, c.type, c.divisor);
      break;
    }
    default:
      return BRAID_ERROR(ncclInternalError, "eager has no {}", to_string(c.collective));
  }
  area(rank_)->done.store(call, std::memory_order_release);
  ring_all();  // a writer may be waiting for this rank to finish `call`
  return Status::ok();
}

}  // namespace braid

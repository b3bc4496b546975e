#include "src/exec/host/oneshot.h"

#include "src/plan/host_path.h"

#include <cstring>

#include "braid/chunking.h"
#include "src/ops/datatype.h"
#include "src/ops/host_kernels.h"

namespace braid {

// A slot's first 16 bytes: the number of the call whose input it holds.
struct OneShotBoard::Slot {
  std::atomic<uint64_t> call;
  uint64_t pad;
  char data[1];  // really max_bytes_
};

namespace {

constexpr size_t kDataOffset = offsetof(OneShotBoard::Slot, data);

}  // namespace

OneShotBoard::~OneShotBoard() = default;

Status OneShotBoard::open(BoardSetup setup, size_t max_bytes, std::unique_ptr<OneShotBoard>* out) {
  std::unique_ptr<OneShotBoard> b(new OneShotBoard());
  b->rank_ = setup.rank;
  b->nranks_ = setup.nranks;
  b->max_bytes_ = max_bytes;
  b->slot_stride_ = round_up_to_line(kDataOffset + max_bytes);
  // Per rank: its doorbell word, then its two slots.
  b->rank_stride_ = sizeof(DoorbellWord) + 2 * b->slot_stride_;
  b->polls_ = idle_polls_for(setup.nranks);
  // A fresh object is zero-filled: every slot says call 0, which is never used.
  BRAID_TRY(b->map_.open(std::move(setup), kBoardHeaderBytes + size_t(b->nranks_) * b->rank_stride_, nullptr));
  *out = std::move(b);
  return Status::ok();
}

DoorbellWord* OneShotBoard::bell(int rank) const {
  return reinterpret_cast<DoorbellWord*>(static_cast<char*>(map_.base()) + kBoardHeaderBytes +
                                         size_t(rank) * rank_stride_);
}

OneShotBoard::Slot* OneShotBoard::slot(int rank, uint64_t call) const {
  return reinterpret_cast<Slot*>(reinterpret_cast<char*>(bell(rank)) + sizeof(DoorbellWord) + (call & 1) * slot_stride_);
}

Status OneShotBoard::run(uint64_t call, const BoardCall& c, const std::atomic<bool>* stop) {
  const size_t es = datatype_size(c.type), block = c.count * es;
  const uint64_t payload = board_payload_bytes(c.collective, c.count, c.type, nranks_);
  if (payload > max_bytes_)
    return BRAID_ERROR(ncclInternalError, "one-shot {} of {} bytes on a {}-byte board", to_string(c.collective),
                       payload, max_bytes_);
  Slot* mine = slot(rank_, call);
  std::memcpy(mine->data, c.input, payload);
  mine->call.store(call, std::memory_order_release);
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    ring(bell(r));
  }
  BRAID_TRY(wait_for_peers(call, stop));
  // The output comes from the board alone (in place, `output` holds this rank's input).
  auto data = [&](int r, size_t block_index) { return slot(r, call)->data + block_index * block; };
  auto fold = [&](size_t block_index, void* out) {
    reduce(out, data(0, block_index), data(1, block_index), c.count, c.type, c.op);
    for (int r = 2; r < nranks_; ++r) reduce(out, out, data(r, block_index), c.count, c.type, c.op);
    if (c.divisor > 0) divide_by(out, c.count, c.type, c.divisor);
  };
  char* out = static_cast<char*>(c.output);
  switch (c.collective) {
    case Collective::AllReduce:
      fold(0, out);
      break;
    case Collective::ReduceScatter:
      fold(size_t(rank_), out);
      break;
    case Collective::AllGather:
      for (int k = 0; k < nranks_; ++k) std::memcpy(out + k * block, data(k, 0), block);
      break;
    case Collective::AlltoAll:
      for (int k = 0; k < nranks_; ++k) std::memcpy(out + k * block, data(k, size_t(rank_)), block);
      break;
    default:
      return BRAID_ERROR(ncclInternalError, "one-shot has no {}", to_string(c.collective));
  }
  return Status::ok();
}

Status OneShotBoard::wait_for_peers(uint64_t call, const std::atomic<bool>* stop) {
  BoardWaiter waiter{.map = &map_,
                     .bell = bell(rank_),
                     .polls = polls_,
                     .stop = stop,
                     .what = "a one-shot collective"};
  int next = rank_ == 0 ? 1 : 0;  // the first rank not yet seen
  return waiter.wait([&] {
    while (next < nranks_ && (next == rank_ || slot(next, call)->call.load(std::memory_order_acquire) == call)) ++next;
    return next < nranks_ ? next : -1;
  });
}

}  // namespace braid

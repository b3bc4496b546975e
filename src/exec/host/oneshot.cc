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

std::unique_ptr<OneShotBoard> OneShotBoard::make(BoardSetup setup, size_t max_bytes) {
  std::unique_ptr<OneShotBoard> b(new OneShotBoard());
  b->rank_ = setup.rank;
  b->nranks_ = setup.nranks;
  b->max_bytes_ = max_bytes;
  b->slot_stride_ = round_up_to_line(kDataOffset + max_bytes);
  // Per rank: its doorbell word, then its two slots.
  b->rank_stride_ = sizeof(DoorbellWord) + 2 * b->slot_stride_;
  b->polls_ = idle_polls_for(setup.nranks);
  b->map_.begin_open(std::move(setup));
  return b;
}

// A fresh object is zero-filled: every slot says call 0, which is never used.
Status OneShotBoard::step_open(int* awaited) {
  const char* waiting = nullptr;
  BRAID_TRY(map_.try_open(kBoardHeaderBytes + size_t(nranks_) * rank_stride_, nullptr, &waiting));
  *awaited = waiting ? 0 : -1;  // rank 0 makes it
  return Status::ok();
}

DoorbellWord* OneShotBoard::bell(int rank) const {
  return reinterpret_cast<DoorbellWord*>(static_cast<char*>(map_.base()) + kBoardHeaderBytes +
                                         size_t(rank) * rank_stride_);
}

DoorbellWord* OneShotBoard::my_bell() const { return bell(rank_); }

OneShotBoard::Slot* OneShotBoard::slot(int rank, uint64_t call) const {
  return reinterpret_cast<Slot*>(reinterpret_cast<char*>(bell(rank)) + sizeof(DoorbellWord) + (call & 1) * slot_stride_);
}

Status OneShotBoard::admits(const BoardCall& c) const {
  return board_admits(c, nranks_, max_bytes_, oneshot_serves, "one-shot");
}

// Phases: 0, publish this rank's input; 1, wait for every peer's; then
// build the output from the board alone (in place, `output` holds this
// rank's input).
int OneShotBoard::advance(BoardProgress* p) {
  const BoardCall& c = p->c;
  const uint64_t call = p->call;
  if (p->phase == 0) {
    Slot* mine = slot(rank_, call);
    std::memcpy(mine->data, c.input, board_payload_bytes(c.collective, c.count, c.type, nranks_));
    mine->call.store(call, std::memory_order_release);
    for (int r = 0; r < nranks_; ++r)
      if (r != rank_) ring(bell(r));
    p->phase = 1;
    p->next = 0;
  }
  while (p->next < nranks_ &&
         (p->next == rank_ || slot(p->next, call)->call.load(std::memory_order_acquire) == call))
    ++p->next;
  if (p->next < nranks_) return p->next;
  const size_t block = c.count * datatype_size(c.type);
  auto data = [&](int r, size_t block_index) { return slot(r, call)->data + block_index * block; };
  auto fold = [&](size_t block_index, void* out) {
    reduce(out, data(0, block_index), data(1, block_index), c.count, c.type, c.op);
    for (int r = 2; r < nranks_; ++r) reduce(out, out, data(r, block_index), c.count, c.type, c.op);
    if (c.divisor > 0) divide_by(out, c.count, c.type, c.divisor);
  };
  char* out = static_cast<char*>(c.output);
  switch (c.collective) {
    case Collective::AllReduce: fold(0, out); break;
    case Collective::ReduceScatter: fold(size_t(rank_), out); break;
    case Collective::AllGather:
      for (int k = 0; k < nranks_; ++k) std::memcpy(out + k * block, data(k, 0), block);
      break;
    default:  // AlltoAll
      for (int k = 0; k < nranks_; ++k) std::memcpy(out + k * block, data(k, size_t(rank_)), block);
      break;
  }
  return -1;
}

Status OneShotBoard::run(uint64_t call, const BoardCall& c, const std::atomic<bool>* stop) {
  return run_as(*this, call, c, stop);
}

}  // namespace braid

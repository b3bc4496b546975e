#include "src/exec/host/eager.h"

#include "src/plan/host_path.h"

#include <algorithm>
#include <cstring>

#include "braid/chunking.h"
#include "src/ops/datatype.h"
#include "src/ops/host_kernels.h"

namespace braid {

// A header: the number of the call whose payload it announces, and where
// that payload is, in its own line when it is small.
struct EagerBoard::Header {
  std::atomic<uint64_t> call;
  uint64_t offset;  // in the writer's ring
  char inline_data[kEagerInlineBytes];
};
static_assert(sizeof(EagerBoard::Header) == 64, "a header is one cache line");

// What each rank owns on the board: its doorbell, its progress, its headers,
// then its ring.
struct EagerBoard::RankArea {
  DoorbellWord bell;
  alignas(64) std::atomic<uint64_t> done;  // the last call this rank finished
  std::atomic<uint32_t> mapped;            // 1 once this rank has the board mapped
  alignas(64) Header headers[1];           // really kEagerDepth, then the ring
};

namespace {

constexpr size_t kRingOffset = offsetof(EagerBoard::RankArea, headers) + kEagerDepth * sizeof(EagerBoard::Header);

}  // namespace

EagerBoard::~EagerBoard() = default;

std::unique_ptr<EagerBoard> EagerBoard::make(BoardSetup setup, size_t max_bytes) {
  std::unique_ptr<EagerBoard> b(new EagerBoard());
  b->rank_ = setup.rank;
  b->nranks_ = setup.nranks;
  b->max_bytes_ = max_bytes;
  const size_t largest = round_up_to_line(std::max<size_t>(max_bytes, 1));
  const size_t share = kEagerBoardBytes / size_t(b->nranks_) / 64 * 64;
  b->ring_bytes_ = std::max(2 * largest, std::min(share, kEagerDepth * largest));
  b->rank_stride_ = kRingOffset + b->ring_bytes_;
  b->polls_ = idle_polls_for(setup.nranks);
  b->map_.begin_open(std::move(setup));
  return b;
}

// A fresh object is zero-filled: no header holds a call, no rank is done
// with one.  The first call waits until every rank has mapped it, so a root
// that returns and destroys its communicator cannot take the board away
// from ranks yet to attach.
Status EagerBoard::step_open(int* awaited) {
  if (!map_.is_open()) {
    const char* waiting = nullptr;
    BRAID_TRY(map_.try_open(kBoardHeaderBytes + size_t(nranks_) * rank_stride_, nullptr, &waiting));
    if (waiting) {
      *awaited = 0;  // rank 0 makes it
      return Status::ok();
    }
    area(rank_)->mapped.store(1, std::memory_order_release);
    ring_all();
  }
  while (next_mapped_ < nranks_ && area(next_mapped_)->mapped.load(std::memory_order_acquire) == 1) ++next_mapped_;
  *awaited = next_mapped_ < nranks_ ? next_mapped_ : -1;
  return Status::ok();
}

EagerBoard::RankArea* EagerBoard::area(int rank) const {
  return reinterpret_cast<RankArea*>(static_cast<char*>(map_.base()) + kBoardHeaderBytes + size_t(rank) * rank_stride_);
}

EagerBoard::Header* EagerBoard::header(int rank, uint64_t call) const {
  return &area(rank)->headers[call % kEagerDepth];
}

char* EagerBoard::data_ring(int rank) const { return reinterpret_cast<char*>(area(rank)) + kRingOffset; }

DoorbellWord* EagerBoard::my_bell() const { return &area(rank_)->bell; }

void EagerBoard::ring_all() {
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_) ring(&area(r)->bell);
}

// A payload takes whole lines from the head of the ring, or from its start
// where it would not fit before the end (a reader finds it by the header's
// offset, so the skipped bytes cost nothing).  Those lines last held the
// payloads that began less than a ring before this one ends.
uint64_t EagerBoard::place(uint64_t call, size_t bytes, uint64_t* freed_by) const {
  *freed_by = call > uint64_t(kEagerDepth) ? call - uint64_t(kEagerDepth) : 0;  // the header's last call
  if (bytes <= kEagerInlineBytes) return head_;
  const uint64_t lines = round_up_to_line(bytes);
  uint64_t start = head_;
  if (start % ring_bytes_ + lines > ring_bytes_) start += ring_bytes_ - start % ring_bytes_;
  for (size_t i = 0; i < live_; ++i) {
    const Written& w = written_[(oldest_ + i) % kEagerDepth];
    if (w.start + ring_bytes_ >= start + lines) break;
    *freed_by = std::max(*freed_by, w.call);
  }
  return start;
}

// The rank that has yet to finish call `freed_by`, or -1 once every rank has
// (whoever read what it held has then read it).  The peers' `done` is read
// only when what was last seen of it is too old, and each peer's only until
// it is past: each read pulls a line the peer keeps writing.
int EagerBoard::still_reading(BoardProgress* p, uint64_t freed_by) {
  if (peers_done_ >= freed_by) return -1;
  for (; p->next < nranks_; ++p->next) {
    if (p->next == rank_) continue;
    const uint64_t done = area(p->next)->done.load(std::memory_order_acquire);
    if (done < freed_by) return p->next;
    p->least_done = std::min(p->least_done, done);
  }
  peers_done_ = p->least_done;
  return -1;
}

void EagerBoard::publish(uint64_t call, uint64_t start, const void* data, size_t bytes) {
  while (live_ > 0 && written_[oldest_].call <= peers_done_) {  // read by every peer
    oldest_ = (oldest_ + 1) % kEagerDepth;
    --live_;
  }
  Header* h = header(rank_, call);
  if (bytes <= kEagerInlineBytes) {
    std::memcpy(h->inline_data, data, bytes);
  } else {
    h->offset = start % ring_bytes_;
    std::memcpy(data_ring(rank_) + h->offset, data, bytes);
    written_[(oldest_ + live_) % kEagerDepth] = {start, call};  // live_ < kEagerDepth: this header was free
    ++live_;
    head_ = start + round_up_to_line(bytes);
  }
  h->call.store(call, std::memory_order_release);
  ring_all();
}

bool EagerBoard::written(uint64_t call, int writer) const {
  return header(writer, call)->call.load(std::memory_order_acquire) == call;
}

const char* EagerBoard::payload(int writer, uint64_t call, size_t bytes) const {
  const Header* h = header(writer, call);
  return bytes <= kEagerInlineBytes ? h->inline_data : data_ring(writer) + h->offset;
}

Status EagerBoard::admits(const BoardCall& c) const {
  return board_admits(c, nranks_, max_bytes_, eager_serves, "eager");
}

// Phases: 0, this rank writes its part (if it gives any) once its header
// and bytes are free; 1, it reads what it takes (if any; a Gather root, 2
// once its own block is in place); then it is done with the call.
int EagerBoard::advance(BoardProgress* p) {
  const BoardCall& c = p->c;
  const uint64_t call = p->call;
  const size_t block = c.count * datatype_size(c.type);
  const bool root = rank_ == c.root;
  const bool writes = c.collective == Collective::Reduce || (c.collective == Collective::Gather) != root;
  const size_t bytes = board_payload_bytes(c.collective, c.count, c.type, nranks_);  // what each writer puts
  if (p->phase == 0) {
    if (writes) {
      uint64_t freed_by = 0;
      const uint64_t start = place(call, bytes, &freed_by);
      if (const int busy = still_reading(p, freed_by); busy >= 0) return busy;
      publish(call, start, c.input, bytes);
    }
    p->phase = 1;
    p->next = 0;
  }
  char* out = static_cast<char*>(c.output);
  auto copy = [](void* dst, const void* src, size_t n) {
    if (dst != src) std::memmove(dst, src, n);  // in place, root's own block may be the same bytes
  };
  // Waits for every writer this rank reads from, in rank order (Gather
  // copies each block as it comes; Reduce folds once all have).
  auto await_writers = [&](bool copy_blocks) {
    for (; p->next < nranks_; ++p->next) {
      const int r = p->next;
      if (r == rank_ && c.collective == Collective::Gather) continue;
      if (!written(call, r)) return r;
      if (copy_blocks) std::memcpy(out + size_t(r) * block, payload(r, call, bytes), block);
    }
    return -1;
  };
  switch (c.collective) {
    case Collective::Broadcast: case Collective::Scatter: {
      const size_t offset = c.collective == Collective::Scatter ? size_t(rank_) * block : 0;
      if (root) {
        copy(out, static_cast<const char*>(c.input) + offset, block);
      } else {
        if (!written(call, c.root)) return c.root;
        std::memcpy(out, payload(c.root, call, bytes) + offset, block);
      }
      break;
    }
    case Collective::Gather:
      if (!root) break;
      if (p->phase == 1) {  // its own block, once
        copy(out + size_t(rank_) * block, c.input, block);
        p->phase = 2;
      }
      if (const int r = await_writers(true); r >= 0) return r;
      break;
    default: {  // Reduce: the root's input is on the board too, so folding
                // from slots alone keeps an in-place root correct whatever its rank.
      if (!root) break;
      if (const int r = await_writers(false); r >= 0) return r;
      auto data = [&](int r) { return payload(r, call, bytes); };
      if (nranks_ == 1) std::memcpy(out, data(0), block);
      else reduce(out, data(0), data(1), c.count, c.type, c.op);
      for (int r = 2; r < nranks_; ++r) reduce(out, out, data(r), c.count, c.type, c.op);
      if (c.divisor > 0) divide_by(out, c.count, c.type, c.divisor);
      break;
    }
  }
  area(rank_)->done.store(call, std::memory_order_release);
  ring_all();  // a writer may be waiting for this rank to finish `call`
  return -1;
}

Status EagerBoard::run(uint64_t call, const BoardCall& c, const std::atomic<bool>* stop) {
  return run_as(*this, call, c, stop);
}

}  // namespace braid

#include "src/exec/host/oneshot.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "src/core/datatype.h"
#include "src/core/env.h"
#include "src/transport/doorbell.h"

namespace braid {

// A slot's first 16 bytes: the number of the call whose input it holds.
struct OneShotBoard::Slot {
  std::atomic<uint64_t> call;
  uint64_t pad;
  char data[1];  // really max_bytes_
};

namespace {

constexpr size_t kDataOffset = offsetof(OneShotBoard::Slot, data);
constexpr size_t kHeaderBytes = 64;  // BoardHeader, padded to a line
constexpr uint32_t kClockCheckEvery = 64;  // idle polls between looks at the clock

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

}  // namespace

OneShotBoard::~OneShotBoard() = default;

Status OneShotBoard::open(BoardSetup setup, size_t max_bytes, std::unique_ptr<OneShotBoard>* out) {
  std::unique_ptr<OneShotBoard> b(new OneShotBoard());
  b->rank_ = setup.rank;
  b->nranks_ = setup.nranks;
  b->max_bytes_ = max_bytes;
  b->slot_stride_ = round_up(kDataOffset + max_bytes, 64);
  // Per rank: its doorbell word, then its two slots.
  b->rank_stride_ = sizeof(DoorbellWord) + 2 * b->slot_stride_;
  // As the shm transport: no spinning when ranks outnumber cores; otherwise
  // spin long, since yielding hands the core to other work for a time slice.
  const bool oversubscribed = host_oversubscribed(setup.nranks);
  b->spin_polls_ = oversubscribed ? 0 : 1u << 20;
  b->yield_polls_ = oversubscribed ? 100 : 256;
  // A fresh object is zero-filled: every slot says call 0, which is never used.
  BRAID_TRY(b->map_.open(std::move(setup), kHeaderBytes + size_t(b->nranks_) * b->rank_stride_, nullptr));
  *out = std::move(b);
  return Status::ok();
}

OneShotBoard::Slot* OneShotBoard::slot(int rank, uint64_t call) const {
  char* base = static_cast<char*>(map_.base()) + kHeaderBytes + size_t(rank) * rank_stride_;
  return reinterpret_cast<Slot*>(base + sizeof(DoorbellWord) + (call & 1) * slot_stride_);
}

Status OneShotBoard::allreduce(uint64_t call, const void* input, void* output, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, int divisor, const std::atomic<bool>* stop) {
  const size_t es = datatype_size(type), bytes = count * es;
  if (bytes > max_bytes_)
    return BRAID_ERROR(ncclInternalError, "one-shot AllReduce of {} bytes on a {}-byte board", bytes, max_bytes_);
  Slot* mine = slot(rank_, call);
  std::memcpy(mine->data, input, bytes);
  mine->call.store(call, std::memory_order_release);
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    ring(reinterpret_cast<DoorbellWord*>(static_cast<char*>(map_.base()) + kHeaderBytes + size_t(r) * rank_stride_));
  }
  BRAID_TRY(wait_for_peers(call, stop));
  // All inputs from the board (in place, `output` is this rank's input).
  reduce(output, slot(0, call)->data, slot(1, call)->data, count, type, op);
  for (int r = 2; r < nranks_; ++r) reduce(output, output, slot(r, call)->data, count, type, op);
  if (divisor > 0) divide_by(output, count, type, divisor);
  return Status::ok();
}

Status OneShotBoard::wait_for_peers(uint64_t call, const std::atomic<bool>* stop) {
  auto* bell_word =
      reinterpret_cast<DoorbellWord*>(static_cast<char*>(map_.base()) + kHeaderBytes + size_t(rank_) * rank_stride_);
  Doorbell bell(bell_word, spin_polls_, yield_polls_);
  int next = rank_ == 0 ? 1 : 0;  // the first rank not yet seen
  uint32_t idle = 0;
  std::chrono::steady_clock::time_point started{}, last_liveness{};
  int64_t timeout_ms = -1;
  auto arrived = [&] {
    while (next < nranks_ && (next == rank_ || slot(next, call)->call.load(std::memory_order_acquire) == call)) ++next;
    return next == nranks_;
  };
  while (!arrived()) {
    if (stop && stop->load(std::memory_order_relaxed))
      return BRAID_ERROR(ncclInvalidUsage, "communicator aborted during a one-shot AllReduce");
    ++idle;
    if (idle <= bell.spin_polls()) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (idle <= bell.idle_polls()) {
      sched_yield();
    } else {
      // Announce the sleep, look once more, then sleep until rung (doorbell.h).
      uint32_t seen = bell.arm();
      if (arrived()) {
        bell.disarm();
        break;
      }
      bell.sleep(seen);
    }
    if (idle % kClockCheckEvery != 0 && idle <= bell.idle_polls()) continue;
    auto now = std::chrono::steady_clock::now();
    if (timeout_ms < 0) {
      timeout_ms = env_int("BRAID_TIMEOUT") * 1000;
      started = last_liveness = now;
    }
    if (now - last_liveness > std::chrono::milliseconds(50)) {
      last_liveness = now;
      int dead = map_.dead_rank({next});
      if (dead >= 0)
        return BRAID_ERROR(ncclRemoteError, "rank {} (pid {}) exited during a one-shot AllReduce", dead,
                           map_.setup().pids[dead]);
    }
    if (std::chrono::duration_cast<std::chrono::milliseconds>(now - started).count() >= timeout_ms)
      return BRAID_ERROR(ncclRemoteError, "no progress for {} ms (BRAID_TIMEOUT) in a one-shot AllReduce: rank {} "
                         "never published call {}", timeout_ms, next, call);
  }
  return Status::ok();
}

}  // namespace braid

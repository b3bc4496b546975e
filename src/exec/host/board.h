// What the one-shot (oneshot.h) and eager (eager.h) boards share: the call
// they run, their size limit and layout, and how they wait.
//
// Waiting follows the executor (src/exec/host/engine.cc) and its policy
// (idle_polls_for): spin, yield,
// then sleep on this rank's doorbell until a peer rings it
// (src/transport/doorbell.h).  An abort, a dead awaited rank and
// BRAID_TIMEOUT end the wait with an error.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "braid/schedule.h"
#include "nccl.h"
#include "src/base/status.h"
#include "src/transport/doorbell.h"
#include "src/transport/shm_board.h"

namespace braid {

constexpr size_t kBoardHeaderBytes = 64;  // BoardHeader, padded to a line

inline size_t round_up_to_line(size_t x) { return (x + 63) / 64 * 64; }

// One rank's part of a collective run on a board.
struct BoardCall {
  Collective collective = Collective::AllReduce;
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;  // NCCL's count (per block for multi-block buffers)
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;  // Sum, Prod, Max or Min
  int divisor = 0;           // > 0: divide the reduction by it (Avg)
  int root = 0;              // rooted collectives (eager)
};

struct BoardWaiter {
  const BoardMap* map = nullptr;
  DoorbellWord* bell = nullptr;  // this rank's
  IdlePolls polls;  // idle_polls_for() the board's ranks
  const std::atomic<bool>* stop = nullptr;  // abort, revoke
  const char* what = "";                    // for messages: "a one-shot collective"

  // Returns once `missing()` is -1; until then it names the rank awaited.
  template <class Missing>
  Status wait(Missing missing) const;

 private:
  // The slow path, every so many idle polls: abort, liveness, timeout.
  struct Clock {
    std::chrono::steady_clock::time_point started{}, last_liveness{};
    int64_t timeout_ms = -1;
  };
  Status check(int awaited, Clock* clock) const;
  static constexpr uint32_t kClockCheckEvery = 64;  // idle polls between looks at the clock
};

template <class Missing>
Status BoardWaiter::wait(Missing missing) const {
  FutexDoorbell doorbell(bell, polls);
  Clock clock;
  uint32_t idle = 0;
  for (int awaited = missing(); awaited >= 0; awaited = missing()) {
    if (stop && stop->load(std::memory_order_relaxed))
      return BRAID_ERROR(ncclInvalidUsage, "communicator aborted during {}", what);
    ++idle;
    if (idle <= doorbell.spin_polls()) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (idle <= doorbell.idle_polls()) {
      sched_yield();
    } else {
      // Announce the sleep, look once more, then sleep until rung (doorbell.h).
      uint32_t seen = doorbell.arm();
      if (missing() < 0) {
        doorbell.disarm();
        break;
      }
      doorbell.sleep(seen);
    }
    if (idle % kClockCheckEvery != 0 && idle <= doorbell.idle_polls()) continue;
    Status alive = check(awaited, &clock);
    // A rank that posted and then exited (the last to arrive finishes first
    // and may leave at once) has left its part on the board: fail only if
    // the awaited rank is still missing once it is known to be gone.
    if (!alive.is_ok() && missing() == awaited) return alive;
  }
  return Status::ok();
}

}  // namespace braid

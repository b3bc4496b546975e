// Waiting on a shared board (one-shot and eager collectives) with the
// executor's policy (src/exec/host/engine.cc): spin, yield, then sleep on
// this rank's doorbell until a peer rings it (src/transport/doorbell.h).
// An abort, a dead awaited rank and BRAID_TIMEOUT end the wait with an error.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "src/core/status.h"
#include "src/transport/doorbell.h"
#include "src/transport/shm_board.h"

namespace braid {

struct BoardWaiter {
  const BoardMap* map = nullptr;
  DoorbellWord* bell = nullptr;  // this rank's
  uint32_t spin_polls = 0, yield_polls = 0;
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
  Doorbell doorbell(bell, spin_polls, yield_polls);
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
    BRAID_TRY(check(awaited, &clock));
  }
  return Status::ok();
}

}  // namespace braid

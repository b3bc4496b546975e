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

// ncclInternalError unless a board of `max_bytes` for `nranks` that serves
// the collectives `serves` names (the planner's rule) can run `c`.
Status board_admits(const BoardCall& c, int nranks, size_t max_bytes, bool (*serves)(Collective), const char* board);

// An error if `rank` of the board's ranks has exited during `what`.
Status awaited_alive(const BoardMap& map, int rank, const char* what);

// One rank's progress through one call on a board: what advance() has done
// so far, so that a call can be advanced a step at a time.
struct BoardProgress {
  uint64_t call = 0;  // the call's number on its board: 1, 2, ... alike on every rank
  BoardCall c;
  int phase = 0;  // the board's own (0: not started)
  int next = 0;   // the first rank not yet seen in the current wait
  uint64_t least_done = UINT64_MAX;  // the eager board's: see EagerBoard::still_reading
};

// What the one-shot and eager boards offer the backend.  Each is opened on
// its communicator's first call that needs it, and a call runs on it either
// blocking (run(): a call made outside a group) or a step at a time
// (advance(), as the executor runs it beside the group's other calls, the
// same call on every rank whether it grouped the call or not).
class Board {
 public:
  virtual ~Board() = default;
  // Advances the opening without waiting: *awaited is -1 once this rank may
  // run calls on the board, else the rank it waits for.
  Status advance_open(int* awaited) {
    *awaited = -1;
    if (open_) return Status::ok();
    BRAID_TRY(step_open(awaited));
    open_ = *awaited < 0;
    return Status::ok();
  }
  // Advances a call without waiting: -1 once this rank's part is done,
  // else the rank it waits for.  The board must be open.
  virtual int advance(BoardProgress* p) = 0;
  // Whether `c` fits this board (an error to return if not).
  virtual Status admits(const BoardCall& c) const = 0;
  virtual const char* what() const = 0;  // "a one-shot collective"
  // Opens and runs `call` to its end, waiting (BoardWaiter).
  virtual Status run(uint64_t call, const BoardCall& c, const std::atomic<bool>* stop) = 0;
  // Waits until the board is open.
  Status finish_open(const std::atomic<bool>* stop);
  // An error if `rank` (one awaited) has exited.
  Status check_alive(int rank) const { return awaited_alive(map_, rank, what()); }
  size_t bytes() const { return map_.bytes(); }  // the board's mapping
  static constexpr uint32_t kLivenessCheckEvery = 1 << 12;  // idle polls between check_alive calls

 protected:
  virtual Status step_open(int* awaited) = 0;  // advance_open until it is open
  virtual DoorbellWord* my_bell() const = 0;
  // run() for each board, in its own file: there `self.advance` is a direct
  // call the compiler can inline into the wait loop, as it was before
  // boards also ran as tasks (a call of a few bytes takes 0.1-0.3 us here).
  template <class Self>
  Status run_as(Self& self, uint64_t call, const BoardCall& c, const std::atomic<bool>* stop);
  BoardMap map_;
  IdlePolls polls_;

 private:
  bool open_ = false;
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

template <class Self>
Status Board::run_as(Self& self, uint64_t call, const BoardCall& c, const std::atomic<bool>* stop) {
  BRAID_TRY(self.admits(c));
  if (!open_) BRAID_TRY(finish_open(stop));
  BoardProgress p{.call = call, .c = c};
  BoardWaiter waiter{.map = &map_, .bell = my_bell(), .polls = polls_, .stop = stop, .what = self.what()};
  return waiter.wait([&] { return self.advance(&p); });
}

}  // namespace braid

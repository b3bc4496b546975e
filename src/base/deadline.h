// Deadline and Waiter: every wait in braid is bounded.
//
// A Deadline is a point on the steady clock (BRAID_TIMEOUT from now by
// default).  A Waiter is the back-off used while polling: spin briefly, then
// yield, then sleep in short naps, so that ranks outnumbering cores still make
// progress without burning the core a peer needs.
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace braid {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  static Deadline after(std::chrono::milliseconds ms) { return Deadline(Clock::now() + ms); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  bool expired() const { return at_ != Clock::time_point::max() && Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }
  // Milliseconds left, clamped to [0, INT32_MAX], for poll().
  int remaining_ms() const {
    if (at_ == Clock::time_point::max()) return INT32_MAX;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return left < 0 ? 0 : left > INT32_MAX ? INT32_MAX : int(left);
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

class Waiter {
 public:
  Waiter() = default;
  // `spins`: pauses before the first yield (the default suits a thread that
  // has a core to itself).
  explicit Waiter(uint32_t spins) : spins_(spins) {}
  // Call when a poll made no progress.
  void pause() {
    ++idle_;
    if (idle_ < spins_) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (idle_ < spins_ + kYields) {
      sched_yield();
    } else {
      timespec nap{0, 50 * 1000};  // 50 us
      nanosleep(&nap, nullptr);
    }
  }
  // Call when a poll made progress.
  void reset() { idle_ = 0; }

  static constexpr uint32_t kDefaultSpins = 1000;

 private:
  static constexpr uint32_t kYields = 20000;  // ~5 ms: a yield is cheap when nobody else wants the core
  uint32_t spins_ = kDefaultSpins;
  uint32_t idle_ = 0;
};

}  // namespace braid

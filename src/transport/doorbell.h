// Doorbell: how a rank with nothing to do sleeps until a peer gives it work,
// without a syscall on the path where nobody sleeps.
//
// Every rank of a shared-memory communicator has one DoorbellWord in a
// segment all local ranks map.  A rank that has polled every pipe and found
// nothing arms its bell (sleepers += 1), reads the sequence number, polls
// once more, and only then sleeps in futex(FUTEX_WAIT) on that number.  A
// peer that publishes a fragment (commit) or frees a slot (release) rings
// the bell of the rank on the other end: a fence and one load when nobody
// sleeps, a sequence bump and futex(FUTEX_WAKE) when somebody does.
//
// Why it is race-free: the ringer stores its data, then (seq_cst fence)
// loads `sleepers`; the sleeper increments `sleepers` (seq_cst), then polls.
// One of them sees the other: either the ringer sees the sleeper and bumps
// `seq` (so a futex wait on the old value returns at once), or the
// sleeper's last poll sees the data and it never sleeps.  Sleeps are still
// bounded (kNapNs) so timeouts and aborts are noticed.
//
// This is what makes oversubscribed ranks (more ranks than cores) fast: the
// waiting rank hands its core to the peer it waits for, and is woken the
// moment that peer has produced, instead of spinning out its time slice or
// napping a fixed 50 us.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "src/base/host_identity.h"

namespace braid {

struct alignas(64) DoorbellWord {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleepers;
};

// Wakes the owner of `w` if it sleeps.  Call after publishing (release store).
inline void ring(DoorbellWord* w) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (w->sleepers.load(std::memory_order_relaxed) == 0) return;
  w->seq.fetch_add(1, std::memory_order_seq_cst);
  // Shared (not FUTEX_PRIVATE): the word lives in memory mapped by other processes.
  syscall(SYS_futex, &w->seq, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}


// Idle poll rounds a waiter spends spinning (pause), then yielding, before
// it sleeps.
struct IdlePolls {
  uint32_t spin = 0, yield = 0;
};

// The policy for `local_ranks` ranks on this host.  Ranks outnumbering
// cores: a rank that spins only delays the peer it waits for, so it yields
// at once, and sleeps after ~100 yields (values measured with 4 ranks on 2
// cores, see engine.cc).  Otherwise spin for long (~2^20 polls, tens of ms)
// before yielding or sleeping: on a machine loaded by other work, a rank
// that yields or sleeps gives its core to that work for a whole time slice,
// and a small collective then takes time slices instead of a cache-line
// hand-over (measured with 2 ranks on 2 heavily loaded cores; OpenMPI,
// which spins, kept its speed).
inline IdlePolls idle_polls_for(int local_ranks) {
  return host_oversubscribed(local_ranks) ? IdlePolls{0, 100} : IdlePolls{1u << 20, 256};
}

// The waiting side, as the executor sees it: how long to spin and yield,
// then arm, poll once more, and sleep until a peer gives it work.  A
// transport provides one (FutexDoorbell for shared memory; sockets sleep in
// poll(), src/transport/socket.cc) when every fragment it carries wakes it.
class Doorbell {
 public:
  explicit Doorbell(IdlePolls polls) : polls_(polls) {}
  virtual ~Doorbell() = default;
  IdlePolls polls() const { return polls_; }
  uint32_t spin_polls() const { return polls_.spin; }
  uint32_t idle_polls() const { return polls_.spin + polls_.yield; }

  // Announces a sleep; returns what to pass to sleep().  Poll once more
  // after this, then sleep() or disarm().
  virtual uint32_t arm() = 0;
  // Sleeps until rung (or kNapNs, or a signal); always disarms.
  virtual void sleep(uint32_t seen) = 0;
  virtual void disarm() = 0;
  // Wakes the sleeper, from another thread of this process.
  virtual void ring() = 0;
  // While armed, watch for this doorbell's events and ring `to` instead
  // (for ForwardedDoorbell); false where it cannot.
  virtual bool forward_to(Doorbell* to) {
    (void)to;
    return false;
  }

  static constexpr long kNapNs = 2 * 1000 * 1000;  // 2 ms: timeouts and aborts stay prompt

 private:
  IdlePolls polls_;
};

// Sleeps on a DoorbellWord that peers ring().
class FutexDoorbell final : public Doorbell {
 public:
  FutexDoorbell(DoorbellWord* w, IdlePolls polls) : Doorbell(polls), w_(w) {}

  uint32_t arm() override {
    w_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    return w_->seq.load(std::memory_order_seq_cst);
  }
  void sleep(uint32_t seen) override {
    timespec nap{0, kNapNs};
    syscall(SYS_futex, &w_->seq, FUTEX_WAIT, seen, &nap, nullptr, 0);
    disarm();
  }
  void disarm() override { w_->sleepers.fetch_sub(1, std::memory_order_relaxed); }
  void ring() override { braid::ring(w_); }

 private:
  DoorbellWord* w_;
};

// One sleep for two transports' traffic (peers on shared memory and on
// sockets at once): sleeps on `sleeper`, and `forwarder` rings it for its
// own events while armed.
class ForwardedDoorbell final : public Doorbell {
 public:
  ForwardedDoorbell(Doorbell* sleeper, Doorbell* forwarder)
      : Doorbell(sleeper->polls()), sleeper_(sleeper), forwarder_(forwarder) {}

  uint32_t arm() override {
    forwarder_->arm();
    return sleeper_->arm();
  }
  void sleep(uint32_t seen) override {
    sleeper_->sleep(seen);
    forwarder_->disarm();
  }
  void disarm() override {
    sleeper_->disarm();
    forwarder_->disarm();
  }
  void ring() override { sleeper_->ring(); }

 private:
  Doorbell *sleeper_, *forwarder_;
};

}  // namespace braid

// The cooperative loop behind every host collective (see task.h).
//
// Waiting: after a poll round that moved nothing, spin a little (pause),
// then poll with sched_yield a while, then sleep on the rank's doorbell
// (src/transport/doorbell.h) until a peer commits or releases a fragment.
// The doorbell tells how long each phase lasts: no pause-spinning when ranks
// outnumber cores (it only delays the peer we wait for).  Yielding before
// sleeping matters there: measured with 4 ranks on 2 cores, a small
// allreduce was several times slower with futex sleep alone (each
// hand-over pays a wake-up and a scheduler decision) than with
// yield-then-sleep, and pure spinning was slower by orders of magnitude.
// Where no doorbell exists (one thread driving several communicators, or a
// transport not set up yet), back off with Waiter instead: spin, yield,
// then nap.
//
// The timeout counts time without progress, not total time: a large
// transfer that keeps moving never times out, a dead peer does.
#include <sched.h>

#include <chrono>

#include "src/base/deadline.h"
#include "src/base/env.h"
#include "src/exec/host/task.h"
#include "src/transport/doorbell.h"

namespace braid {
namespace {

// The doorbell to sleep on: only when every queue with work left waits on
// the same one (a thread driving several communicators could miss the
// others' traffic).  Queues of one communicator share its transport's bell,
// as the AllReduce and the duration exchange of BRAID_STRAGGLER=auto do:
// without it, ranks waiting for a late one napped instead of sleeping and
// took the CPU from the ranks with work (16 ranks on 2 cores:
// perf/results/cluster_stragglar_16x1_*.txt).
Doorbell* shared_doorbell(const std::vector<TaskQueue>& queues, const size_t* head) {
  Doorbell* bell = nullptr;
  for (size_t i = 0; i < queues.size(); ++i) {
    if (head[i] == queues[i].tasks.size()) continue;
    Doorbell* mine = queues[i].tasks[head[i]]->doorbell();
    if (!mine || (bell && mine != bell)) return nullptr;
    bell = mine;
  }
  return bell;
}

// On every way out of the loop before the end, tells each unfinished task
// it is abandoned (its buffers go back to the caller).
struct AbandonUnfinished {
  std::vector<TaskQueue>& queues;
  const size_t* head;
  ~AbandonUnfinished() {
    for (size_t i = 0; i < queues.size(); ++i)
      for (size_t t = head[i]; t < queues[i].tasks.size(); ++t) queues[i].tasks[t]->abandon();
  }
};

// Disarms a doorbell on every way out of the loop.
struct Armed {
  Doorbell* bell = nullptr;
  uint32_t seen = 0;
  ~Armed() {
    if (bell) bell->disarm();
  }
};

}  // namespace

Status run_task_queues(std::vector<TaskQueue>& queues, int64_t timeout_ms) {
  // Almost always one queue: no allocation for the heads then.
  size_t inline_head[4] = {};
  std::vector<size_t> heap_head(queues.size() > 4 ? queues.size() : 0, 0);
  size_t* head = queues.size() > 4 ? heap_head.data() : inline_head;
  size_t remaining = 0;
  for (auto& q : queues) remaining += q.tasks.size();

  Waiter waiter;
  Armed armed;
  AbandonUnfinished abandon_unfinished{queues, head};
  auto last_progress = std::chrono::steady_clock::now();
  bool moved_since_check = false;
  uint32_t idle_polls = 0, idle_rounds = 0;
  while (remaining > 0) {
    bool any_progress = false;
    for (size_t i = 0; i < queues.size(); ++i) {
      TaskQueue& q = queues[i];
      if (head[i] == q.tasks.size()) continue;
      if (q.abort && q.abort->load(std::memory_order_relaxed))
        return BRAID_ERROR(ncclInvalidUsage, "communicator aborted during {}", q.tasks[head[i]]->describe());
      bool progressed = false, done = false;
      Task& task = *q.tasks[head[i]];
      Status s = task.poll(&progressed, &done);
      if (!s.is_ok()) return std::move(s).context(task.describe());
      any_progress |= progressed || done;
      if (done) {
        ++head[i];
        --remaining;
      }
    }
    if (any_progress) {
      if (armed.bell) {
        armed.bell->disarm();
        armed.bell = nullptr;
      }
      waiter.reset();
      idle_rounds = 0;
      moved_since_check = true;
      continue;
    }
    if (armed.bell) {
      // The round after arming found nothing either: sleep until rung.
      Doorbell* bell = armed.bell;
      armed.bell = nullptr;
      bell->sleep(armed.seen);
    } else if (Doorbell* bell = shared_doorbell(queues, head); bell && ++idle_rounds > bell->idle_polls()) {
      // Arm, then poll once more before sleeping (see doorbell.h for why
      // this cannot miss a wake-up).
      armed.seen = bell->arm();
      armed.bell = bell;
      continue;
    } else if (bell && idle_rounds > bell->spin_polls()) {
      sched_yield();
    } else if (bell) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      waiter.pause();
    }
    // Reading the clock costs ~20 ns; only look every few idle rounds.
    if (++idle_polls % 64 != 0) continue;
    auto now = std::chrono::steady_clock::now();
    if (moved_since_check) {
      last_progress = now;
      moved_since_check = false;
      continue;
    }
    if (timeout_ms < 0) timeout_ms = env_int("BRAID_TIMEOUT") * 1000;
    if (std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress).count() < timeout_ms) continue;
    for (size_t i = 0; i < queues.size(); ++i)
      if (head[i] < queues[i].tasks.size())
        return BRAID_ERROR(ncclRemoteError, "no progress for {} ms (BRAID_TIMEOUT) in {}: a peer is dead or stuck",
                           timeout_ms, queues[i].tasks[head[i]]->describe());
  }
  return Status::ok();
}

}  // namespace braid

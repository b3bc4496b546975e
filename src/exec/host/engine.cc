// The cooperative loop behind every host collective (see task.h).
//
// Back-off: spin, then yield, then nap (Waiter), so oversubscribed ranks
// (more ranks than cores) hand the core to the peer they wait for.  The
// timeout counts time without progress, not total time: a large transfer
// that keeps moving never times out, a dead peer does.
#include <chrono>

#include "src/core/deadline.h"
#include "src/exec/host/task.h"

namespace braid {

Status run_task_queues(std::vector<TaskQueue>& queues, int64_t timeout_ms) {
  std::vector<size_t> head(queues.size(), 0);
  size_t remaining = 0;
  for (auto& q : queues) remaining += q.tasks.size();

  Waiter waiter;
  auto last_progress = std::chrono::steady_clock::now();
  bool moved_since_check = false;
  uint32_t idle_polls = 0;
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
      waiter.reset();
      moved_since_check = true;
      continue;
    }
    waiter.pause();
    // Reading the clock costs ~20 ns; only look every few idle rounds.
    if (++idle_polls % 64 != 0) continue;
    auto now = std::chrono::steady_clock::now();
    if (moved_since_check) {
      last_progress = now;
      moved_since_check = false;
      continue;
    }
    if (std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress).count() < timeout_ms) continue;
    for (size_t i = 0; i < queues.size(); ++i)
      if (head[i] < queues[i].tasks.size())
        return BRAID_ERROR(ncclRemoteError, "no progress for {} ms (BRAID_TIMEOUT) in {}: a peer is dead or stuck",
                           timeout_ms, queues[i].tasks[head[i]]->describe());
  }
  return Status::ok();
}

}  // namespace braid

// Host execution engine: cooperative tasks driven by one thread.
//
// A Task is one unit of communication work of one communicator (a collective
// running a Schedule, or a batch of grouped send/recv).  poll() advances it as
// far as it can without blocking and says whether anything moved.  Driving
// every lane of every task from one loop keeps the host backend free of extra
// threads, and lets one thread run a group spanning several communicators
// (ncclCommInitAll users), which would deadlock if each call blocked.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "src/base/status.h"

namespace braid {

class Doorbell;

class Task {
 public:
  virtual ~Task() = default;
  // Advances without blocking.  Sets *progressed when any data moved or any
  // op completed, *done when the task is finished.
  virtual Status poll(bool* progressed, bool* done) = 0;
  // What the task is, for error messages ("allreduce ring n=4 rank 1").
  virtual std::string describe() const = 0;
  // Where to sleep when poll() finds nothing to do (see Transport::doorbell).
  virtual Doorbell* doorbell() const { return nullptr; }
  // The engine gives up on the task before it finished (abort, timeout, an
  // error elsewhere); the caller may free its buffers once this returns.
  virtual void abandon() {}
};

// One communicator's tasks, run in order (same-communicator work shares
// connections, so it must run in the same order on every rank).
struct TaskQueue {
  std::vector<std::unique_ptr<Task>> tasks;
  const std::atomic<bool>* abort = nullptr;  // the communicator's abort flag
};

// Runs every queue to completion, their heads concurrently.  Fails when a
// task fails, a queue's abort flag rises, or nothing moves for `timeout_ms`
// (-1: BRAID_TIMEOUT, read only once the queues have been idle a while, so
// a quick call pays no getenv).
Status run_task_queues(std::vector<TaskQueue>& queues, int64_t timeout_ms = -1);

}  // namespace braid

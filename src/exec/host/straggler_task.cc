#include "src/exec/host/straggler_task.h"

#include <fmt/format.h>

namespace braid {

Status StragglerAllReduceTask::poll(bool* progressed, bool* done) {
  *progressed = *done = false;
  if (!started_) {
    BRAID_TRY(a_.tracker->start_call(*a_.comm, a_.stop, a_.bytes));
    started_ = true;
    stamps_done_ = !a_.stamps;
    *progressed = true;
  }
  if (!allreduce_) {
    int straggler = -1;
    bool decided = false;
    BRAID_TRY(a_.tracker->poll_decision(&straggler, &decided));
    if (!decided) return Status::ok();
    BRAID_TRY(a_.plan(straggler, &allreduce_));
    *progressed = true;
  }
  // The exchange and the AllReduce move independently, as two queues would;
  // each counts as moving when it finishes, once.
  const std::pair<Task*, bool*> parts[] = {{a_.stamps.get(), &stamps_done_}, {allreduce_.get(), &allreduce_done_}};
  for (auto [task, finished] : parts) {
    if (*finished) continue;
    bool moved = false;
    BRAID_TRY(task->poll(&moved, finished));
    *progressed |= moved || *finished;
  }
  *done = allreduce_done_ && stamps_done_;
  if (*done && a_.stamps) a_.tracker->call_finished();
  return Status::ok();
}

std::string StragglerAllReduceTask::describe() const {
  if (allreduce_) return allreduce_->describe();
  return fmt::format("{}, {}", a_.label,
                     started_ ? "waiting for the ranks' arrivals (BRAID_STRAGGLER=eager)" : "not started");
}

void StragglerAllReduceTask::abandon() {
  if (allreduce_) allreduce_->abandon();
  if (a_.stamps) a_.stamps->abandon();
}

}  // namespace braid

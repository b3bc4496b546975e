#include "src/exec/host/board_task.h"

namespace braid {

Status BoardTask::poll(bool* progressed, bool* done) {
  int awaited = -1;
  BRAID_TRY(board_->advance_open(&awaited));
  if (awaited < 0) {
    const BoardProgress before = progress_;
    awaited = board_->advance(&progress_);
    *done = awaited < 0;
    *progressed = *done || progress_.phase != before.phase || progress_.next != before.next;
  }
  if (*progressed || *done) {
    idle_polls_ = 0;
    return Status::ok();
  }
  // Every so many idle polls, whether the awaited rank still lives (a
  // syscall): a dead one fails the call before BRAID_TIMEOUT would.
  return ++idle_polls_ % Board::kLivenessCheckEvery == 0 ? board_->check_alive(awaited) : Status::ok();
}

}  // namespace braid

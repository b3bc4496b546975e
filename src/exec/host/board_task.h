// A call on a board (board.h) run by the executor (task.h), a step at a
// time beside a group's other calls.
//
// Whether a small call runs on a board or on its schedule depends only on
// the call, never on whether the caller grouped it: ranks may group alike
// calls differently (NCCL lets one thread drive several ranks in a group
// while another rank's thread calls alone, or group a collective with
// another communicator's work), and a rank on the board and a peer on the
// schedule would never meet: the peer's output took whatever the board
// held next.  So a call made outside a group runs on the board at once
// (Board::run, waiting as boards do), and the same call inside a group runs
// here, opening the board without blocking too (a rank that waits for rank
// 0 to make it must still move the group's other calls, which rank 0 may
// need first).
#pragma once

#include <string>

#include "src/exec/host/board.h"
#include "src/exec/host/task.h"

namespace braid {

class BoardTask final : public Task {
 public:
  // Runs call number `call` of `board` (numbered alike on every rank, as
  // Board::run's calls, with which it shares the numbers).
  BoardTask(Board* board, uint64_t call, const BoardCall& c, std::string label)
      : board_(board), progress_{.call = call, .c = c}, label_(std::move(label)) {}

  Status poll(bool* progressed, bool* done) override;
  std::string describe() const override { return label_; }

 private:
  Board* board_;
  BoardProgress progress_;
  std::string label_;
  uint32_t idle_polls_ = 0;
};

}  // namespace braid

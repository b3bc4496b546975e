// BRAID_STRAGGLER=eager's arrival board: one small shared-memory segment per
// communicator (ranks on one host, n <= 64) on which the ranks agree, call by
// call, who arrived last.
//
// Each eager call uses one slot (calls reuse a few slots round robin).  A rank
// entering the call sets its bit in the slot's arrival word with one atomic
// fetch_or; the rank whose fetch_or completes n-1 arrivals publishes the one
// missing rank as the call's straggler; every rank waits for that name (the
// fast ones only for each other), and the n-th to read it resets the slot.
// A rank cannot use a slot again before its reset: to reach call k+2 it must
// have completed call k+1, which needs every rank's data for k+1, which each
// rank sends only after it is done with the board for call k+1 (and k).
//
// Setup: a BoardMap (src/transport/shm_board.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/transport/shm_board.h"

namespace braid {

class ArrivalBoard {
 public:
  // Rank 0 creates the segment; the others wait (bounded) until it is
  // ready.  setup.nranks <= 64.
  static Status open(BoardSetup setup, std::unique_ptr<ArrivalBoard>* out);
  ~ArrivalBoard();

  // The straggler of eager call number `call` (every rank numbers its eager
  // calls alike): waits until n-1 ranks have arrived.
  Status straggler_of_call(uint64_t call, int* straggler);

  // The same in two steps, for a caller that must not block (a task among
  // others of a group): arrive once, then poll until *named.  Without the
  // blocking call's deadline: the caller bounds the wait.
  void arrive(uint64_t call);
  Status poll(uint64_t call, int* straggler, bool* named);
  Status wait(uint64_t call, int* straggler);  // polls until named, bounded as straggler_of_call

  struct Layout;

 private:
  ArrivalBoard() = default;
  // The first rank of `ranks` (a bit mask) whose process is gone, or -1.
  int dead_rank(uint64_t ranks) const;

  BoardMap map_;
  Layout* board_ = nullptr;
  uint32_t polls_ = 0;  // of the call this rank waits in, between liveness checks
};

}  // namespace braid

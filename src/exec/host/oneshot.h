// One-shot collectives for small messages between the ranks of one host.
//
// Latency, not bandwidth, is what a small collective costs, and on one host
// the floor is a cache line or two crossing between cores.  A schedule run
// by the executor pays for its generality (planning, a task, fragment
// headers, slot counters) several times over that.  Here each rank copies its
// input into its own slot of a shared board, publishes it with one release
// store of the call's number (in the slot's first line, next to the first
// 48 bytes of data), rings whoever sleeps, and reads every other rank's slot
// once its number appears.  Then it builds its output from the slots alone:
//   AllReduce       fold every slot, in rank order
//   ReduceScatter   fold block `me` of every slot
//   AllGather       slot k -> output block k
//   AlltoAll        block `me` of slot k -> output block k
// Folding in rank order makes all outputs bitwise identical, and reading
// only slots makes every collective safe in place.
//
// Rooted collectives (Broadcast, Reduce, Gather, Scatter) go eager instead
// (eager.h): here every rank waits for every other on each call, a barrier
// they do not need.  Measured with 4 ranks on 2 cores, a small one-shot
// Broadcast was slower than the binomial tree (perf/results/
// compare_20261123_session5.txt, run 1 against run 2).
//
// Two slots per rank, used by odd and even calls, are enough without any
// acknowledgement: to write slot (k+2)%2 a rank must have finished call
// k+1, which needed every peer's k+1 input, which a peer publishes only after
// finishing call k, i.e. after reading everyone's slot k%2.
//
// Waiting is board.h's: spin, yield, then sleep on this rank's
// doorbell in the board; a dead peer, an abort and BRAID_TIMEOUT end it.
#pragma once

#include <atomic>
#include <memory>

#include "braid/schedule.h"
#include "nccl.h"
#include "src/base/status.h"
#include "src/exec/host/board.h"
#include "src/transport/shm_board.h"

namespace braid {

class OneShotBoard final : public Board {
 public:
  // The board for messages up to `max_bytes`, to open (rank 0 creates it)
  // on its first call.
  static std::unique_ptr<OneShotBoard> make(BoardSetup setup, size_t max_bytes);
  ~OneShotBoard() override;

  Status run(uint64_t call, const BoardCall& c, const std::atomic<bool>* stop) override;
  int advance(BoardProgress* p) override;
  Status admits(const BoardCall& c) const override;
  const char* what() const override { return "a one-shot collective"; }

  struct Slot;

 private:
  OneShotBoard() = default;
  Status step_open(int* awaited) override;
  DoorbellWord* my_bell() const override;
  DoorbellWord* bell(int rank) const;  // the first thing in each rank's part
  Slot* slot(int rank, uint64_t call) const;

  size_t max_bytes_ = 0, slot_stride_ = 0, rank_stride_ = 0;
  int rank_ = 0, nranks_ = 0;
};

}  // namespace braid

// Eager rooted collectives for small messages between the ranks of one host.
//
// Broadcast, Reduce, Gather and Scatter move data one way: from the root, or
// to it.  The side that only gives need not wait for the side that takes,
// which is MPI's eager protocol: a Broadcast root copies its buffer onto a
// shared board and returns; each other rank copies it out when it gets
// there.  With more ranks than cores this is what keeps small rooted calls
// cheap: a rank runs many calls in one time slice instead of handing the
// core over at each one (measured with 4 ranks on 2 cores, a small tree
// Broadcast was many times slower than OpenMPI's eager one: perf/results/
// compare_20261123_session6.txt, its header).
//
//   Broadcast   root writes its buffer; every other rank reads it
//   Scatter     root writes all blocks; rank r reads block r
//   Gather      every non-root writes its block; the root reads them
//   Reduce      every rank writes its input; the root folds them in rank order
//
// Each rank owns `depth` slots, used round robin by call number k.  A
// writer may fill slot k % depth once every rank has finished call
// k - depth (each publishes the last call it finished in `done`): whoever
// read that slot has then read it.  So a writer runs up to depth calls ahead
// and blocks only beyond.  The first call on a communicator waits until
// every rank has mapped the board, so a root that returns and destroys its
// communicator cannot take the board away from ranks yet to attach.
//
// Ranks never wait on one another here except writer -> reader (data) and
// reader -> writer (a free slot, depth calls later).  Neither can deadlock
// with other work: a rank in call k has finished every earlier call, and
// the waits are for calls <= k.
#pragma once

#include <atomic>
#include <memory>

#include "braid/schedule.h"
#include "nccl.h"
#include "src/base/status.h"
#include "src/exec/host/board.h"
#include "src/transport/shm_board.h"

namespace braid {

// Slots per rank (the depth): how many calls a writer may run ahead of the
// slowest reader.  As many as fit kEagerBoardBytes, within [2, 256].  With
// more ranks than cores a reader is descheduled for whole time slices, and
// a writer that may not run further ahead waits them out.  In a benchmark
// loop of small Broadcasts with 4 ranks on 2 cores each step up in depth
// (16, 64, 256) made calls clearly faster; with 2 ranks the depth makes no
// difference (perf/results/compare_20261123_session6.txt, its header, and
// compare_20261126c.txt section 3).
constexpr int kEagerMaxDepth = 256;
constexpr size_t kEagerBoardBytes = size_t(8) << 20;

class EagerBoard final : public Board {
 public:
  // The board for messages up to `max_bytes`, to open (rank 0 creates it)
  // on its first call: every rank must have it mapped before that ends.
  static std::unique_ptr<EagerBoard> make(BoardSetup setup, size_t max_bytes);
  ~EagerBoard() override;

  Status run(uint64_t call, const BoardCall& c, const std::atomic<bool>* stop) override;
  int advance(BoardProgress* p) override;
  Status admits(const BoardCall& c) const override;
  const char* what() const override { return "an eager rooted collective"; }
  int depth() const { return depth_; }

  struct Slot;
  struct RankArea;

 private:
  EagerBoard() = default;
  Status step_open(int* awaited) override;
  DoorbellWord* my_bell() const override;
  RankArea* area(int rank) const;
  Slot* slot(int rank, uint64_t call) const;
  int slot_in_use(BoardProgress* p);
  void publish(uint64_t call, const void* data, size_t bytes);
  bool written(uint64_t call, int writer) const;
  void ring_all();

  size_t max_bytes_ = 0, slot_stride_ = 0, rank_stride_ = 0;
  int rank_ = 0, nranks_ = 0, depth_ = 0;
  int next_mapped_ = 0;  // the first rank not yet seen with the board mapped
  // The least call the other ranks were last seen done with.  A writer
  // reads the peers' `done` only when this is too old to free its next
  // slot: each read pulls a line the peer keeps writing.  Reading it on
  // every call made a steady stream of 8 B Broadcasts (2 ranks, cores far
  // apart) measurably slower.
  uint64_t peers_done_ = 0;
};

}  // namespace braid

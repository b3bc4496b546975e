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
// Each rank owns `depth` headers, used round robin by call number k, and a
// ring of data bytes.  A writer puts call k's payload in its next free bytes
// of the ring (a payload of up to 48 bytes goes in the header's own cache
// line, so a tiny call is one line to read), then publishes the header
// with k and where the bytes are.  It may fill header k % depth once every
// rank has finished call k - depth, and bytes of its ring once every rank
// has finished the call that last held them (each rank publishes the last
// call it finished in `done`): whoever read them has then read them.  So a
// writer runs up to depth calls ahead, and as many bytes ahead as its ring
// holds, and blocks only beyond.  Depth does not shrink with the largest
// payload the board takes, as it did with fixed slots: with more ranks than
// cores a deep board is what makes small calls fast (depth 16 against 256
// made 8-rank 8 B-2 KB Broadcasts on 2 cores 2-3.5x slower; perf/results/
// eager_ring_20261204.txt, section 2).  The first call on a communicator
// waits until every rank has mapped the board, so a root that returns and
// destroys its communicator cannot take the board away from ranks yet to
// attach.
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

// Headers per rank (the depth): how many calls a writer may run ahead of
// the slowest reader.  With more ranks than cores a reader is descheduled
// for whole time slices, and a writer that may not run further ahead waits
// them out.  In a benchmark loop of small Broadcasts with 4 ranks on 2 cores
// each step up in depth (16, 64, 256) made calls clearly faster; with 2
// ranks the depth makes no difference (perf/results/
// compare_20261123_session6.txt, its header, and compare_20261126c.txt
// section 3).
constexpr int kEagerDepth = 256;
// The data rings of all ranks together take at most this much, and each
// at most what kEagerDepth payloads of the largest size fill; but never less
// than two of the largest payloads.
constexpr size_t kEagerBoardBytes = size_t(8) << 20;
// Payloads of up to this many bytes travel in their header's line.
constexpr size_t kEagerInlineBytes = 48;

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
  int depth() const { return kEagerDepth; }
  size_t ring_bytes() const { return ring_bytes_; }

  struct Header;
  struct RankArea;

 private:
  EagerBoard() = default;
  Status step_open(int* awaited) override;
  DoorbellWord* my_bell() const override;
  RankArea* area(int rank) const;
  Header* header(int rank, uint64_t call) const;
  char* data_ring(int rank) const;
  // Where `bytes` of this rank's next payload go in its ring (a position
  // that keeps growing lap after lap; its remainder modulo ring_bytes_ is
  // the offset), and the last call the other ranks must have finished
  // before they may be written.
  uint64_t place(uint64_t call, size_t bytes, uint64_t* freed_by) const;
  int still_reading(BoardProgress* p, uint64_t freed_by);
  void publish(uint64_t call, uint64_t start, const void* data, size_t bytes);
  bool written(uint64_t call, int writer) const;
  const char* payload(int writer, uint64_t call, size_t bytes) const;
  void ring_all();

  size_t max_bytes_ = 0, ring_bytes_ = 0, rank_stride_ = 0;
  int rank_ = 0, nranks_ = 0;
  int next_mapped_ = 0;  // the first rank not yet seen with the board mapped
  // The least call the other ranks were last seen done with.  A writer
  // reads the peers' `done` only when this is too old to free its next
  // header or bytes: each read pulls a line the peer keeps writing.  Reading
  // it on every call made a steady stream of 8 B Broadcasts (2 ranks, cores
  // far apart) measurably slower.
  uint64_t peers_done_ = 0;
  // This rank's payloads in its ring that a peer may still be reading, oldest
  // first (at most kEagerDepth: a header frees no sooner), and where the next
  // one may start.
  struct Written {
    uint64_t start = 0, call = 0;
  };
  Written written_[kEagerDepth];
  size_t oldest_ = 0, live_ = 0;
  uint64_t head_ = 0;
};

}  // namespace braid

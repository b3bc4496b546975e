// BRAID_STRAGGLER=auto on the CUDA backend: the board where each rank's
// device leaves how long each tracked AllReduce took on it, for every rank's
// host to read (src/plan/straggler.h says how the durations decide).
//
// One small shared-memory segment per communicator (its ranks are on one
// host, as the CUDA backend's always are), registered with the device, so
// that the kernels around a call store into it directly (duration_stamp.h).
// No host thread takes part: a late rank's durations are on the board as
// soon as its device completed the call, whatever its host does next.
//
// Tracked call c uses slot c % kSlots, one entry per rank.  A host reads
// call c (gather) while planning call c + lag, lag < kSlots, and a device
// overwrites the slot only when it completes call c + kSlots.  That call
// needs every rank's data, which a rank launches only after planning it, so
// every host has read call c by then.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/base/status.h"
#include "src/plan/duration_stamp.h"
#include "src/transport/shm_board.h"

namespace braid {

class DurationBoard {
 public:
  static constexpr uint64_t kSlots = 16;

  // Rank 0 creates the segment; the others wait (bounded) until it is ready.
  static Status open(BoardSetup setup, std::unique_ptr<DurationBoard>* out);
  ~DurationBoard();

  // This rank's entry for tracked call `call`, where its device stamps it.
  DurationEntry* entry(uint64_t call) const;
  // Every rank's duration of tracked call `call`, once each has posted it:
  // waits, bounded by the timeout, an abort or a rank's process dying.
  Status gather(uint64_t call, std::vector<int64_t>* durations) const;

  // The mapping, for registering it with a device.
  void* base() const { return map_.base(); }
  size_t bytes() const { return map_.bytes(); }

 private:
  DurationBoard() = default;
  BoardMap map_;
  DurationEntry* entries_ = nullptr;
};

}  // namespace braid

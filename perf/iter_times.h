// -I (per-iteration timing, as nccl-tests): the time of each timed
// iteration, and the summary nccl-tests prints of them.
#pragma once

#include <vector>

#include "nccl.h"

namespace perf {

// Marks the iterations of a timed loop: as CUDA events on the rank's stream
// with device buffers (as nccl-tests' recordEvents), on the host clock with
// host buffers (their calls are done when they return).  Unpaired, mark(i)
// starts iteration i and mark(iters) ends the last; paired (-z 3, leaving
// the barriers between iterations out), each iteration has a start and a stop.
class IterClock {
 public:
  IterClock(int iters, bool paired, cudaStream_t stream);  // iters 0: off
  ~IterClock();
  IterClock(const IterClock&) = delete;
  IterClock& operator=(const IterClock&) = delete;
  void mark(int iter, bool stop = false);
  // Seconds per call of each iteration (of `agg` calls); after the stream is idle.
  std::vector<double> seconds(int agg) const;

 private:
  int index(int iter, bool stop) const { return paired_ ? 2 * iter + (stop ? 1 : 0) : iter; }
  int iters_;
  bool paired_, events_;
  cudaStream_t stream_;
  std::vector<double> host_;  // steady-clock seconds
  std::vector<void*> events_list_;
};

// nccl-tests' summary of an iteration's times (seconds): the median is the
// upper middle one, p95 and p99 the nearest rank, stdev over all of them.
struct IterStats {
  double min = 0, max = 0, avg = 0, p50 = 0, p95 = 0, p99 = 0, stdev = 0;
};
IterStats iter_stats(std::vector<double> times);

}  // namespace perf

// StragglAR: AllReduce for a job where one known rank arrives late.
//
// The schedule itself comes from stragglar_allreduce() (braid/algorithms.h);
// this header exposes the pieces behind it that tools and tests look at: the
// post-arrival round plan, its lower bound, and the alpha-beta cost model.
#pragma once

#include <cstdint>
#include <vector>

namespace braid {

// One chunk moving in one round of phase 1, in logical labels: the straggler
// is rank n-1, fast ranks are 0..n-2 and fast rank c owns chunk c after phase 0.
struct StragglarTransfer {
  int from = 0;
  int to = 0;
  int chunk = 0;
  bool reduce = false;  // the straggler's swap: the receiver reduces into its copy
};

struct StragglarRounds {
  int nranks = 0;
  std::vector<std::vector<StragglarTransfer>> rounds;  // phase 1, round by round
};

// Phase 1 for n >= 2 ranks (n = 1 has no phase 1).  Each rank sends at most
// one chunk and receives at most one chunk per round.  Powers of two take
// stragglar_rounds_power_of_two(); other n a round-by-round matching.
StragglarRounds stragglar_rounds(int nranks);

// The explicit construction for n = 2^k, exactly the lower bound n-2+k
// rounds (empty for other n).
StragglarRounds stragglar_rounds_power_of_two(int nranks);

// No phase-1 plan can be shorter: the last chunk is final only after round
// n-2, held by two ranks, and copies at most double per round afterwards.
int stragglar_round_lower_bound(int nranks);

// Alpha-beta model of the time after the straggler arrives, for an S-byte
// AllReduce (alpha in seconds, beta in seconds per byte).
struct AlphaBeta {
  double alpha = 3e-6;
  double beta = 1.0 / 450e9;
};
double ring_allreduce_model(int nranks, double bytes, AlphaBeta ab);
// Phase 1 only: phase 0 is hidden behind the straggler's delay.
double stragglar_post_arrival_model(int nranks, int rounds, double bytes, AlphaBeta ab);
// Phase 0 fully exposed (the straggler is not late at all).
double stragglar_no_delay_model(int nranks, int rounds, double bytes, AlphaBeta ab);

}  // namespace braid

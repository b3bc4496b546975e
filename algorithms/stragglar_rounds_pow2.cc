// StragglAR phase 1 for n = 2^k ranks in exactly n-2+k rounds, the lower
// bound (see stragglar_rounds.cc for the model and the bound).
//
// m = n-1 fast ranks, straggler s.  Rounds 0..m-1 are the straggler's swaps
// (rank t and s make chunk t final in round t); the bound leaves k-1 rounds
// after them, and counting receive slots shows there is no slack at all: in
// round j < k every fast holder of a final chunk must feed a new rank, and
// from round k on every fast rank not swapping must receive a chunk it lacks.
//
// Steady state: a pattern that repeats with the round.  Measure a rank from a
// chunk's owner, u = rank - c (mod m).  Chunk c spreads in stages: in round
// c+j (stage j = 1..k) every rank that holds it sends it, except the swapping
// rank, and the ranks with stage(u) = j receive it; it doubles (1, 2, 4, ...
// fast holders) until the last stage, where the other 2^(k-1)-1 ranks get it.
// In round t the rank at offset d = rank - t receives the chunk whose
// receiver u has u - stage(u) = d, and sends for every stage j with
// stage(u) < j and u - j = d.  Write each rank u's part as the block of
// offsets [u-k, u-stage(u)]: sends at all but the last offset, the receive at
// the last.  If the blocks with a send part tile the m offsets as consecutive
// segments, and the rest (stage k: receive only, block length 1) are the
// segments' inner cells, then every offset sends exactly once, and every
// offset receives exactly once: an inner cell receives at itself, a segment's
// start block receives at the cell just past the segment, the next segment's
// start.  So the counts are all it takes: one segment of length k (the owner,
// stage 0, ending at offset -1 so that the next segment starts at offset 0,
// the swapping rank, whose one "send" is the stage-k slot it skips), one of
// length k-1 (stage 1), two of length k-2 (stage 2), ..., 2^(k-2) of length 1
// (stage k-1).  Their lengths add up to m, in any order.  Stage j < k then
// has 2^(j-1) receivers and as many holders to send (so round j < k feeds as
// many new ranks as there are fast holders), stage k 2^(k-1)-1 of each.
//
// The tail: from round m on nobody swaps and chunk m-1 has only stage 0
// behind it; chunks below finish on the pattern by round c+k <= m+k-2.
// Chunk m-1 instead doubles with the straggler's help: in round m-1+i the
// pattern's slots of stages 1..i are free (they would serve chunk m-1, taken
// off the pattern, and chunks m and up, which do not exist), and by induction
// chunk m-1's 2^i - 1 fast holders are exactly the ranks in those stages'
// send slots; they and the straggler feed the 2^i ranks in those stages'
// receive slots and at offset 0.  No rank is both: a nonzero offset
// is either a segment start (sends in stage k) or an inner cell (receives in
// stage k).  After k-1 tail rounds all 2^k ranks hold it.
#include <cstddef>
#include <vector>

#include "braid/stragglar.h"

namespace braid {

using std::size_t;

StragglarRounds stragglar_rounds_power_of_two(int n) {
  StragglarRounds plan;
  plan.nranks = n;
  if (n < 2 || (n & (n - 1)) != 0) return plan;
  int k = 0;
  while ((1 << k) < n) ++k;
  const int m = n - 1, s = n - 1;

  // stage[u]: the stage at which the rank u after a chunk's owner gets it.
  // Segments of offsets from 0: lengths k-1, then k-2 twice, ..., 1 2^(k-2)
  // times, then k (the owner's, ending at m-1); inner cells keep stage k.
  std::vector<int> stage(size_t(m), k);
  int start = 0;
  for (int len = k - 1, count = 1; len >= 1; --len, count *= 2)
    for (int i = 0; i < count; ++i, start += len) stage[size_t((start + k) % m)] = k - len;
  stage[size_t((start + k) % m)] = 0;  // start == m-k: u = 0, the owner
  // senders_of[j]: the u that send in stage j; receivers_of[j]: those that receive.
  std::vector<std::vector<int>> senders_of(size_t(k) + 1), receivers_of(size_t(k) + 1);
  for (int u = 0; u < m; ++u) {
    receivers_of[size_t(stage[size_t(u)])].push_back(u);
    for (int j = stage[size_t(u)] + 1; j <= k; ++j)
      if (!(j == k && u == k % m)) senders_of[size_t(j)].push_back(u);  // the swapping rank skips
  }

  std::vector<int> last_holders = {m - 1};  // fast holders of chunk m-1, in the tail
  for (int t = 0; t < m + k - 1; ++t) {
    std::vector<StragglarTransfer> round;
    std::vector<bool> receives(size_t(m), false);
    if (t < m) {
      round.push_back({t, s, t, true});
      round.push_back({s, t, t, true});
      receives[size_t(t)] = true;
    }
    for (int j = 1; j <= k; ++j) {
      const int c = t - j;
      if (c < 0 || c > m - 2) continue;  // no such chunk yet, or the last one (below)
      const std::vector<int>& from = senders_of[size_t(j)];
      const std::vector<int>& to = receivers_of[size_t(j)];
      for (size_t i = 0; i < to.size(); ++i) {
        const int receiver = (c + to[i]) % m;
        round.push_back({(c + from[i]) % m, receiver, c, false});
        receives[size_t(receiver)] = true;
      }
    }
    if (t >= m) {
      // Chunk m-1: the straggler and its fast holders feed the idle ranks.
      std::vector<int> from = last_holders, fed;
      from.push_back(s);
      for (int r = 0; r < m && fed.size() < from.size(); ++r)
        if (!receives[size_t(r)]) fed.push_back(r);
      for (size_t i = 0; i < fed.size(); ++i) round.push_back({from[i], fed[i], m - 1, false});
      last_holders.insert(last_holders.end(), fed.begin(), fed.end());
    }
    plan.rounds.push_back(std::move(round));
  }
  return plan;
}

}  // namespace braid

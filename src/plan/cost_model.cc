// Alpha-beta forms per algorithm (cost_model.h):
//   ring allreduce 2(n-1)(a + b m/n); rd allreduce floor(log2 n)(a + b m), 2 more
//   steps for the fold where n is not a power of two;
//   ring allgather/reducescatter (n-1)(a + b blk); binomial ceil(log2 n)(a + b m);
//   direct / pairwise (n-1)(a + b blk); the LL path one hop, a + (n-1) b blk;
//   oneshot one step, every rank reading what it needs of every peer at once;
//   stragglar its model with no delay (phase 0 exposed, braid/stragglar.h).
#include "src/plan/cost_model.h"

#include <cmath>

#include "braid/stragglar.h"

namespace braid {

LinkCost link_cost(bool between_hosts) {
  return between_hosts ? LinkCost{25.0, 1.0 / 1.2e3} : LinkCost{2.0, 1.0 / 10e3};
}

double collective_us(Collective c, int nranks, uint64_t block_bytes, const std::string& algo, const LinkCost& l) {
  const double n = nranks, blk = double(block_bytes);  // one rank's block (or the whole buffer, for allreduce etc.)
  if (n <= 1) return 0;
  if (algo == "ll") return l.alpha_us + (n - 1) * l.us_per_byte * blk;  // every rank writes to every peer once
  const double logn = std::ceil(std::log2(n));
  if (algo == "oneshot") {  // one step; a Broadcast reads the root's buffer alone
    return l.alpha_us + (c == Collective::Broadcast ? 1 : n - 1) * l.us_per_byte * blk;
  }
  switch (c) {
    case Collective::AllReduce:
      if (algo == "stragglar") {
        const AlphaBeta ab{l.alpha_us * 1e-6, l.us_per_byte * 1e-6};
        return stragglar_no_delay_model(nranks, stragglar_round_lower_bound(nranks), blk, ab) * 1e6;
      }
      if (algo == "ring") return 2 * (n - 1) * (l.alpha_us + l.us_per_byte * blk / n);
      // chain: n chunks through 2(n-1) hops; direct and twoshot: two exchanges with every peer at once.
      if (algo == "chain") return (3 * n - 3) * (l.alpha_us + l.us_per_byte * blk / n);
      if (algo == "allgather") return l.alpha_us + (n - 1) * l.us_per_byte * blk;  // allgather_fold: one hop
      if (algo == "direct" || algo == "twoshot") return 2 * (l.alpha_us + (n - 1) * l.us_per_byte * blk / n);
      if (algo == "rd") {  // algorithms/recursive_doubling.cc
        const double steps = std::floor(std::log2(n)) + ((nranks & (nranks - 1)) ? 2 : 0);
        return steps * (l.alpha_us + l.us_per_byte * blk);
      }
      return (logn + 2) * (l.alpha_us + l.us_per_byte * blk);
    case Collective::AllGather: return (n - 1) * (l.alpha_us + l.us_per_byte * blk);
    case Collective::ReduceScatter:
      if (algo == "chain") return (2 * n - 1) * (l.alpha_us + l.us_per_byte * blk);  // every block down the chain
      return (n - 1) * (l.alpha_us + l.us_per_byte * blk);
    case Collective::Broadcast: return logn * (l.alpha_us + l.us_per_byte * blk);
    case Collective::Reduce:
      if (algo == "chain") return (2 * n - 1) * (l.alpha_us + l.us_per_byte * blk / n);
      return logn * (l.alpha_us + l.us_per_byte * blk);
    default: return (n - 1) * (l.alpha_us + l.us_per_byte * blk);
  }
}

}  // namespace braid

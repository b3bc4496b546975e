#include "src/ops/reduction.h"

namespace braid {

Reduction normalise_reduction(Collective c, ncclRedOp_t op, const PreMulSumOp* premul, int nranks) {
  Reduction r;
  if (!collective_reduces(c)) return r;
  if (premul) {
    r.premul = true;
    r.scalar = *premul;
  } else if (op == ncclAvg) {
    r.divisor = nranks;
  } else {
    r.fold = op;
  }
  return r;
}

}  // namespace braid

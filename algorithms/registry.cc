// The table of built-in generators the planner, the CLI and the tests use.
#include "braid/algorithms.h"

namespace braid {

const std::vector<AlgorithmInfo>& algorithm_registry() {
  static const std::vector<AlgorithmInfo> registry = {
      {"ring", Collective::AllReduce, false, [](int n, int) { return ring_allreduce(n); }},
      {"rd", Collective::AllReduce, false, [](int n, int) { return recursive_doubling_allreduce(n); }},
      // The planner passes the straggler it chose; elsewhere rank n-1 is the straggler.
      {"stragglar", Collective::AllReduce, false, [](int n, int) { return stragglar_allreduce(n, n - 1); }},
      {"ring", Collective::AllGather, false, [](int n, int) { return ring_allgather(n); }},
      {"direct", Collective::AllGather, false, [](int n, int) { return direct_allgather(n); }},
      {"ring", Collective::ReduceScatter, false, [](int n, int) { return ring_reducescatter(n); }},
      {"binomial", Collective::Broadcast, true, binomial_broadcast},
      {"binomial", Collective::Reduce, true, binomial_reduce},
      {"direct", Collective::Gather, true, direct_gather},
      {"direct", Collective::Scatter, true, direct_scatter},
      {"pairwise", Collective::AlltoAll, false, [](int n, int) { return pairwise_alltoall(n); }},
      {"direct", Collective::AlltoAll, false, [](int n, int) { return direct_alltoall(n); }},
      // One-sided: the planner offers them only where every rank can reach every peer's buffers.
      {"oneshot", Collective::AllReduce, false, [](int n, int) { return oneshot_allreduce(n); }, true},
      {"twoshot", Collective::AllReduce, false, [](int n, int) { return twoshot_allreduce(n); }, true},
      {"oneshot", Collective::AllGather, false, [](int n, int) { return oneshot_allgather(n); }, true},
      {"oneshot", Collective::ReduceScatter, false, [](int n, int) { return oneshot_reducescatter(n); }, true},
      {"oneshot", Collective::Broadcast, true, oneshot_broadcast, true},
      {"oneshot", Collective::AlltoAll, false, [](int n, int) { return oneshot_alltoall(n); }, true},
      // Rank-order folds: what BRAID_DETERMINISTIC runs where a reduction takes a schedule
      // (src/plan/planner.cc, rank_order_algorithm, says which for which size).
      {"chain", Collective::AllReduce, false, [](int n, int) { return chain_allreduce(n); }},
      {"chain", Collective::ReduceScatter, false, [](int n, int) { return chain_reducescatter(n); }},
      {"chain", Collective::Reduce, true, chain_reduce},
      {"direct", Collective::AllReduce, false, [](int n, int) { return direct_allreduce(n); }},
      {"direct", Collective::ReduceScatter, false, [](int n, int) { return direct_reducescatter(n); }},
      {"twoshot_ordered", Collective::AllReduce, false, [](int n, int) { return twoshot_ordered_allreduce(n); }, true},
      {"oneshot_ordered", Collective::ReduceScatter, false,
       [](int n, int) { return oneshot_ordered_reducescatter(n); }, true},
      {"allgather_fold", Collective::AllReduce, false, [](int n, int) { return allgather_fold_allreduce(n); }},
  };
  return registry;
}

}  // namespace braid

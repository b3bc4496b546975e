// Built-in schedule generators.  Each returns a Schedule for n ranks (n >= 1)
// that the verifier accepts in place and out of place.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid {

Schedule ring_allreduce(int nranks);
Schedule ring_allgather(int nranks);
Schedule ring_reducescatter(int nranks);
Schedule recursive_doubling_allreduce(int nranks);  // latency-optimal, small messages
// StragglAR: rank `straggler` (n-1 if out of range) joins late; the others
// reduce-scatter while they wait (braid/stragglar.h has the round plan).
// Phase 1's lanes: one per connection (hosts over links: no transfer waits
// behind another peer's), or compact, a rank's sends on one lane and its
// receives on another (GPUs: every lane holds thread blocks, so idle lanes
// cost the slices that move data).  See algorithms/stragglar.cc.
enum class StragglarLanes : uint8_t { PerConnection, Compact };
Schedule stragglar_allreduce(int nranks, int straggler, StragglarLanes lanes = StragglarLanes::PerConnection);
// Every element folded in rank order, x0 (+) x1 (+) ..., down a chain of
// the ranks: reproducible bits (BRAID_DETERMINISTIC).
Schedule chain_allreduce(int nranks);
Schedule chain_reducescatter(int nranks);
Schedule chain_reduce(int nranks, int root);
// Every rank folds its chunk of every input in rank order, from all peers at
// once: ring's bytes in two hops (BRAID_DETERMINISTIC, latency and fabrics
// where every rank reaches every peer).
Schedule direct_allreduce(int nranks);
Schedule direct_reducescatter(int nranks);
// Every rank folds every input in rank order itself: one hop (small messages).
Schedule allgather_fold_allreduce(int nranks);
Schedule binomial_broadcast(int nranks, int root);
Schedule binomial_reduce(int nranks, int root);
Schedule direct_gather(int nranks, int root);
Schedule direct_scatter(int nranks, int root);
Schedule pairwise_alltoall(int nranks);
// One lane per peer: no rank waits on a fixed peer order (oversubscribed hosts).
Schedule direct_allgather(int nranks);
Schedule direct_alltoall(int nranks);

// One-sided (algorithms/one_sided.cc): for ranks that load and store each
// other's buffers; only executors with peer access run them.
Schedule oneshot_allreduce(int nranks);   // small messages
Schedule twoshot_allreduce(int nranks);   // large messages
Schedule oneshot_allgather(int nranks);
Schedule oneshot_reducescatter(int nranks);
Schedule oneshot_broadcast(int nranks, int root);
Schedule oneshot_alltoall(int nranks);
// The same folding every block in rank order (BRAID_DETERMINISTIC).
Schedule twoshot_ordered_allreduce(int nranks);
Schedule oneshot_ordered_reducescatter(int nranks);

struct AlgorithmInfo {
  std::string name;  // what BRAID_ALGO names: "ring", "rd", "stragglar", "binomial", "direct", "pairwise",
                     // "oneshot", "twoshot", "chain", "twoshot_ordered", "oneshot_ordered", "allgather_fold"
  Collective collective;
  bool rooted;
  std::function<Schedule(int nranks, int root)> make;
  bool one_sided = false;  // its schedules have one-sided ops (schedule.h)
};

// Every generator, for the planner, the CLI and the tests.
const std::vector<AlgorithmInfo>& algorithm_registry();

}  // namespace braid

// NCCL_ALGO, NCCL's variable that restricts which algorithms a collective
// may use, read as the algorithms braid has (src/plan/alg_selection.h).
//
// NCCL's per-function grammar (nccl_lists.h), with NCCL's algorithms:
// ring, tree, collnet, collnetchain, collnetdirect, nvls, nvlstree, pat.
//
// braid has a ring for some collectives and none of NCCL's other
// algorithms, but algorithms of its own: "ring" admits braid's ring where
// it has one; an exclusion ("^tree", "^ring") admits every braid algorithm
// it does not exclude, and braid's fast paths (boards, single-copy, LL),
// which are none of NCCL's algorithms.  A collective whose entry admits none of braid's (say
// "allreduce:tree") cannot be served as asked: it keeps braid's own choice,
// which `unserved` names for the warning.
#pragma once

#include <cstdint>
#include <string>

#include "braid/schedule.h"
#include "src/base/status.h"

namespace braid {

struct NcclAlgo {
  // Per collective, a bit per algorithm_registry() index admitted, and
  // kFastPathsBit where an exclusion leaves braid's fast paths
  // (alg_selection.h); 0 where nothing restricts braid's choice (no entry,
  // one admitting all of the collective's algorithms, or one admitting none
  // of them).
  uint32_t admitted[int(Collective::Custom)] = {};
  std::string unserved;  // "allreduce (tree), broadcast (tree)": entries braid cannot serve
};

// An empty value restricts nothing.  A malformed one is ncclInvalidUsage, as NCCL.
Status parse_nccl_algo(const std::string& value, NcclAlgo* out);

// What the ranks of a communicator agree on at init: what `algo` admits per
// collective (0 where it restricts nothing), so that values spelt apart
// ("Ring", "ring", "RING;allreduce:ring") agree, as they do in NCCL.
uint64_t nccl_algo_hash(const NcclAlgo& algo);

}  // namespace braid

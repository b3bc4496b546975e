// NCCL_PROTO, NCCL's variable that restricts which protocols a collective
// may use, read as the protocols braid has.
//
// NCCL's per-function grammar (nccl_lists.h), with NCCL's protocols: ll,
// ll128, simple.  braid has two: its LL path on the CUDA backend (flags
// travel with the data in 16-byte lines, as NCCL's LL) and its schedules
// (Simple's role).  So a function whose list excludes LL ("Simple",
// "^LL") never takes the LL path; "^LL128" changes nothing.  A list that
// admits neither LL nor Simple (only LL128) admits nothing braid has: that
// function keeps braid's own choice, which `unserved` names for the
// warning.  A list without Simple still runs braid's schedules where the
// LL path does not serve the call (above its limit): NCCL's LL would run
// everything, braid's LL region is bounded.  AlltoAll is none of NCCL's
// functions (NCCL sends it as point-to-point calls, which NCCL_PROTO does
// not govern): its LL path stays.  The host backend has no protocols.
#pragma once

#include <cstdint>
#include <string>

#include "src/base/status.h"

namespace braid {

struct NcclProto {
  uint32_t ll_excluded = 0;  // a bit per Collective whose LL path the variable excludes
  std::string unserved;      // "allreduce (ll128)": lists that admit none of braid's protocols
};

// An empty value restricts nothing.  A malformed one is ncclInvalidUsage, as NCCL.
Status parse_nccl_proto(const std::string& value, NcclProto* out);

}  // namespace braid

// A communicator's init, for one rank: meet the others (the bootstrap),
// agree with them (src/runtime/agreement.h), make the transports, make the
// backend.  Leaves the communicator ready for calls.
#pragma once

#include <vector>

#include "nccl.h"
#include "src/base/status.h"

struct ncclComm;

namespace braid {

// comm->rank, nranks and config were set by the caller before this (maybe
// background) init started, so queries never race with it.
Status comm_init(ncclComm* comm, const ncclUniqueId& id);
// The same with several roots (ncclCommInitRankScalable): rank r meets the
// others through ids[root_of_rank(r)] (see bootstrap.h).
Status comm_init_scalable(ncclComm* comm, const std::vector<ncclUniqueId>& ids);

}  // namespace braid

#include "src/shim/host_exchange.h"

#include "src/runtime/group.h"
#include "src/shim/api.h"

namespace braid {

Status host_allgather(ncclComm_t comm, void* data, size_t bytes_per_rank) {
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (group_active()) return BRAID_ERROR(ncclInvalidUsage, "called inside a group (call it outside)");
  BRAID_TRY(wait_initialized(comm));
  return comm->bootstrap->allgather(data, bytes_per_rank);
}

}  // namespace braid

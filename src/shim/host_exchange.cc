#include "src/shim/host_exchange.h"

#include "src/shim/api.h"
#include "src/shim/library_use.h"

namespace braid {

Status host_allgather(ncclComm_t comm, void* data, size_t bytes_per_rank) {
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  BRAID_TRY(check_outside_group("a handle's host exchange"));
  BRAID_TRY(wait_initialized(comm));
  return comm->bootstrap->allgather(data, bytes_per_rank);
}

}  // namespace braid

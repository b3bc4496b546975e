/* A client whose first NCCL call is ncclGetUniqueId, then a 1-rank
 * ncclCommInitRank, as a job's rank 0 starts (the perf tools call
 * ncclGetVersion first): what the environment's first read has to have
 * applied (NCCL's configuration files, the env plugin) must be in place by
 * then.  Prints each call's error; exit 0 when both succeed. */
#include <stdio.h>

#include "nccl.h"

int main(void) {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    printf("ncclGetUniqueId: %s: %s\n", ncclGetErrorString(r), ncclGetLastError(NULL));
    return 1;
  }
  ncclComm_t comm;
  r = ncclCommInitRank(&comm, 1, id, 0);
  if (r != ncclSuccess) {
    printf("ncclCommInitRank: %s: %s\n", ncclGetErrorString(r), ncclGetLastError(NULL));
    return 1;
  }
  ncclCommDestroy(comm);
  printf("ok\n");
  return 0;
}

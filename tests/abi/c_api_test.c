/* A plain C program written only against NVIDIA's nccl.h (the real header),
 * linked against braid's libnccl.so.2 and run with host buffers on 4 forked
 * processes: AllReduce, AllGather and Broadcast must give exact results.
 *
 * `c_api_test RANK NRANKS` runs just one rank instead; the ranks then meet
 * through NCCL_COMM_ID (used by the two-host network-namespace test). */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 4

static int nranks = NRANKS;
#define COUNT 100003

#define CHECK(call)                                                               \
  do {                                                                            \
    ncclResult_t r_ = (call);                                                     \
    if (r_ != ncclSuccess) {                                                      \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

static int run_rank(int rank, ncclUniqueId id) {
  ncclComm_t comm;
  int version = 0, n = 0, r = -1;
  float *in = malloc(sizeof(float) * COUNT), *out = malloc(sizeof(float) * COUNT * nranks);
  const int root = nranks > 2 ? 2 : 0;
  CHECK(ncclGetVersion(&version));
  CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  CHECK(ncclCommCount(comm, &n));
  CHECK(ncclCommUserRank(comm, &r));
  if (n != nranks || r != rank || version != NCCL_VERSION_CODE) return 2;
  for (int i = 0; i < COUNT; ++i) in[i] = (float)(rank + 1) * (float)(i % 5);

  CHECK(ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < COUNT; ++i)
    if (out[i] != (float)(nranks * (nranks + 1) / 2) * (float)(i % 5)) { fprintf(stderr, "allreduce wrong at %d\n", i); return 3; }

  CHECK(ncclAllGather(in, out, COUNT, ncclFloat, comm, NULL));
  for (int b = 0; b < nranks; ++b)
    for (int i = 0; i < COUNT; ++i)
      if (out[b * COUNT + i] != (float)(b + 1) * (float)(i % 5)) { fprintf(stderr, "allgather wrong\n"); return 4; }

  CHECK(ncclBroadcast(in, out, COUNT, ncclFloat, root, comm, NULL));
  for (int i = 0; i < COUNT; ++i)
    if (out[i] != (float)(root + 1) * (float)(i % 5)) { fprintf(stderr, "broadcast wrong at %d\n", i); return 5; }

  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
  free(in);
  free(out);
  return 0;
}

int main(int argc, char** argv) {
  ncclUniqueId id;
  if (argc == 3) { /* one rank of a job that meets through NCCL_COMM_ID */
    int rank = atoi(argv[1]);
    nranks = atoi(argv[2]);
    if (!getenv("NCCL_COMM_ID") || nranks < 1 || rank < 0 || rank >= nranks) {
      fprintf(stderr, "usage: NCCL_COMM_ID=ip:port c_api_test RANK NRANKS\n");
      return 2;
    }
    CHECK(ncclGetUniqueId(&id));
    int rc = run_rank(rank, id);
    if (rc == 0) printf("c_api_test: rank %d of %d exact\n", rank, nranks);
    return rc;
  }
  pid_t pids[NRANKS];
  int failed = 0;
  CHECK(ncclGetUniqueId(&id));
  fflush(NULL);
  for (int r = 0; r < NRANKS; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(60);
      _exit(run_rank(r, id));
    }
  }
  for (int r = 0; r < NRANKS; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d failed (status %d)\n", r, status);
      failed = 1;
    }
  }
  printf(failed ? "FAILED\n" : "c_api_test: 4 ranks, allreduce/allgather/broadcast exact\n");
  return failed;
}

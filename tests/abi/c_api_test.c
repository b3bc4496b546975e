/* A plain C program written only against NVIDIA's nccl.h (the real header),
 * linked against braid's libnccl.so.2 and run with host buffers on 4 forked
 * processes: AllReduce, AllGather and Broadcast must give exact results, then
 * every other function of the API is exercised (whole_api below): every
 * collective, grouped send/recv, PreMulSum, registration, windows, MemAlloc,
 * split/shrink/revoke, scalable init, non-blocking init, GroupSimulateEnd,
 * abort; and ncclCommInitAll from one process.
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

#define EXPECT(cond, code)                                         \
  do {                                                             \
    if (!(cond)) {                                                 \
      fprintf(stderr, "rank %d: %s failed (line %d)\n", rank, #cond, __LINE__); \
      return code;                                                 \
    }                                                              \
  } while (0)

static ncclUniqueId scalable_ids[2];

/* Every remaining entry point, on a live 4-rank communicator. */
static int whole_api(int rank, ncclComm_t comm) {
  int n = nranks, dev = 0;
  double in[64], out[64 * NRANKS];
  for (int i = 0; i < 64; ++i) in[i] = rank + 1;
  CHECK(ncclCommCuDevice(comm, &dev));
  ncclResult_t async = ncclInternalError;
  CHECK(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess, 20);
  EXPECT(ncclGetErrorString(ncclInvalidUsage)[0] != 0, 20);

  /* Every collective, exact. */
  CHECK(ncclReduceScatter(in, out, 16, ncclDouble, ncclMax, comm, NULL));
  EXPECT(out[15] == n, 21);
  CHECK(ncclReduce(in, out, 64, ncclDouble, ncclProd, 0, comm, NULL));
  if (rank == 0) { double p = 1; for (int r = 1; r <= n; ++r) p *= r; EXPECT(out[63] == p, 22); }
  CHECK(ncclBcast(in, 64, ncclDouble, 1, comm, NULL));
  EXPECT(in[0] == 2, 23);
  for (int i = 0; i < 64; ++i) in[i] = rank * 100 + i;
  CHECK(ncclAlltoAll(in, out, 16, ncclDouble, comm, NULL));
  for (int p = 0; p < n; ++p) EXPECT(out[p * 16 + 3] == p * 100 + rank * 16 + 3, 24);
  CHECK(ncclGather(in, out, 8, ncclDouble, 2, comm, NULL));
  if (rank == 2) for (int p = 0; p < n; ++p) EXPECT(out[p * 8 + 7] == p * 100 + 7, 25);
  CHECK(ncclScatter(in, out, 8, ncclDouble, 3, comm, NULL));
  EXPECT(out[1] == 300 + rank * 8 + 1, 26);
  CHECK(ncclAllReduce(in, out, 64, ncclDouble, ncclAvg, comm, NULL));
  EXPECT(out[0] == 150, 27); /* mean of 0, 100, 200, 300 */

  /* Grouped send/recv ring. */
  CHECK(ncclGroupStart());
  CHECK(ncclSend(in, 10, ncclDouble, (rank + 1) % n, comm, NULL));
  CHECK(ncclRecv(out, 10, ncclDouble, (rank + n - 1) % n, comm, NULL));
  CHECK(ncclGroupEnd());
  EXPECT(out[9] == ((rank + n - 1) % n) * 100 + 9, 28);

  /* PreMulSum with a host-immediate scalar. */
  ncclRedOp_t premul;
  double scalar = 0.25;
  for (int i = 0; i < 64; ++i) in[i] = 4.0 * (rank + 1);
  CHECK(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclDouble, ncclScalarHostImmediate, comm));
  CHECK(ncclAllReduce(in, out, 64, ncclDouble, premul, comm, NULL));
  EXPECT(out[63] == n * (n + 1) / 2, 29);
  CHECK(ncclRedOpDestroy(premul, comm));
  EXPECT(ncclRedOpDestroy(premul, comm) == ncclInvalidArgument, 29);

  /* Registration, windows, ncclMemAlloc. */
  void *handle = NULL, *mem = NULL;
  ncclWindow_t win = NULL;
  CHECK(ncclCommRegister(comm, in, sizeof in, &handle));
  CHECK(ncclCommDeregister(comm, handle));
  CHECK(ncclMemAlloc(&mem, 8192));
  CHECK(ncclCommWindowRegister(comm, mem, 8192, &win, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(ncclCommWindowDeregister(comm, win));
  CHECK(ncclMemFree(mem));

  /* Simulation: estimate, no data moved. */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  out[0] = -1;
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(in, out, 64, ncclDouble, ncclSum, comm, NULL));
  CHECK(ncclGroupSimulateEnd(&sim));
  EXPECT(sim.estimatedTime > 0 && out[0] == -1, 30);

  /* Split by parity, shrink away rank 3, revoke. */
  ncclComm_t half = NULL, shrunk = NULL;
  int r2 = -1, c2 = -1;
  CHECK(ncclCommSplit(comm, rank % 2, rank, &half, NULL));
  CHECK(ncclCommUserRank(half, &r2));
  CHECK(ncclCommCount(half, &c2));
  EXPECT(r2 == rank / 2 && c2 == 2, 31);
  CHECK(ncclCommDestroy(half));
  if (rank != 3) {
    int excluded = 3;
    CHECK(ncclCommShrink(comm, &excluded, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
    CHECK(ncclAllReduce(in, out, 1, ncclDouble, ncclSum, shrunk, NULL));
    EXPECT(out[0] == 4.0 * 6, 32);
    CHECK(ncclCommDestroy(shrunk));
  }

  /* Scalable init over 2 roots, non-blocking config. */
  ncclComm_t scal = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankScalable(&scal, n, rank, 2, scalable_ids, &config);
  EXPECT(r == ncclSuccess || r == ncclInProgress, 33);
  do CHECK(ncclCommGetAsyncError(scal, &async)); while (async == ncclInProgress);
  EXPECT(async == ncclSuccess, 33);
  r = ncclAllReduce(in, out, 64, ncclDouble, ncclSum, scal, NULL);
  EXPECT(r == ncclSuccess || r == ncclInProgress, 34);
  do CHECK(ncclCommGetAsyncError(scal, &async)); while (async == ncclInProgress);
  EXPECT(async == ncclSuccess && out[5] == 4.0 * 10, 34);
  CHECK(ncclCommRevoke(scal, NCCL_REVOKE_DEFAULT));
  EXPECT(ncclAllReduce(in, out, 1, ncclDouble, ncclSum, scal, NULL) == ncclInvalidUsage, 35);
  EXPECT(ncclGetLastError(scal)[0] != 0, 35);
  CHECK(ncclCommAbort(scal));
  return 0;
}

static int run_rank(int rank, ncclUniqueId id) {
  ncclComm_t comm;
  int version = 0, n = 0, r = -1;
  float *in = malloc(sizeof(float) * COUNT), *out = malloc(sizeof(float) * COUNT * nranks);
  const int root = nranks > 2 ? 2 : 0;
  CHECK(ncclGetVersion(&version));
  CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  CHECK(ncclCommCount(comm, &n));
  CHECK(ncclCommUserRank(comm, &r));
  /* braid reports its own API level, at least this header's (2.28.9); with
   * BRAID_NCCL_VERSION set, as a client that requires an exact match does,
   * exactly the version set (docs/compatibility.md). */
  const int version_ok = getenv("BRAID_NCCL_VERSION") ? version == NCCL_VERSION_CODE : version >= NCCL_VERSION_CODE;
  if (n != nranks || r != rank || !version_ok) return 2;
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

  if (!getenv("NCCL_COMM_ID")) { /* the full tour runs in the single-machine mode */
    int rc = whole_api(rank, comm);
    if (rc) return rc;
  } else { /* across hosts: a split whose halves span them, as a job's data-parallel groups */
    ncclComm_t half = NULL;
    double x = rank + 1, sum = 0, want = 0;
    CHECK(ncclCommSplit(comm, rank % 2, rank, &half, NULL));
    CHECK(ncclAllReduce(&x, &sum, 1, ncclDouble, ncclSum, half, NULL));
    for (int r = rank % 2; r < nranks; r += 2) want += r + 1;
    EXPECT(sum == want, 41);
    CHECK(ncclCommDestroy(half));
  }
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
  CHECK(ncclGetUniqueId(&scalable_ids[0]));
  CHECK(ncclGetUniqueId(&scalable_ids[1]));
  {
    /* ncclCommInitAll: two ranks driven from this one thread. */
    int rank = 0;
    ncclComm_t both[2];
    float a[2][8], b[2][8];
    CHECK(ncclCommInitAll(both, 2, NULL));
    CHECK(ncclGroupStart());
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 8; ++i) a[r][i] = (float)(r + 1);
      CHECK(ncclAllReduce(a[r], b[r], 8, ncclFloat, ncclSum, both[r], NULL));
    }
    CHECK(ncclGroupEnd());
    EXPECT(b[0][7] == 3.f && b[1][0] == 3.f, 40);
    CHECK(ncclCommDestroy(both[0]));
    CHECK(ncclCommDestroy(both[1]));
  }
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
  printf(failed ? "FAILED\n" : "c_api_test: 4 ranks, every collective exact, whole API exercised\n");
  return failed;
}

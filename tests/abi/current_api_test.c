/* A plain C program written against braid's include/nccl.h (NCCL 2.32's
 * API), linked to braid's libnccl.so.2, that calls every function NCCL
 * added after 2.28 on real ranks: three forked processes, over TLS
 * (ncclSetEncryption before anything else, as NCCL asks).  Ranks 0 and 1
 * make a communicator with a 2.32 config, read parameters, run the eight
 * nccl*Config collectives, put/signal/wait through a window, suspend and
 * resume it, then grow it by rank 2, which joins through the id rank 0
 * made (ncclCommGetUniqueId).  Every result is checked exactly. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 2     /* ranks before the grow */
#define GROWN 3 /* after */
#define COUNT 4096

#define CHECK(call)                                                                                    \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    if (r_ != ncclSuccess) {                                                                           \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, ncclGetErrorString(r_),            \
              ncclGetLastError(NULL));                                                                 \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)
#define EXPECT(cond)                                                               \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "rank %d: %s failed (line %d)\n", rank, #cond, __LINE__);     \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

static int grow_pipe[2];
static int go_pipe[2]; /* one byte per existing rank: start */

static int allreduce_exact(int rank, int nranks, ncclComm_t comm) {
  static double in[COUNT], out[COUNT];
  for (int i = 0; i < COUNT; ++i) in[i] = rank + 1 + i;
  CHECK(ncclAllReduce(in, out, COUNT, ncclDouble, ncclSum, comm, NULL));
  for (int i = 0; i < COUNT; ++i) EXPECT(out[i] == nranks * (nranks + 1) / 2.0 + nranks * (double)i);
  return 0;
}

static int parameters(int rank) {
  ncclParamHandle_t h;
  int8_t i8; int16_t i16; int32_t i32; int64_t i64; uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
  CHECK(ncclParamBind(&h, "BRAID_TIMEOUT"));
  CHECK(ncclParamGetI8(h, &i8)); CHECK(ncclParamGetI16(h, &i16)); CHECK(ncclParamGetI32(h, &i32));
  CHECK(ncclParamGetI64(h, &i64)); CHECK(ncclParamGetU8(h, &u8)); CHECK(ncclParamGetU16(h, &u16));
  CHECK(ncclParamGetU32(h, &u32)); CHECK(pncclParamGetU64(h, &u64));
  EXPECT(i8 == 42 && i16 == 42 && i32 == 42 && i64 == 42 && u8 == 42 && u16 == 42 && u32 == 42 && u64 == 42);
  const char* s = NULL;
  CHECK(ncclParamGetStr(h, &s));
  EXPECT(strcmp(s, "42") == 0);
  int64_t raw = 0;
  int len = 0;
  CHECK(ncclParamGet(h, &raw, sizeof(raw), &len));
  EXPECT(raw == 42 && len == 8);
  CHECK(ncclParamGetParameter("BRAID_TIMEOUT", &s, &len));
  EXPECT(strcmp(s, "42") == 0 && len == 2);
  const char** keys = NULL;
  int nkeys = 0;
  CHECK(ncclParamGetAllParameterKeys(&keys, &nkeys));
  int found = 0;
  for (int k = 0; k < nkeys; ++k) found += strcmp(keys[k], "BRAID_TIMEOUT") == 0;
  EXPECT(found == 1);
  if (rank == 0) ncclParamDumpAll();
  return 0;
}

/* The eight collectives with a per-call config, exact. */
static int configured_collectives(int rank, ncclComm_t comm) {
  static int32_t in[N * 64], out[N * 64];
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  c.userProfilerTag = 7;
  for (int i = 0; i < N * 64; ++i) in[i] = rank * 1000 + i;
  c.algSelection = "ring";
  CHECK(ncclAllReduceConfig(in, out, 64, ncclInt32, ncclSum, comm, NULL, &c));
  EXPECT(out[5] == 1000 + 2 * 5);
  CHECK(ncclAllGatherConfig(in, out, 64, ncclInt32, comm, NULL, &c));
  EXPECT(out[64 + 3] == 1000 + 3);
  CHECK(ncclReduceScatterConfig(in, out, 64, ncclInt32, ncclMax, comm, NULL, &c));
  EXPECT(out[1] == 1000 + rank * 64 + 1);
  c.algSelection = "binomial";
  CHECK(ncclBroadcastConfig(in, out, 64, ncclInt32, 1, comm, NULL, &c));
  EXPECT(out[9] == 1009);
  CHECK(ncclReduceConfig(in, out, 64, ncclInt32, ncclMin, 0, comm, NULL, &c));
  if (rank == 0) EXPECT(out[9] == 9);
  c.algSelection = "pairwise";
  CHECK(ncclAlltoAllConfig(in, out, 64, ncclInt32, comm, NULL, &c));
  EXPECT(out[64 + 2] == 1000 + rank * 64 + 2);
  c.algSelection = NULL;
  CHECK(ncclGatherConfig(in, out, 64, ncclInt32, 1, comm, NULL, &c));
  if (rank == 1) EXPECT(out[64 + 4] == 1004);
  CHECK(ncclScatterConfig(in, out, 64, ncclInt32, 0, comm, NULL, NULL));
  EXPECT(out[4] == rank * 64 + 4);
  return 0;
}

static int one_sided(int rank, ncclComm_t comm) {
  void* mem = NULL;
  CHECK(ncclMemAlloc(&mem, 8192));
  memset(mem, 0, 8192);
  ncclWindow_t win;
  CHECK(ncclCommWindowRegister(comm, mem, 8192, &win, NCCL_WIN_STRICT_ORDERING));
  void* user = NULL;
  CHECK(ncclWinGetUserPtr(comm, win, &user));
  EXPECT(user == mem);
  int peer = 1 - rank;
  int64_t data[512];
  for (int i = 0; i < 512; ++i) data[i] = rank * 100000 + i;
  CHECK(ncclPutSignal(data, 512, ncclInt64, peer, win, 4096, 1, 1, 0, comm, NULL));
  CHECK(ncclSignal(peer, 0, 0, 0, comm, NULL));
  ncclWaitSignalDesc_t descs[2] = {{1, peer, 1, 1}, {1, peer, 0, 0}};
  CHECK(ncclWaitSignal(2, descs, comm, NULL));
  const int64_t* got = (const int64_t*)((char*)mem + 4096);
  for (int i = 0; i < 512; ++i) EXPECT(got[i] == peer * 100000 + i);
  CHECK(allreduce_exact(rank, N, comm) == 0 ? ncclSuccess : ncclInternalError);
  CHECK(ncclCommWindowDeregister(comm, win));
  CHECK(ncclMemFree(mem));
  return 0;
}

static int suspend_resume(int rank, ncclComm_t comm) {
  uint64_t held = 0, suspended = 9, total = 0, persist = 0;
  CHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &held));
  CHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &total));
  CHECK(ncclCommMemStats(comm, ncclStatGpuMemPersist, &persist));
  EXPECT(held > 0 && total == held + persist);
  CHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  CHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &suspended));
  CHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &held));
  EXPECT(suspended == 1 && held == 0);
  CHECK(ncclCommResume(comm));
  return allreduce_exact(rank, N, comm);
}

static int existing_rank(int rank, const ncclUniqueId* id) {
  char go;
  EXPECT(read(go_pipe[0], &go, 1) == 1);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.numRmaCtx = 2;
  config.numRmaSig = 2;
  config.commName = "current_api_test";
  ncclComm_t comm;
  CHECK(ncclCommInitRankConfig(&comm, N, *id, rank, &config));
  if (parameters(rank) || configured_collectives(rank, comm) || one_sided(rank, comm) || suspend_resume(rank, comm))
    return 1;
  ncclUniqueId grow_id;
  if (rank == 0) {
    CHECK(ncclCommGetUniqueId(comm, &grow_id));
    EXPECT(write(grow_pipe[1], &grow_id, sizeof(grow_id)) == (ssize_t)sizeof(grow_id));
  }
  ncclComm_t grown;
  CHECK(ncclCommGrow(comm, GROWN, rank == 0 ? &grow_id : NULL, -1, &grown, NULL));
  if (allreduce_exact(rank, GROWN, grown)) return 1;
  CHECK(ncclCommDestroy(grown));
  CHECK(ncclCommDestroy(comm));
  return 0;
}

static int joining_rank(int rank) {
  ncclUniqueId grow_id;
  EXPECT(read(grow_pipe[0], &grow_id, sizeof(grow_id)) == (ssize_t)sizeof(grow_id));
  /* The existing ranks' grown communicator inherits their config: the RMA
   * geometry must agree everywhere. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.numRmaCtx = 2;
  config.numRmaSig = 2;
  ncclComm_t grown;
  CHECK(ncclCommGrow(NULL, GROWN, &grow_id, rank, &grown, &config));
  if (allreduce_exact(rank, GROWN, grown)) return 1;
  CHECK(ncclCommDestroy(grown));
  return 0;
}

int main(void) {
  int rank = -1, version = 0;
  setenv("BRAID_TIMEOUT", "42", 1);
  ncclEncryptionConfig_t tls = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  tls.mode = NCCL_ENCRYPTION_MODE_PSK;
  tls.psk = "current-api-test-only-psk-0123456789abcdef";
  CHECK(ncclSetEncryption(&tls));
  CHECK(ncclGetVersion(&version));
  EXPECT(version == NCCL_VERSION_CODE);
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  if (pipe(grow_pipe) != 0) return 1;
  if (pipe(go_pipe) != 0) return 1;
  /* The existing ranks start together once released.  The joining rank is
   * forked after that, while this process's bootstrap root secures their
   * connections on its threads: braid must let a process fork then (it once
   * left the child holding OpenSSL's locks).  Under AddressSanitizer every
   * rank is forked before any starts: GCC 12's ASan allocator takes no lock
   * around fork, so a child forked while another thread allocates can
   * inherit that lock held, in any program. */
#if defined(__SANITIZE_ADDRESS__)
  const int fork_joiner_early = 1;
#else
  const int fork_joiner_early = 0;
#endif
  pid_t pids[GROWN];
  for (int i = 0; i < GROWN + 1; ++i) {
    if (i == (fork_joiner_early ? GROWN : N)) {  /* release the existing ranks */
      char go[N] = {0};
      if (write(go_pipe[1], go, N) != N) return 1;
      continue;
    }
    const int r = i > N ? N + (i - N - 1) : i;
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(120);
      _exit(r < N ? existing_rank(r, &id) : joining_rank(r));
    }
  }
  int failed = 0;
  for (int r = 0; r < GROWN; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d failed (status %d)\n", r, status);
      failed = 1;
    }
  }
  if (!failed) printf("every NCCL 2.29-2.32 function ran on 3 ranks over TLS: exact\n");
  return failed;
}

// NCCL 2.29's one-sided calls on braid's CUDA backend
// (src/exec/cuda/cuda_rma.h): a ring of ncclPutSignal into each right
// neighbour's part of a symmetric window (ncclMemAlloc memory), each rank
// waiting (ncclWaitSignal) for its left neighbour's, then reading it and
// acknowledging with ncclSignal on a second signal index, so the next
// round's put never lands before the last round was read.  Eager rounds,
// then the same round captured in a CUDA graph and replayed with new
// values.  A window that is not symmetric is refused by name.
//
//   braid_gpu_rma NRANKS threads|processes [timeout]
//
// timeout: every rank waits for a signal nobody sends; with BRAID_TIMEOUT
// short the wait's kernel gives up, ncclCommGetAsyncError says so, and
// the rank aborts its communicator.  Exit 0 when everything is exact.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"
#include "rank_runner.h"

namespace {

constexpr size_t kCount = 1 << 18;  // int32 a rank puts per round
constexpr int kRounds = 4, kReplays = 3;
constexpr int kData = 0, kAck = 1;  // signal indexes
bool g_timeout = false;

int32_t value(int rank, int round, size_t i) { return int32_t(rank * 1000003 + round * 7919 + int(i % 4099)); }

int init_comm(int rank, int n, const ncclUniqueId& id, ncclComm_t* comm) {
  int devices = 0;
  CHECK_OR_FAIL(cudaGetDeviceCount(&devices));
  CHECK_OR_FAIL(cudaSetDevice(rank % devices));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.numRmaSig = 2;
  CHECK_OR_FAIL(ncclCommInitRankConfig(comm, n, id, rank, &config));
  return 0;
}

// One round on `stream`: wait for the right neighbour's acknowledgement of
// the last round (`ack`), put, wait for the left neighbour's put, copy it
// to `host`, acknowledge it.
int enqueue_round(int rank, int n, ncclComm_t comm, ncclWindow_t win, const int32_t* send, int32_t* window,
                  int32_t* host, bool ack, cudaStream_t stream) {
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  ncclWaitSignalDesc_t acked = {1, right, kAck, 0}, landed = {1, left, kData, 0};
  if (ack) CHECK_OR_FAIL(ncclWaitSignal(1, &acked, comm, stream));
  CHECK_OR_FAIL(ncclPutSignal(send, kCount, ncclInt32, right, win, size_t(rank) * kCount * sizeof(int32_t), kData, 0,
                              0, comm, stream));
  CHECK_OR_FAIL(ncclWaitSignal(1, &landed, comm, stream));
  CHECK_OR_FAIL(cudaMemcpyAsync(host, window + size_t(left) * kCount, kCount * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream));
  CHECK_OR_FAIL(ncclSignal(left, kAck, 0, 0, comm, stream));
  return 0;
}

int check_round(int rank, int n, int round, const int32_t* host) {
  const int left = (rank + n - 1) % n;
  for (size_t i = 0; i < kCount; ++i)
    if (host[i] != value(left, round, i)) {
      std::fprintf(stderr, "rank %d round %d: element %zu from rank %d is %d, wanted %d\n", rank, round, i, left,
                   host[i], value(left, round, i));
      return 1;
    }
  return 0;
}

int fill(int rank, int round, int32_t* send, std::vector<int32_t>& staging, cudaStream_t stream) {
  for (size_t i = 0; i < kCount; ++i) staging[i] = value(rank, round, i);
  CHECK_OR_FAIL(cudaMemcpyAsync(send, staging.data(), kCount * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  return cudaStreamSynchronize(stream);  // staging is rewritten next round
}

int timeout_rank(int rank, int n, ncclComm_t comm, cudaStream_t stream) {
  ncclWaitSignalDesc_t never = {1, (rank + n - 1) % n, kData, 0};
  const auto start = std::chrono::steady_clock::now();
  CHECK_OR_FAIL(ncclWaitSignal(1, &never, comm, stream));
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async));
  const std::string said = ncclGetLastError(comm);
  // BRAID_TIMEOUT=5 (ctest, device-check): the kernel gives up after 5 s, not before, nor long after.
  if (async != ncclTimeout || said.find("ncclWaitSignal") == std::string::npos || s < 4 || s > 30) {
    std::fprintf(stderr, "rank %d: a wait nobody signals gave %d after %.1f s: %s\n", rank, int(async), s,
                 said.c_str());
    return 1;
  }
  std::printf("rank %d: the wait gave up after %.1f s: %s\n", rank, s, said.c_str());
  return ncclCommAbort(comm);
}

int rank_main(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = nullptr;
  CHECK_OR_FAIL(init_comm(rank, n, id, &comm));
  const size_t bytes = size_t(n) * kCount * sizeof(int32_t);
  int32_t *window = nullptr, *send = nullptr, *plain = nullptr, *host = nullptr;
  CHECK_OR_FAIL(ncclMemAlloc(reinterpret_cast<void**>(&window), bytes));
  CHECK_OR_FAIL(cudaMalloc(&send, kCount * sizeof(int32_t)));
  CHECK_OR_FAIL(cudaMalloc(&plain, bytes));
  CHECK_OR_FAIL(cudaMallocHost(&host, kCount * sizeof(int32_t)));
  ncclWindow_t win = nullptr, plain_win = nullptr;
  CHECK_OR_FAIL(ncclCommWindowRegister(comm, window, bytes, &win, NCCL_WIN_DEFAULT));
  CHECK_OR_FAIL(ncclCommWindowRegister(comm, plain, bytes, &plain_win, NCCL_WIN_DEFAULT));
  cudaStream_t stream;
  CHECK_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (!thread_ranks_meet()) return 1;  // every thread rank's setup done before the first kernel
  if (g_timeout) return timeout_rank(rank, n, comm, stream);

  // A cudaMalloc window has no mapping here: refused, saying why.
  const ncclResult_t refused =
      ncclPutSignal(send, kCount, ncclInt32, (rank + 1) % n, plain_win, 0, kData, 0, 0, comm, stream);
  if (refused != ncclInvalidUsage || std::string(ncclGetLastError(comm)).find("symmetric") == std::string::npos) {
    std::fprintf(stderr, "rank %d: a put into a cudaMalloc window gave %d: %s\n", rank, int(refused),
                 ncclGetLastError(comm));
    return 1;
  }
  std::vector<int32_t> staging(kCount);
  int wrong = 0;
  // Every round on every rank, wrong or not: the peers wait for its signals.
  for (int round = 0; round < kRounds; ++round) {
    CHECK_OR_FAIL(fill(rank, round, send, staging, stream));
    CHECK_OR_FAIL(enqueue_round(rank, n, comm, win, send, window, host, round > 0, stream));
    CHECK_OR_FAIL(cudaStreamSynchronize(stream));
    wrong += check_round(rank, n, round, host);
  }
  // The round in a graph: the last eager round's acknowledgement is the
  // first replay's; each replay's counts are new signals.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_OR_FAIL(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CHECK_OR_FAIL(enqueue_round(rank, n, comm, win, send, window, host, true, stream));
  CHECK_OR_FAIL(cudaStreamEndCapture(stream, &graph));
  CHECK_OR_FAIL(cudaGraphInstantiate(&exec, graph, 0));
  // Uploaded and met before the first replay: thread ranks share a context,
  // where a slower rank's first launch, if it allocated and waited for the
  // device, would wait for a faster one's replay, which waits for it.
  CHECK_OR_FAIL(cudaGraphUpload(exec, stream));
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  if (!thread_ranks_meet()) return 1;
  for (int replay = 0; replay < kReplays; ++replay) {
    const int round = kRounds + replay;
    CHECK_OR_FAIL(fill(rank, round, send, staging, stream));
    CHECK_OR_FAIL(cudaGraphLaunch(exec, stream));
    CHECK_OR_FAIL(cudaStreamSynchronize(stream));
    wrong += check_round(rank, n, round, host);
  }
  // Every signal consumed before teardown: the last replay's
  // acknowledgement is still on its way into this rank's arena, which
  // ncclCommDestroy frees.
  ncclWaitSignalDesc_t last = {1, (rank + 1) % n, kAck, 0};
  CHECK_OR_FAIL(ncclWaitSignal(1, &last, comm, stream));
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async));
  CHECK_OR_FAIL(async);
  CHECK_OR_FAIL(cudaGraphExecDestroy(exec));
  CHECK_OR_FAIL(cudaGraphDestroy(graph));
  if (!thread_ranks_meet()) return 1;  // thread ranks share a context: no free while a peer still launches
  CHECK_OR_FAIL(ncclCommWindowDeregister(comm, win));
  CHECK_OR_FAIL(ncclCommWindowDeregister(comm, plain_win));
  CHECK_OR_FAIL(ncclCommDestroy(comm));
  CHECK_OR_FAIL(ncclMemFree(window));
  CHECK_OR_FAIL(cudaFree(send));
  CHECK_OR_FAIL(cudaFree(plain));
  CHECK_OR_FAIL(cudaFreeHost(host));
  CHECK_OR_FAIL(cudaStreamDestroy(stream));
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  g_timeout = argc > 3 && std::string(argv[3]) == "timeout";
  return run_gpu_ranks(argc, argv, rank_main, g_timeout ? "one-sided wait timeout" : "one-sided put/signal/wait");
}

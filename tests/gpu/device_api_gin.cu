// GPU-initiated networking (GIN) of NCCL's device API on braid's CUDA
// backend, from a kernel built against NVIDIA's installed nccl_device
// headers (2.28.9), as NCCL's examples/06_device_api/02_gin_alltoall_pure
// runs it: a rail GIN barrier, then a put of every rank's chunk to every
// rank (itself included) with a signal increment, a wait for the signal
// to count every rank, and a flush.  Braid's proxy serves the descriptors
// with the copy engines; the signals are host memory the GPU maps
// (src/runtime/device_gin.h).  Needs BRAID_CUDA_GIN=1 (the proxy on a GPU
// is opt-in until this test has run on one).
//
//   braid_gpu_device_api_gin NRANKS threads|processes
//
// Ranks share the GPUs there are (rank % devices).  Exit 0 when every
// byte of every round is exact, 1 otherwise, 77 when GIN is not enabled.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "rank_runner.h"
#include <nccl_device.h>

namespace {

constexpr int kRounds = 5;
constexpr size_t kChunk = (1 << 20) + 4096;  // bytes each rank puts to each rank

__global__ void gin_alltoall(ncclWindow_t send, ncclWindow_t recv, size_t bytes, ncclDevComm dev) {
  ncclGin gin{dev, 0};
  const ncclTeam world = ncclTeamWorld(dev);
  const uint64_t before = gin.readSignal(0);
  ncclGinBarrierSession<ncclCoopCta> bar{ncclCoopCta(), gin, world, dev.railGinBarrier, 0};
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed, ncclGinFenceLevel::Relaxed);  // every send window is written
  for (int r = threadIdx.x; r < world.nRanks; r += blockDim.x)
    gin.put(world, r, recv, size_t(dev.rank) * bytes, send, size_t(r) * bytes, bytes, ncclGin_SignalInc{0});
  gin.waitSignal(ncclCoopCta(), 0, before + world.nRanks);
  gin.flush(ncclCoopCta());
}

// The round's kernel, waited for at most 30 s, asking the communicator
// meanwhile: NVIDIA's inline waits cannot time out, and a fault of braid's
// proxy (ncclCommGetAsyncError) would otherwise leave the kernel spinning
// and the test silent until the step's limit.  Says on stderr what it saw.
bool kernel_finished(int rank, int round, ncclComm_t comm, cudaStream_t stream) {
  cudaEvent_t done;
  if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(done, stream) != cudaSuccess)
    return false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string why;
  cudaError_t e = cudaErrorNotReady;
  while (why.empty() && (e = cudaEventQuery(done)) == cudaErrorNotReady) {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess)
      why = std::string("the kernel waits, and the communicator failed: ") + ncclGetLastError(comm);
    else if (std::chrono::steady_clock::now() > until)
      why = "the kernel did not finish within 30 s (no error reported)";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  cudaEventDestroy(done);
  if (why.empty() && e != cudaSuccess) why = cudaGetErrorString(e);
  if (!why.empty()) std::fprintf(stderr, "rank %d round %d: %s\n", rank, round, why.c_str());
  return why.empty();
}

unsigned char value(int from, int to, int round, size_t i) {
  return (unsigned char)(from * 37 + to * 11 + round * 5 + i);
}

int rank_main(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = nullptr;
  CHECK_OR_FAIL(init_rank_on_device(rank, n, id, &comm));
  const size_t bytes = kChunk * n;
  unsigned char *send = nullptr, *recv = nullptr;
  CHECK_OR_FAIL(ncclMemAlloc(reinterpret_cast<void**>(&send), bytes));
  CHECK_OR_FAIL(ncclMemAlloc(reinterpret_cast<void**>(&recv), bytes));
  ncclWindow_t send_win = nullptr, recv_win = nullptr;
  CHECK_OR_FAIL(ncclCommWindowRegister(comm, send, bytes, &send_win, NCCL_WIN_COLL_SYMMETRIC));
  CHECK_OR_FAIL(ncclCommWindowRegister(comm, recv, bytes, &recv_win, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof(reqs));
  reqs.railGinBarrierCount = 1;
  reqs.ginSignalCount = 1;
  ncclDevComm dev;
  CHECK_OR_FAIL(ncclDevCommCreate(comm, &reqs, &dev));
  cudaStream_t stream;
  CHECK_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<unsigned char> host(bytes);
  if (!thread_ranks_meet()) return 1;  // every thread rank done with its setup before the first kernel
  int wrong = 0;
  // Rounds end on every rank alike (the host barrier below carries whether
  // every rank was exact): a rank that stopped alone would leave the others
  // in the kernel's barrier, which has no timeout.
  bool everyone_exact = true;
  for (int round = 0; round < kRounds && everyone_exact; ++round) {
    for (int to = 0; to < n; ++to)
      for (size_t i = 0; i < kChunk; ++i) host[to * kChunk + i] = value(rank, to, round, i);
    CHECK_OR_FAIL(cudaMemcpyAsync(send, host.data(), bytes, cudaMemcpyHostToDevice, stream));
    gin_alltoall<<<1, 128, 0, stream>>>(send_win, recv_win, kChunk, dev);
    CHECK_OR_FAIL(cudaGetLastError());
    if (!kernel_finished(rank, round, comm, stream)) return 1;  // the process ends the spinning kernel
    std::fprintf(stderr, "rank %d: round %d's kernel finished\n", rank, round);
    CHECK_OR_FAIL(cudaMemcpyAsync(host.data(), recv, bytes, cudaMemcpyDeviceToHost, stream));
    CHECK_OR_FAIL(cudaStreamSynchronize(stream));
    for (int from = 0; from < n && wrong < 5; ++from)
      for (size_t i = 0; i < kChunk; ++i)
        if (host[from * kChunk + i] != value(from, rank, round, i)) {
          std::fprintf(stderr, "rank %d round %d: byte %zu from rank %d is %d, want %d\n", rank, round, i, from,
                       host[from * kChunk + i], value(from, rank, round, i));
          ++wrong;
          break;
        }
    // The next round's send buffer is written only after every rank read
    // this one: the kernel's barrier is at its start, so a host barrier.
    int one = wrong == 0, all = 0;
    int* d = nullptr;
    CHECK_OR_FAIL(cudaMallocAsync(reinterpret_cast<void**>(&d), 2 * sizeof(int), stream));
    CHECK_OR_FAIL(cudaMemcpyAsync(d, &one, sizeof(int), cudaMemcpyHostToDevice, stream));
    CHECK_OR_FAIL(ncclAllReduce(d, d + 1, 1, ncclInt, ncclSum, comm, stream));
    CHECK_OR_FAIL(cudaMemcpyAsync(&all, d + 1, sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK_OR_FAIL(cudaFreeAsync(d, stream));
    CHECK_OR_FAIL(cudaStreamSynchronize(stream));
    everyone_exact = all == n;
    if (!everyone_exact && !wrong) {
      std::fprintf(stderr, "rank %d round %d: %d of %d ranks were exact\n", rank, round, all, n);
      ++wrong;
    }
  }
  ncclResult_t async = ncclSuccess;
  CHECK_OR_FAIL(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) {
    std::fprintf(stderr, "rank %d: async error %d: %s\n", rank, int(async), ncclGetLastError(comm));
    ++wrong;
  }
  CHECK_OR_FAIL(ncclDevCommDestroy(comm, &dev));
  CHECK_OR_FAIL(ncclCommWindowDeregister(comm, send_win));
  CHECK_OR_FAIL(ncclCommWindowDeregister(comm, recv_win));
  CHECK_OR_FAIL(ncclMemFree(send));
  CHECK_OR_FAIL(ncclMemFree(recv));
  CHECK_OR_FAIL(cudaStreamDestroy(stream));
  CHECK_OR_FAIL(ncclCommFinalize(comm));
  CHECK_OR_FAIL(ncclCommDestroy(comm));
  if (!wrong) std::printf("rank %d: %d GIN rounds of %zu bytes per peer exact\n", rank, kRounds, kChunk);
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* enabled = std::getenv("BRAID_CUDA_GIN");
  if (!enabled || std::string(enabled) != "1") {
    std::printf("SKIP: BRAID_CUDA_GIN=1 is not set\n");
    return 77;
  }
  return run_gpu_ranks(argc, argv, rank_main, "GIN");
}

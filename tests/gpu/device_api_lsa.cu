// NCCL's device API on braid's CUDA backend, from a kernel built against
// NVIDIA's installed nccl_device headers (2.28.9), as NCCL's own
// examples/06_device_api/01_allreduce is: symmetric windows on ncclMemAlloc
// memory, a device communicator with LSA barriers, and an AllReduce whose
// loads and stores go straight to the LSA peers' memory through
// ncclGetLsaPointer.
//
//   braid_gpu_device_api_lsa NRANKS threads|processes
//
// Ranks are threads of this process or forked processes, on device
// rank % (visible devices): several ranks share a GPU where there are
// fewer GPUs than ranks.  Each rank reduces its share of the elements from
// every peer's send window and stores the sums into every peer's receive
// window, between two barrier syncs, 5 rounds over the same devComm.
// Exit 0 when every element is exact, 1 otherwise.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "nccl.h"
#include "rank_runner.h"
#include <nccl_device.h>

namespace {

constexpr int kBlocks = 4, kThreads = 256, kRounds = 5;
constexpr size_t kCount = 1 << 20;  // floats per rank

__global__ void lsa_allreduce(ncclWindow_t send, ncclWindow_t recv, size_t count, ncclDevComm dev) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dev, ncclTeamLsa(dev), dev.lsaBarrier, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);  // every peer's send window is written
  const int n = dev.lsaSize;
  const size_t share = (count + n - 1) / n, begin = share * dev.lsaRank, end = min(count, begin + share);
  for (size_t i = begin + blockIdx.x * blockDim.x + threadIdx.x; i < end; i += size_t(gridDim.x) * blockDim.x) {
    float sum = 0;
    for (int p = 0; p < n; ++p) sum += static_cast<const float*>(ncclGetLsaPointer(send, 0, p))[i];
    for (int p = 0; p < n; ++p) static_cast<float*>(ncclGetLsaPointer(recv, 0, p))[i] = sum;
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_release);  // every peer's stores into this rank are done
}

float input(int rank, int round, size_t i) { return float((rank + 1) * (round + 1) + int(i % 7)); }

int rank_main(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = nullptr;
  CHECK_OR_FAIL(init_rank_on_device(rank, n, id, &comm));
  float *send = nullptr, *recv = nullptr;
  CHECK_OR_FAIL(ncclMemAlloc(reinterpret_cast<void**>(&send), kCount * sizeof(float)));
  CHECK_OR_FAIL(ncclMemAlloc(reinterpret_cast<void**>(&recv), kCount * sizeof(float)));
  ncclWindow_t send_win = nullptr, recv_win = nullptr;
  CHECK_OR_FAIL(ncclCommWindowRegister(comm, send, kCount * sizeof(float), &send_win, NCCL_WIN_COLL_SYMMETRIC));
  CHECK_OR_FAIL(ncclCommWindowRegister(comm, recv, kCount * sizeof(float), &recv_win, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof(reqs));
  reqs.lsaBarrierCount = kBlocks;
  ncclDevComm dev;
  CHECK_OR_FAIL(ncclDevCommCreate(comm, &reqs, &dev));
  cudaStream_t stream;
  CHECK_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<float> host(kCount);
  if (!thread_ranks_meet()) return 1;  // every thread rank done with its setup before the first kernel
  int wrong = 0;
  // Every round on every rank, wrong or not: a rank that stopped early would
  // leave the others in the kernel's barrier, which has no timeout.
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < kCount; ++i) host[i] = input(rank, round, i);
    CHECK_OR_FAIL(cudaMemcpyAsync(send, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice, stream));
    lsa_allreduce<<<kBlocks, kThreads, 0, stream>>>(send_win, recv_win, kCount, dev);
    CHECK_OR_FAIL(cudaGetLastError());
    CHECK_OR_FAIL(cudaMemcpyAsync(host.data(), recv, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK_OR_FAIL(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < kCount && wrong < 5; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += input(r, round, i);
      if (host[i] != want) {
        std::fprintf(stderr, "rank %d round %d: element %zu is %g, want %g\n", rank, round, i, host[i], want);
        ++wrong;
      }
    }
  }
  CHECK_OR_FAIL(ncclDevCommDestroy(comm, &dev));
  CHECK_OR_FAIL(ncclCommWindowDeregister(comm, send_win));
  CHECK_OR_FAIL(ncclCommWindowDeregister(comm, recv_win));
  CHECK_OR_FAIL(ncclMemFree(send));
  CHECK_OR_FAIL(ncclMemFree(recv));
  CHECK_OR_FAIL(cudaStreamDestroy(stream));
  CHECK_OR_FAIL(ncclCommFinalize(comm));
  CHECK_OR_FAIL(ncclCommDestroy(comm));
  if (!wrong) std::printf("rank %d: %d rounds of %zu floats exact\n", rank, kRounds, kCount);
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run_gpu_ranks(argc, argv, rank_main, "LSA"); }

// A communicator's calls run in issue order whatever streams they are on,
// as NCCL's do (src/exec/cuda/cuda_backend.cc, begin_call): they share the
// FIFO counters, the LL call counter and the scratch buffers, so two of
// them running at once corrupt data or wait forever.
//
//   braid_gpu_streams_order [NRANKS]      (default 4; ranks as threads on device 0)
//
// Each rank issues 32 AllReduces alternating between two non-blocking
// streams, small (the LL protocol) and large (a schedule) in turn, each on
// its own buffers, then waits for both streams and checks every element.
// Then a group sends to the next rank on one stream and receives from the
// previous one on the other.  NCCL's rule for a group on several streams is
// that the group's work waits for each stream's earlier work, and each
// stream's later work waits for the group's: so the send buffer is filled
// on the receive's stream just before (behind a 100 ms host function), and
// the received values are copied out on the receive's stream alone.
// Exit 0 when all are exact, 1 otherwise (with the first wrong values).
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "rank_runner.h"

namespace {

constexpr int kCalls = 32;
constexpr size_t kSizes[2] = {256, 256 << 10};  // floats: 1 KiB on LL, 1 MiB on a schedule

std::atomic<int> failures{0};
std::atomic<int> arrived{0};  // see all_arrived

// Every rank has arrived `round` times (bounded: a rank that failed early
// never arrives, and the others must not wait for it forever).  Around
// allocations and frees: those can wait for kernels already running, and
// those wait for this rank's.
bool all_arrived(int n, int round) {
  arrived.fetch_add(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (arrived.load() < round * n)
    if (std::chrono::steady_clock::now() > until) return false;
    else std::this_thread::yield();
  return true;
}

void fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  failures.fetch_add(1);
}

// The value rank r contributes to element i of call k: small integers, so
// every sum is exact in float whatever the order.
float input(int r, int k, size_t i) { return float((r + 1) * (k % 5 + 1) + int(i % 3)); }

void rank_main(int rank, int n, ncclUniqueId id) {
  cudaSetDevice(0);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return fail(rank, "init failed");
  cudaStream_t streams[2];
  for (cudaStream_t& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  std::vector<float*> send(kCalls), recv(kCalls);
  bool ready = true;
  for (int k = 0; k < kCalls; ++k) {
    const size_t count = kSizes[k / 2 % 2];
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = input(rank, k, i);
    ready = ready && cudaMalloc(&send[k], count * sizeof(float)) == cudaSuccess &&
            cudaMalloc(&recv[k], count * sizeof(float)) == cudaSuccess &&
            cudaMemcpy(send[k], host.data(), count * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  if (!all_arrived(n, 1)) return fail(rank, "a rank did not allocate its buffers");
  if (!ready) return fail(rank, "device buffers: " + std::string(cudaGetErrorString(cudaGetLastError())));
  for (int k = 0; k < kCalls; ++k)
    if (ncclAllReduce(send[k], recv[k], kSizes[k / 2 % 2], ncclFloat, ncclSum, comm, streams[k % 2]) != ncclSuccess)
      return fail(rank, "call " + std::to_string(k) + ": " + ncclGetLastError(comm));
  for (cudaStream_t s : streams)
    if (cudaStreamSynchronize(s) != cudaSuccess) return fail(rank, "stream sync failed");
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm, &async);
  if (async != ncclSuccess) return fail(rank, std::string("asynchronous error: ") + ncclGetErrorString(async));
  for (int k = 0; k < kCalls; ++k) {
    const size_t count = kSizes[k / 2 % 2];
    std::vector<float> host(count);
    cudaMemcpy(host.data(), recv[k], count * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += input(r, k, i);
      if (host[i] != want) {
        fail(rank, "call " + std::to_string(k) + " element " + std::to_string(i) + ": " + std::to_string(host[i]) +
                       ", wanted " + std::to_string(want));
        break;
      }
    }
    cudaFree(send[k]);
    cudaFree(recv[k]);
  }
  // The group on two streams: the send buffer filled on the receive's
  // stream late, the received values read on it alone.
  constexpr size_t kRing = 64 << 10;
  std::vector<float> host(kRing, float(rank + 1)), got(kRing, 0.f);
  float *src = nullptr, *out = nullptr, *in = nullptr;
  const size_t bytes = kRing * sizeof(float);
  if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&out, bytes) != cudaSuccess ||
      cudaMalloc(&in, bytes) != cudaSuccess)
    return fail(rank, "device buffers for the group");
  cudaMemcpy(src, host.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemset(out, 0, bytes);
  cudaMemset(in, 0, bytes);
  cudaDeviceSynchronize();
  if (!all_arrived(n, 2)) return fail(rank, "a rank did not allocate its group buffers");
  cudaLaunchHostFunc(
      streams[1], [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }, nullptr);
  cudaMemcpyAsync(out, src, bytes, cudaMemcpyDeviceToDevice, streams[1]);
  ncclGroupStart();
  ncclSend(out, kRing, ncclFloat, (rank + 1) % n, comm, streams[0]);
  ncclRecv(in, kRing, ncclFloat, (rank + n - 1) % n, comm, streams[1]);
  if (ncclGroupEnd() != ncclSuccess) return fail(rank, std::string("group: ") + ncclGetLastError(comm));
  cudaMemcpyAsync(got.data(), in, kRing * sizeof(float), cudaMemcpyDeviceToHost, streams[1]);
  cudaStreamSynchronize(streams[1]);
  const float want = float((rank + n - 1) % n + 1);
  for (size_t i = 0; i < kRing; ++i)
    if (got[i] != want) {
      fail(rank, "group on two streams: element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                     " on the receive's stream, wanted " + std::to_string(want));
      break;
    }
  cudaStreamSynchronize(streams[0]);
  all_arrived(n, 3);  // no rank frees while a peer's kernel may still wait for it
  cudaFree(src);
  cudaFree(out);
  cudaFree(in);
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
  ncclCommDestroy(comm);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  if (n < 2 || n > 64) {
    std::fprintf(stderr, "usage: %s [NRANKS: 2..64]\n", argv[0]);
    return 2;
  }
  prepare_thread_ranks();  // ranks are threads, with two streams each
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) ranks.emplace_back(rank_main, r, n, id);
  for (std::thread& t : ranks) t.join();
  std::printf("streams_order: %d ranks, %d AllReduces alternating two streams, a group on two streams: %s\n", n,
              kCalls, failures ? "FAILED" : "all exact");
  return failures ? 1 : 0;
}

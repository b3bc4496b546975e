// The AlltoAllv whose counts live in device memory (braid/alltoallv.h) as
// one kernel on the caller's stream: the protocol of src/moe/alltoallv.h,
// its senders' steps shared with the host (alltoallv_protocol.h), over
// LsaMemory (braid/moe.cuh).  CTA b of B sends to the destinations
// rank+1+b, rank+1+b+B, ... (mod nranks), after each acknowledged the last
// call; every CTA then waits for every source's count word and copies the
// blocks b, b+B, ... out; the last CTA to finish acknowledges this call to
// every source and advances the call number (graph replays read it).
#include <cuda_runtime.h>

#include "braid/moe.cuh"
#include "src/moe/alltoallv_protocol.h"
#include "src/moe/cuda/device_moe.h"
#include "src/moe/cuda/kernel_common.cuh"

namespace braid::moe::cuda {

namespace {

__global__ void alltoallv_kernel(DeviceAlltoAllv h, const char* send, const int64_t* send_counts, char* recv,
                                 int64_t* recv_counts) {
  extern __shared__ int64_t shared[];
  const AlltoAllvLayout& w = h.layout;
  const int32_t n = w.nranks;
  int64_t* offsets = shared;         // [n + 1] this rank's send offsets
  int64_t* counts = shared + n + 1;  // [n + 1] received counts, then their offsets
  __shared__ int32_t bad_dest;
  __shared__ int32_t cut;  // a wait for this CTA's destinations gave up: it sends nothing
  const ncclCoopCta cta;
  const uint64_t call = h.state->calls + 1;
  const uint32_t epoch = epoch_of_call(call);
  LsaMemory<ncclCoopCta> mm(cta, h.window, 0, h.rank);
  Timeout expired = Timeout::after(h.timeout_ns, &h.state->stop);
  if (threadIdx.x == 0) cut = 0;
  __syncthreads();

  // This CTA's destinations acknowledged the last call: their blocks for
  // this rank are free.
  if (call > 1) {
    const auto* acks = reinterpret_cast<const uint64_t*>(mm.window(h.rank) + w.acks);
    const uint32_t last = epoch_of_call(call - 1);
    for (int32_t i = 1 + blockIdx.x + threadIdx.x * gridDim.x; i <= n; i += gridDim.x * blockDim.x) {
      const int32_t d = (h.rank + i) % n;
      while (!epoch_reached(signal_epoch(mm.load(&acks[d])), last)) {
        if (expired()) {
          if (!load_acquire(h.state->stop)) report(h.error, &h.state->stop, kDeviceTimeout, false, d, -1, 0, last);
          atomicExch(&cut, 1);
          break;
        }
        mm.pause();
      }
    }
  }
  if (threadIdx.x == 0) bad_dest = send_offsets(send_counts, n, w.max_count, offsets);
  __syncthreads();
  const bool bad = bad_dest >= 0;
  if (bad && blockIdx.x == 0 && threadIdx.x == 0)
    report(h.error, &h.state->stop, kDeviceBadCount, false, h.rank, -1, bad_dest, epoch);
  // A destination that did not acknowledge the last call may still be
  // copying out of its block for this rank: nothing is written there (its
  // wait for this rank's count gives up, as the host's protocol leaves it).
  // A replayed graph of a stopped handle lands here too: its waits give up
  // at once, and a destination that did acknowledge is safe to write.
  if (!cut) alltoallv_send(mm, w, h.rank, send, offsets, bad, epoch, int32_t(blockIdx.x), int32_t(gridDim.x));

  // Every source's count word, by the CTA's threads.
  const auto* words = reinterpret_cast<const uint64_t*>(mm.window(h.rank) + w.counts);
  for (int32_t s = threadIdx.x; s < n; s += blockDim.x) {
    uint32_t count = 0;
    while (!epoch_reached(signal_epoch(mm.load(&words[s])), epoch)) {
      if (expired()) {
        if (!load_acquire(h.state->stop)) report(h.error, &h.state->stop, kDeviceTimeout, false, s, -1, 0, epoch);
        break;
      }
      mm.pause();
    }
    if (epoch_reached(signal_epoch(mm.load(&words[s])), epoch)) count = signal_count(mm.load(&words[s]));
    if (count == kFailedSender) {
      // This rank's own marker: CTA 0 reported it, naming the count.
      if (s != h.rank) report(h.error, &h.state->stop, kDeviceBadCount, false, s, -1, -1, epoch);
      count = 0;
    } else if (count > w.max_count) {
      report(h.error, &h.state->stop, kDeviceCountOverMax, false, s, -1, count, epoch);
      count = 0;
    }
    counts[s] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t at = 0;
    for (int32_t s = 0; s < n; ++s) {
      const int64_t c = counts[s];
      if (blockIdx.x == 0) recv_counts[s] = c;
      counts[s] = at;
      at += c;
    }
    counts[n] = at;
  }
  __syncthreads();
  const char* mine = mm.window(h.rank);
  for (int32_t s = blockIdx.x; s < n; s += gridDim.x)
    copy_coop(cta, recv + counts[s] * w.elem_bytes, mine + w.block(s),
              size_t(counts[s + 1] - counts[s]) * w.elem_bytes);

  // The last CTA out acknowledges: every block of this call was copied.
  __syncthreads();
  uint32_t last = 0;
  if (threadIdx.x == 0) last = last_to_finish(&h.state->exits, call);
  if (coop_broadcast(cta, last)) {
    alltoallv_ack(mm, w, h.rank, epoch);
    if (threadIdx.x == 0) h.state->calls = call;
  }
}

}  // namespace

int preload_alltoallv_kernel() {
  cudaFuncAttributes attr;
  return int(cudaFuncGetAttributes(&attr, alltoallv_kernel));
}

int launch_alltoallv(const DeviceAlltoAllv& h, int ctas, const void* send, const int64_t* send_counts, void* recv,
                     int64_t* recv_counts, cudaStream_t stream) {
  const size_t shared = 2 * (size_t(h.layout.nranks) + 1) * sizeof(int64_t);
  alltoallv_kernel<<<ctas, kThreadsPerCta, shared, stream>>>(h, static_cast<const char*>(send), send_counts,
                                                             static_cast<char*>(recv), recv_counts);
  return int(cudaGetLastError());
}

}  // namespace braid::moe::cuda

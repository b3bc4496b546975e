#include "src/exec/cuda/cuda_rma.h"

#include <algorithm>
#include <vector>

#include "src/base/log.h"
#include "src/exec/cuda/braid_streams.h"
#include "src/exec/cuda/cuda_try.h"
#include "src/exec/cuda/launch.h"

namespace braid::cuda {

void CudaRma::window_registered(const WindowInfo& window) {
  if (window.mapped.size() == size_t(s_.nranks)) mapped_[window.seq] = window.mapped;
}

// (ctx, sigIdx) as one index among the arena's pairs.  The API checked
// both against the config; the arena holds numRmaCtx x numRmaSig pairs up
// to CudaArenaLayout::kMaxRmaPairs, which only a larger config passes.
Status CudaRma::pair_of(int ctx, int signal, const char* what, uint64_t* pair) const {
  *pair = uint64_t(ctx) * uint64_t(s_.signals) + uint64_t(signal);
  if (*pair >= s_.pairs)
    return BRAID_ERROR(ncclInvalidUsage, "{}: ctx {} sigIdx {} is pair {} (ctx x numRmaSig + sigIdx), past the {} "
                       "pairs the CUDA backend keeps counters for", what, ctx, signal, *pair, s_.pairs);
  return Status::ok();
}

uint64_t* CudaRma::counters(int rank, Counters which, int peer, uint64_t pair) const {
  const uint64_t words = uint64_t(s_.nranks) * s_.pairs;
  return reinterpret_cast<uint64_t*>(s_.arenas[size_t(rank)] + s_.offset) + which * words + uint64_t(peer) * s_.pairs +
         pair;
}

Status CudaRma::write(const RmaCall& call) const {
  uint64_t pair = 0;
  BRAID_TRY(pair_of(call.ctx, call.signal, call.to_window ? "ncclPutSignal" : "ncclSignal", &pair));
  if (call.to_window) {
    auto window = mapped_.find(call.window_seq);
    if (window == mapped_.end())
      return BRAID_ERROR(ncclInvalidUsage, "ncclPutSignal: on the CUDA backend the window must be symmetric "
                         "(ncclMemAlloc memory registered by every rank, all of them LSA peers), so that rank {}'s "
                         "part is mapped here", call.peer);
    if (call.bytes)
      CUDA_TRY(cudaMemcpyAsync(window->second[size_t(call.peer)] + call.offset, call.data, call.bytes,
                               cudaMemcpyDefault, call.stream));
  }
  CUDA_TRY(launch_rma_signal(counters(s_.rank, kSent, call.peer, pair), counters(call.peer, kArrived, s_.rank, pair),
                             call.stream));
  return Status::ok();
}

Status CudaRma::wait(const RmaCall& call) const {
  // Every counter checked before the first launch: a wait enqueues all of
  // its launches or none.
  std::vector<RmaWait> waits;
  for (const SignalWait& w : call.waits) {
    uint64_t pair = 0;
    BRAID_TRY(pair_of(w.ctx, w.signal, "ncclWaitSignal", &pair));
    waits.push_back({uint32_t(uint64_t(w.peer) * s_.pairs + pair), w.peer, uint32_t(pair), w.count});
  }
  RmaWaitLaunch launch;
  launch.arrived = counters(s_.rank, kArrived, 0, 0);
  launch.consumed = counters(s_.rank, kConsumed, 0, 0);
  launch.error = s_.error;
  launch.abort_flag = s_.abort_flag;
  launch.exited = s_.exited;
  launch.timeout_ns = call.wait_ms > 0 ? uint64_t(call.wait_ms) * 1000000ull : s_.timeout_ns;
  // kMaxRmaWaits counters a launch; more go in launches one after another.
  for (size_t first = 0; first < waits.size(); first += kMaxRmaWaits) {
    launch.n = uint32_t(std::min<size_t>(kMaxRmaWaits, waits.size() - first));
    std::copy_n(waits.begin() + ptrdiff_t(first), launch.n, launch.waits);
    CUDA_TRY(launch_rma_wait(launch, call.stream));
  }
  return Status::ok();
}

uint64_t CudaRma::pending() const {
  // arrived[] and consumed[] lie one after the other (counters()): one copy.
  static_assert(kConsumed == kArrived + 1, "consumed[] follows arrived[]");
  const size_t words = size_t(s_.nranks) * s_.pairs;
  std::vector<uint64_t> counts(2 * words);
  Status read = cudaSetDevice(s_.device) == cudaSuccess
                    ? on_own_stream([&](cudaStream_t stream) {
                        return cudaMemcpyAsync(counts.data(), counters(s_.rank, kArrived, 0, 0),
                                               counts.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream);
                      })
                    : BRAID_ERROR(ncclUnhandledCudaError, "cudaSetDevice({}) failed", s_.device);
  if (!read.is_ok()) {
    BRAID_WARN("rank {}: one-sided signals not waited for could not be counted: {}", s_.rank, read.message());
    return 0;
  }
  uint64_t pending = 0;
  for (size_t i = 0; i < words; ++i) pending += counts[i] - counts[words + i];
  return pending;
}

}  // namespace braid::cuda

#include "src/moe/cuda/cuda_moe.h"

#include <cuda_runtime.h>

#include <cstdint>


#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"

namespace braid::moe::cuda {

namespace {

// Carves `n` T's, 16-byte aligned, off a buffer being laid out.
template <class T>
T* carve(char* base, size_t* used, size_t n) {
  *used = (*used + 15) / 16 * 16;
  T* p = reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(base) + *used);  // base may be null: measuring
  *used += n * sizeof(T);
  return p;
}

// Lays out the kernels' state from `base` (nullptr: only measures); returns the bytes.
size_t lay_out_state(char* base, DeviceMoe* d) {
  const Shape& s = d->shape;
  size_t used = 0;
  d->state = carve<DeviceMoeState>(base, &used, 1);
  d->dispatch_arrivals = carve<uint32_t>(base, &used, size_t(s.nranks));
  d->combine_arrivals = carve<uint32_t>(base, &used, size_t(s.nranks));
  d->wanted = carve<int32_t>(base, &used, size_t(s.experts));
  d->sent = carve<int32_t>(base, &used, size_t(s.experts));
  d->topk = carve<int32_t>(base, &used, size_t(s.max_tokens) * s.top_k);
  d->slots = carve<int32_t>(base, &used, size_t(s.max_tokens) * s.top_k);
  d->received = carve<int32_t>(base, &used, size_t(s.blocks()));
  d->first_row = carve<int64_t>(base, &used, size_t(s.blocks()));
  return used;
}

constexpr size_t kMaxSharedBytes = 48 << 10;  // what a kernel takes without opting in to more

}  // namespace

Status CudaMoe::create(ncclComm_t comm, const braidMoeConfig_t& config, int device, std::unique_ptr<MoeBackend>* out) {
  Shape shape;
  BRAID_TRY(agree_config(comm, config, device, &shape));
  int rank = 0;
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  if (const size_t shared = kernel_shared_bytes(shape) + kernel_static_shared_bytes(); shared > kMaxSharedBytes)
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: {} experts need {} bytes of shared memory per CTA, over "
                       "{}", shape.experts, shared, kMaxSharedBytes);

  std::unique_ptr<CudaMoe> moe(new CudaMoe(comm, device, config.blocks > 0 ? config.blocks : 8));
  DeviceMoe& d = moe->dev_;
  d.shape = shape;
  d.layout = WindowLayout::of(shape, config.zeroCopy);
  d.output = config.layout == braidMoeRankMajor ? OutputLayout::RankMajor : OutputLayout::ExpertMajor;
  d.rank = rank;
  d.dtype = config.dtype;
  d.timeout_ns = uint64_t(wait_bound_ms(config.timeoutMs)) * 1000000ull;
  const size_t state_bytes = lay_out_state(nullptr, &d);
  BRAID_TRY(LsaWindow::open(comm, device, d.layout.bytes, state_bytes, "braidMoeCreate", &moe->window_));
  d.window = moe->window_->window();
  d.error = moe->window_->device_error();
  lay_out_state(static_cast<char*>(moe->window_->state()), &d);
  *out = std::move(moe);
  return Status::ok();
}

CudaMoe::~CudaMoe() = default;

Status CudaMoe::async_error() {
  if (!window_) return BRAID_ERROR(ncclInvalidUsage, "the MoE handle was destroyed");
  DeviceMoeError e{};
  const int32_t code = window_->error_code(&e);
  if (code == kDeviceOk) return Status::ok();
  const char* call = e.combine ? "combine" : "dispatch";
  const int rank = dev_.rank;
  switch (code) {
    case kDeviceTimeout:
      return BRAID_ERROR(ncclTimeout, "rank {}: {} epoch {}: no signal from rank {} for local expert {} within {} ms "
                         "(the rank is late, gone, or failed its call); the handle takes no more calls", rank, call,
                         e.epoch, e.peer, e.local_expert, dev_.timeout_ns / 1000000);
    case kDeviceBadExpert:
      return BRAID_ERROR(ncclInvalidArgument, "rank {}: braidMoeDispatch: token {} routes to an expert not in [0, {}) "
                         "or -1 (the call fails on every rank); the handle takes no more calls", rank, e.value,
                         dev_.shape.experts);
    case kDeviceRefused:
      return BRAID_ERROR(ncclInvalidArgument, "rank {}: {} epoch {}: this rank's arguments were refused (that call's "
                         "error said why); the handle takes no more calls", rank, call, e.epoch);
    case kDevicePeerFailed:
      return BRAID_ERROR(ncclRemoteError, "rank {}: {} epoch {}: the call failed on another rank (rank {}'s word says "
                         "so; the rank with the bad argument says which); the handle takes no more calls", rank, call,
                         e.epoch, e.peer);
    case kDevicePlanTimeout:
      return BRAID_ERROR(ncclTimeout,
                         "rank {}: dispatch epoch {}: the kernel's CTAs waited {} ms for CTA 0's plan (not all "
                         "resident at once? fewer blocks); the handle takes no more calls",
                         rank, e.epoch, dev_.timeout_ns / 1000000);
    case kDeviceOverCapacity:
      return BRAID_ERROR(ncclInternalError, "rank {}: {}: rank {} signalled {} rows for local expert {}, capacity {}",
                         rank, call, e.peer, e.value, e.local_expert, dev_.shape.capacity);
    default:
      return BRAID_ERROR(ncclInternalError, "rank {}: {}: rank {} returned {} rows for local expert {}, not the rows "
                         "sent", rank, call, e.peer, e.value, e.local_expert);
  }
}

Status CudaMoe::dispatch(const void* tokens, const int32_t* topk, int32_t ntokens, void* out, int32_t* recv_counts,
                         int64_t* dropped, cudaStream_t stream) {
  BRAID_TRY(async_error());
  if (combine_due_)
    return BRAID_ERROR(ncclInvalidUsage, "braidMoeDispatch: the last dispatch's combine has not run (dispatch and "
                       "combine alternate: the windows still hold that call's rows)");
  // Refused arguments still launch the kernel, which sends kFailedSender
  // words (calls.h) so that the peers' calls fail at once, then stops the
  // handle.
  const std::string problem = dispatch_problem(dev_.shape, tokens, topk, ntokens, out, recv_counts);
  const bool refused = !problem.empty();
  const OnDevice on(device_);
  const bool pull = dev_.layout.dispatch_buffer && tokens == window_->base() + dev_.layout.dispatch_buffer;
  const int e = refused ? launch_dispatch(dev_, ctas_, nullptr, false, nullptr, 0, nullptr, nullptr, nullptr, true,
                                          stream)
                        : launch_dispatch(dev_, ctas_, tokens, pull, topk, ntokens, out, recv_counts, dropped, false,
                                          stream);
  if (e) return cuda_status(cudaError_t(e), "braidMoeDispatch: the kernel's launch");
  window_->launched(stream);
  if (refused)
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeDispatch: {} (the call fails on every rank; the handle takes "
                       "no more calls)", problem);
  combine_due_ = true;
  tokens_ = ntokens;
  return Status::ok();
}

Status CudaMoe::combine(const void* expert_out, const float* weights, void* out, cudaStream_t stream) {
  BRAID_TRY(async_error());
  if (!combine_due_)
    return BRAID_ERROR(ncclInvalidUsage, "braidMoeCombine: no dispatch to combine (dispatch and combine alternate)");
  const std::string problem = combine_problem(tokens_, expert_out, weights, out);  // as dispatch's
  const bool refused = !problem.empty();
  const OnDevice on(device_);
  const bool pull = dev_.layout.combine_buffer && expert_out == window_->base() + dev_.layout.combine_buffer;
  const int e = launch_combine(dev_, ctas_, expert_out, pull && !refused, weights, out, refused, stream);
  if (e) return cuda_status(cudaError_t(e), "braidMoeCombine: the kernel's launch");
  window_->launched(stream);
  combine_due_ = false;
  if (refused)
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeCombine: {} (the call fails on every rank; the handle takes no "
                       "more calls)", problem);
  return Status::ok();
}

Status CudaMoe::dispatch_buffer(void** out) {
  if (!window_) return BRAID_ERROR(ncclInvalidUsage, "the MoE handle was destroyed");
  return zero_copy_buffer(window_->base(), dev_.layout.dispatch_buffer, "braidMoeGetDispatchBuffer",
                          "braidMoeZeroCopyDispatch", out);
}

Status CudaMoe::combine_buffer(void** out) {
  if (!window_) return BRAID_ERROR(ncclInvalidUsage, "the MoE handle was destroyed");
  return zero_copy_buffer(window_->base(), dev_.layout.combine_buffer, "braidMoeGetCombineBuffer",
                          "braidMoeZeroCopyCombine", out);
}

Status CudaMoe::stats(braidMoeStats_t* out) {
  if (!window_) return BRAID_ERROR(ncclInvalidUsage, "the MoE handle was destroyed");
  return window_->read(out, &dev_.state->stats, sizeof(*out));
}

Status CudaMoe::destroy() {
  if (!window_) return Status::ok();
  Status s = window_->close();
  window_.reset();
  return s;
}

}  // namespace braid::moe::cuda

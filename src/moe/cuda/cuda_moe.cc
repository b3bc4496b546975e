#include "src/moe/cuda/cuda_moe.h"

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"

namespace braid::moe::cuda {

namespace {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return BRAID_ERROR(ncclUnhandledCudaError, "{} failed: {}", what, cudaGetErrorString(e));
}

// The handle's device is current while it lives; the caller's comes back.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) cudaSetDevice(device);
  }
  ~OnDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

// Carves `n` T's, 16-byte aligned, off a buffer being laid out.
template <class T>
T* carve(char* base, size_t* used, size_t n) {
  *used = (*used + 15) / 16 * 16;
  T* p = reinterpret_cast<T*>(base + *used);
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
  int nranks = 0, rank = 0;
  BRAID_TRY(nccl_status(comm, ncclCommCount(comm, &nranks), "ncclCommCount"));
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  // The kernels store into every rank's window: every rank's LSA team must
  // be the whole communicator (agreed, so that all fail alike).
  std::vector<int64_t> teams;
  BRAID_TRY(gather_word(comm, device, lsa_team_size(comm), &teams, "the LSA teams' agreement"));
  for (int r = 0; r < nranks; ++r)
    if (teams[size_t(r)] != nranks)
      return BRAID_ERROR(ncclInvalidArgument,
                         "braidMoeCreate: rank {}'s LSA team has {} of the {} ranks; MoE on CUDA needs every rank's "
                         "window within reach of LSA pointers (NVLink, or one GPU); over GIN it is not built yet",
                         r, teams[size_t(r)], nranks);
  if (kernel_shared_bytes(shape) > kMaxSharedBytes)
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: {} experts need {} bytes of shared memory per CTA, over "
                       "{}", shape.experts, kernel_shared_bytes(shape), kMaxSharedBytes);

  std::unique_ptr<CudaMoe> moe(new CudaMoe(comm, device, config.blocks > 0 ? config.blocks : 8));
  DeviceMoe& d = moe->dev_;
  d.shape = shape;
  d.layout = WindowLayout::of(shape);
  d.output = config.layout == braidMoeRankMajor ? OutputLayout::RankMajor : OutputLayout::ExpertMajor;
  d.rank = rank;
  d.dtype = config.dtype;
  d.timeout_ns = uint64_t(timeout_ms_of(config)) * 1000000ull;
  const OnDevice on(device);
  BRAID_TRY(moe->allocate(d.layout.bytes));
  *out = std::move(moe);
  return Status::ok();
}

Status CudaMoe::allocate(size_t window_bytes) {
  // This rank's memory first, then whether every rank got its own, and
  // only then the collective registration.
  const size_t state_bytes = lay_out_state(nullptr, &dev_);
  cudaStream_t stream = nullptr;
  Status s = nccl_status(comm_, ncclMemAlloc(&window_memory_, window_bytes), "ncclMemAlloc of the MoE window");
  if (s.is_ok()) s = cuda_status(cudaMalloc(&state_memory_, state_bytes), "cudaMalloc of the MoE state");
  if (s.is_ok())
    s = cuda_status(cudaHostAlloc(reinterpret_cast<void**>(&error_host_), sizeof(DeviceMoeError), cudaHostAllocMapped),
                    "cudaHostAlloc of the MoE error record");
  if (s.is_ok()) {
    std::memset(error_host_, 0, sizeof(DeviceMoeError));
    s = cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_.error), error_host_, 0),
                    "cudaHostGetDevicePointer");
  }
  if (s.is_ok()) s = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (s.is_ok()) s = cuda_status(cudaMemsetAsync(window_memory_, 0, window_bytes, stream), "cudaMemsetAsync");
  if (s.is_ok()) s = cuda_status(cudaMemsetAsync(state_memory_, 0, state_bytes, stream), "cudaMemsetAsync");
  if (s.is_ok()) s = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (stream) cudaStreamDestroy(stream);
  if (s.is_ok()) lay_out_state(static_cast<char*>(state_memory_), &dev_);

  std::vector<int64_t> all;
  BRAID_TRY(gather_word(comm_, device_, s.is_ok(), &all, "the MoE memory's agreement"));
  if (!s.is_ok()) return std::move(s).context("braidMoeCreate");
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r])
      return BRAID_ERROR(ncclSystemError, "braidMoeCreate: rank {} could not allocate its MoE memory (its error says "
                         "why)", r);
  BRAID_TRY(nccl_status(comm_, ncclCommWindowRegister(comm_, window_memory_, window_bytes, &dev_.window,
                                                      NCCL_WIN_COLL_SYMMETRIC),
                        "ncclCommWindowRegister of the MoE window"));
  registered_ = true;
  return Status::ok();
}

void CudaMoe::release() {
  if (state_memory_) cudaFree(state_memory_);
  if (error_host_) cudaFreeHost(error_host_);
  // Registered memory a peer may still store into stays (destroy frees it
  // after its barrier).
  if (window_memory_ && !registered_) ncclMemFree(window_memory_);
  state_memory_ = nullptr;
  error_host_ = nullptr;
  window_memory_ = nullptr;
}

CudaMoe::~CudaMoe() {
  const OnDevice on(device_);
  release();
}

Status CudaMoe::async_error() {
  if (!error_host_) return Status::ok();
  const int32_t code = __atomic_load_n(&error_host_->code, __ATOMIC_ACQUIRE);
  if (code == kDeviceOk) return Status::ok();
  const DeviceMoeError& e = *error_host_;
  const char* call = e.combine ? "combine" : "dispatch";
  const int rank = dev_.rank;
  switch (code) {
    case kDeviceTimeout:
      return BRAID_ERROR(ncclTimeout, "rank {}: {} epoch {}: no signal from rank {} for local expert {} within {} ms "
                         "(the rank is late, gone, or failed its call); the handle takes no more calls", rank, call,
                         e.epoch, e.peer, e.local_expert, dev_.timeout_ns / 1000000);
    case kDeviceBadExpert:
      return BRAID_ERROR(ncclInvalidArgument, "rank {}: braidMoeDispatch: token {} routes to an expert not in [0, {}) "
                         "or -1 (its other choices were sent); the handle takes no more calls", rank, e.value,
                         dev_.shape.experts);
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
  if (ntokens < 0 || ntokens > dev_.shape.max_tokens)
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeDispatch: numTokens {} is not in [0, maxTokensPerRank = {}]",
                       ntokens, dev_.shape.max_tokens);
  if (ntokens > 0 && (!tokens || !topk))
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeDispatch: tokens or topkIdx is NULL");
  if (!out || !recv_counts) return BRAID_ERROR(ncclInvalidArgument, "braidMoeDispatch: recvTokens or recvCounts is NULL");
  const OnDevice on(device_);
  const int e = launch_dispatch(dev_, ctas_, tokens, topk, ntokens, out, recv_counts, dropped, stream);
  if (e) return cuda_status(cudaError_t(e), "braidMoeDispatch: the kernel's launch");
  last_stream_ = stream;
  combine_due_ = true;
  tokens_ = ntokens;
  return Status::ok();
}

Status CudaMoe::combine(const void* expert_out, const float* weights, void* out, cudaStream_t stream) {
  BRAID_TRY(async_error());
  if (!combine_due_)
    return BRAID_ERROR(ncclInvalidUsage, "braidMoeCombine: no dispatch to combine (dispatch and combine alternate)");
  if (!expert_out || (tokens_ > 0 && (!weights || !out)))
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeCombine: expertOut, topkWeights or outTokens is NULL");
  const OnDevice on(device_);
  const int e = launch_combine(dev_, ctas_, expert_out, weights, out, stream);
  if (e) return cuda_status(cudaError_t(e), "braidMoeCombine: the kernel's launch");
  last_stream_ = stream;
  combine_due_ = false;
  return Status::ok();
}

Status CudaMoe::stats(braidMoeStats_t* out) {
  const OnDevice on(device_);
  return cuda_status(cudaMemcpy(out, &dev_.state->stats, sizeof(*out), cudaMemcpyDeviceToHost),
                     "braidMoeGetStats: cudaMemcpy");
}

Status CudaMoe::destroy() {
  if (!registered_) return Status::ok();
  const OnDevice on(device_);
  // This rank's kernels are done; after the barrier every rank's are, and
  // no peer stores into the window any more.
  Status s = last_stream_ ? cuda_status(cudaStreamSynchronize(last_stream_), "braidMoeDestroy: cudaStreamSynchronize")
                          : Status::ok();
  std::vector<int64_t> all;
  BRAID_TRY(gather_word(comm_, device_, 1, &all, "braidMoeDestroy: the closing barrier"));
  const Status d =
      nccl_status(comm_, ncclCommWindowDeregister(comm_, dev_.window), "braidMoeDestroy: ncclCommWindowDeregister");
  const Status f = nccl_status(comm_, ncclMemFree(window_memory_), "braidMoeDestroy: ncclMemFree");
  registered_ = false;
  window_memory_ = nullptr;
  release();
  return !s.is_ok() ? s : !d.is_ok() ? d : f;
}

}  // namespace braid::moe::cuda

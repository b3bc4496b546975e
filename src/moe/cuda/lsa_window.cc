#include "src/moe/cuda/lsa_window.h"

#include <cstring>
#include <vector>

#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"

namespace braid::moe::cuda {

Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::ok();
  return BRAID_ERROR(ncclUnhandledCudaError, "{} failed: {}", what, cudaGetErrorString(e));
}

OnDevice::OnDevice(int device) {
  if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) cudaSetDevice(device);
}
OnDevice::~OnDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

Status LsaWindow::open(ncclComm_t comm, int device, size_t window_bytes, size_t state_bytes, const char* what,
                       std::unique_ptr<LsaWindow>* out) {
  int nranks = 0;
  BRAID_TRY(nccl_status(comm, ncclCommCount(comm, &nranks), "ncclCommCount"));
  // The kernels store into every rank's window: every rank's LSA team must
  // be the whole communicator (agreed, so that all fail alike).
  std::vector<int64_t> teams;
  BRAID_TRY(gather_word(comm, device, lsa_team_size(comm), &teams, "the LSA teams' agreement"));
  for (int r = 0; r < nranks; ++r)
    if (teams[size_t(r)] != nranks)
      return BRAID_ERROR(ncclInvalidArgument,
                         "{}: rank {}'s LSA team has {} of the {} ranks; on CUDA every rank's window must be within "
                         "reach of LSA pointers (NVLink, or one GPU); over GIN it is not built yet",
                         what, r, teams[size_t(r)], nranks);
  std::unique_ptr<LsaWindow> w(new LsaWindow(comm, device, what));
  const OnDevice on(device);
  BRAID_TRY(w->allocate(window_bytes, state_bytes));
  *out = std::move(w);
  return Status::ok();
}

Status LsaWindow::allocate(size_t window_bytes, size_t state_bytes) {
  // This rank's memory first, then whether every rank got its own, and
  // only then the collective registration.
  cudaStream_t stream = nullptr;
  Status s = nccl_status(comm_, ncclMemAlloc(&memory_, window_bytes), "ncclMemAlloc of the window");
  if (s.is_ok()) s = cuda_status(cudaMalloc(&state_, state_bytes), "cudaMalloc of the kernels' state");
  if (s.is_ok())
    s = cuda_status(cudaHostAlloc(reinterpret_cast<void**>(&host_error_), sizeof(DeviceMoeError), cudaHostAllocMapped),
                    "cudaHostAlloc of the error record");
  if (s.is_ok()) {
    std::memset(host_error_, 0, sizeof(DeviceMoeError));
    s = cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_error_), host_error_, 0),
                    "cudaHostGetDevicePointer");
  }
  if (s.is_ok()) s = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (s.is_ok()) s = cuda_status(cudaMemsetAsync(memory_, 0, window_bytes, stream), "cudaMemsetAsync");
  if (s.is_ok()) s = cuda_status(cudaMemsetAsync(state_, 0, state_bytes, stream), "cudaMemsetAsync");
  if (s.is_ok()) s = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (stream) cudaStreamDestroy(stream);

  std::vector<int64_t> all;
  BRAID_TRY(gather_word(comm_, device_, s.is_ok(), &all, "the memory's agreement"));
  if (!s.is_ok()) return std::move(s).context(what_);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r]) return BRAID_ERROR(ncclSystemError, "{}: rank {} could not allocate its memory (its error says why)",
                                    what_, r);
  return nccl_status(comm_, ncclCommWindowRegister(comm_, memory_, window_bytes, &window_, NCCL_WIN_COLL_SYMMETRIC),
                     what_ + ": ncclCommWindowRegister");
}

void LsaWindow::release() {
  if (state_) cudaFree(state_);
  if (host_error_) cudaFreeHost(host_error_);
  if (memory_ && !window_) ncclMemFree(memory_);
  state_ = nullptr;
  host_error_ = nullptr;
  device_error_ = nullptr;
  memory_ = nullptr;
}

LsaWindow::~LsaWindow() {
  const OnDevice on(device_);
  release();
}

int32_t LsaWindow::error_code(DeviceMoeError* e) const {
  if (!host_error_) return kDeviceOk;
  const int32_t code = __atomic_load_n(&host_error_->code, __ATOMIC_ACQUIRE);
  if (code != kDeviceOk) *e = *host_error_;
  return code;
}

Status LsaWindow::close(cudaStream_t last_stream) {
  if (!window_) return Status::ok();
  const OnDevice on(device_);
  // This rank's kernels are done; after the barrier every rank's are, and
  // no peer stores into the window any more.
  const Status s = last_stream ? cuda_status(cudaStreamSynchronize(last_stream), what_ + ": cudaStreamSynchronize")
                               : Status::ok();
  std::vector<int64_t> all;
  BRAID_TRY(gather_word(comm_, device_, 1, &all, what_ + ": the closing barrier"));
  const Status d = nccl_status(comm_, ncclCommWindowDeregister(comm_, window_), what_ + ": ncclCommWindowDeregister");
  const Status f = nccl_status(comm_, ncclMemFree(memory_), what_ + ": ncclMemFree");
  window_ = nullptr;
  memory_ = nullptr;
  release();
  return !s.is_ok() ? s : !d.is_ok() ? d : f;
}

}  // namespace braid::moe::cuda

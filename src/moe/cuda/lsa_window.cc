#include "src/moe/cuda/lsa_window.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"

// NCCL declares it in nccl_device/core.h (2.29), which braid does not ship;
// src/shim/api_device_queries.cc defines it with NCCL's signature.
extern "C" ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);

namespace braid::moe::cuda {

namespace {

// Mapped pinned error records, never freed: cudaFreeHost would wait for
// every kernel of the process, a peer rank's waiting ones among them.  A
// closed handle's record serves the next handle.
class ErrorRecords {
 public:
  Status take(DeviceMoeError** host, DeviceMoeError** device) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) {
      constexpr size_t kPerPage = 64;
      void* page = nullptr;
      BRAID_TRY(cuda_status(cudaHostAlloc(&page, kPerPage * sizeof(DeviceMoeError),
                                          cudaHostAllocMapped | cudaHostAllocPortable),
                            "cudaHostAlloc of the error records"));
      for (size_t i = 0; i < kPerPage; ++i) free_.push_back(static_cast<DeviceMoeError*>(page) + i);
    }
    DeviceMoeError* e = free_.back();
    BRAID_TRY(cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(device), e, 0),
                          "cudaHostGetDevicePointer of an error record"));
    free_.pop_back();
    std::memset(e, 0, sizeof(*e));
    *host = e;
    return Status::ok();
  }
  void give(DeviceMoeError* e) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(e);
  }

 private:
  std::mutex mutex_;
  std::vector<DeviceMoeError*> free_;
};

ErrorRecords& error_records() {
  static ErrorRecords* records = new ErrorRecords();  // never destroyed: handles may outlive static destruction
  return *records;
}

}  // namespace

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
  BRAID_TRY(gather_word(comm, lsa_team_size(comm), &teams, "the LSA teams' agreement"));
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

namespace {

// Whether `window` is symmetric here: every rank's part in one flat range,
// a fixed stride (a multiple of 4 GiB) apart, as NCCL's device code
// (ncclGetPeerPointer) computes it.  A window on memory that is not (no
// VMM) would make the kernels store to wrong addresses.
bool symmetric(ncclWindow_t window, int nranks) {
  std::vector<uintptr_t> at(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    void* p = nullptr;
    if (ncclGetPeerDevicePointer(window, 0, r, &p) != ncclSuccess || !p) return false;
    at[size_t(r)] = reinterpret_cast<uintptr_t>(p);
  }
  const uintptr_t stride = nranks > 1 ? at[1] - at[0] : 0;
  for (int r = 0; r < nranks; ++r)
    if (at[size_t(r)] != at[0] + uintptr_t(r) * stride) return false;
  return nranks == 1 || (stride != 0 && stride % (uintptr_t(1) << 32) == 0);
}

}  // namespace

Status LsaWindow::allocate(size_t window_bytes, size_t state_bytes) {
  // The kernels' state sits after the window in the same allocation: no
  // cudaMalloc or cudaFree of its own, which could wait for the device.
  const size_t state_at = (window_bytes + 255) / 256 * 256, bytes = state_at + state_bytes;
  // This rank's memory first, then whether every rank got its own, and
  // only then the collective registration.
  Status s = cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  if (s.is_ok()) s = cuda_status(cudaEventCreateWithFlags(&last_launch_, cudaEventDisableTiming), "cudaEventCreate");
  if (s.is_ok()) s = nccl_status(comm_, ncclMemAlloc(&memory_, bytes), "ncclMemAlloc of the window");
  if (s.is_ok()) s = error_records().take(&host_error_, &device_error_);
  if (s.is_ok()) s = cuda_status(cudaError_t(preload_moe_kernels()), "loading the MoE kernels");
  if (s.is_ok()) s = cuda_status(cudaError_t(preload_alltoallv_kernel()), "loading the AlltoAllv kernel");
  if (s.is_ok()) s = cuda_status(cudaMemsetAsync(memory_, 0, bytes, stream_), "cudaMemsetAsync");
  if (s.is_ok()) s = cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");

  std::vector<int64_t> all;
  BRAID_TRY(gather_word(comm_, s.is_ok(), &all, "the memory's agreement"));
  if (!s.is_ok()) return std::move(s).context(what_);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r]) return BRAID_ERROR(ncclSystemError, "{}: rank {} could not allocate its memory (its error says why)",
                                    what_, r);
  BRAID_TRY(nccl_status(comm_, ncclCommWindowRegister(comm_, memory_, bytes, &window_, NCCL_WIN_COLL_SYMMETRIC),
                        what_ + ": ncclCommWindowRegister"));
  state_ = static_cast<char*>(memory_) + state_at;
  // Agreed last: every rank's window is symmetric, and every rank is done
  // with what registering does (allocations that may wait for the device)
  // before any launches a kernel that waits for it.
  BRAID_TRY(gather_word(comm_, symmetric(window_, int(all.size())), &all, "the windows' agreement"));
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r]) {
      ncclCommWindowDeregister(comm_, window_);  // every rank fails here alike
      window_ = nullptr;
      return BRAID_ERROR(ncclInvalidUsage, "{}: rank {}'s window is not symmetric (every rank's part at a fixed "
                         "stride: ncclMemAlloc memory on a GPU with virtual memory management)", what_, r);
    }
  return Status::ok();
}

void LsaWindow::launched(cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) return;
  launched_ = cudaEventRecord(last_launch_, stream) == cudaSuccess || launched_;
}

Status LsaWindow::read(void* host, const void* device, size_t bytes) {
  const OnDevice on(device_);
  BRAID_TRY(cuda_status(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), what_ + ": a read"));
  return cuda_status(cudaStreamSynchronize(stream_), what_ + ": a read");
}

void LsaWindow::release() {
  if (host_error_) error_records().give(host_error_);
  if (memory_ && !window_) ncclMemFree(memory_);
  if (last_launch_) cudaEventDestroy(last_launch_);
  if (stream_) cudaStreamDestroy(stream_);
  state_ = nullptr;  // part of memory_
  host_error_ = nullptr;
  device_error_ = nullptr;
  memory_ = nullptr;
  last_launch_ = nullptr;
  stream_ = nullptr;
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

Status LsaWindow::close() {
  if (!window_) return Status::ok();
  const OnDevice on(device_);
  // This rank's kernels are done; after the barrier every rank's are, and
  // no peer stores into the window any more.
  const Status s = launched_ ? cuda_status(cudaEventSynchronize(last_launch_), what_ + ": waiting for its kernels")
                             : Status::ok();
  std::vector<int64_t> all;
  BRAID_TRY(gather_word(comm_, 1, &all, what_ + ": the closing barrier"));
  const Status d = nccl_status(comm_, ncclCommWindowDeregister(comm_, window_), what_ + ": ncclCommWindowDeregister");
  const Status f = nccl_status(comm_, ncclMemFree(memory_), what_ + ": ncclMemFree");
  window_ = nullptr;
  memory_ = nullptr;
  release();
  // Deregistering and freeing may wait for the device: no rank goes on to
  // launch what could wait for this one until every rank is past them.
  BRAID_TRY(gather_word(comm_, 1, &all, what_ + ": the barrier after freeing"));
  return !s.is_ok() ? s : !d.is_ok() ? d : f;
}

}  // namespace braid::moe::cuda

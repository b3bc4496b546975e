// The C entry points of braid/alltoallv.h: argument checks, then the backend
// the communicator's device picks (alltoallv.h, or cuda/cuda_alltoallv.h);
// no exception crosses them (shim's guarded), and every error is recorded
// for ncclGetLastError and NCCL_DEBUG=WARN.
#include <atomic>
#include <memory>

#include "braid/alltoallv.h"
#include "src/moe/alltoallv.h"
#include "src/moe/handle_call.h"
#include "src/moe/nccl_call.h"
#include "src/shim/api.h"
#if BRAID_MOE_CUDA
#include "src/moe/cuda/cuda_alltoallv.h"
#endif

using namespace braid;

struct braidAlltoAllvHandle {
  std::unique_ptr<moe::AlltoAllvBackend> impl;
  std::atomic<bool> busy{false};  // a thread is in braidAlltoAllv or destroy (handle_call.h)
};

namespace {

ncclComm* comm_of(braidAlltoAllv_t h) { return h && h->impl ? h->impl->comm() : nullptr; }

}  // namespace

BRAID_API ncclResult_t braidAlltoAllvCreate(ncclComm_t comm, ncclDataType_t datatype, size_t maxCountPerPeer,
                                            int timeoutMs, braidAlltoAllv_t* handle) {
  return guarded(comm, "braidAlltoAllvCreate", [&]() -> Status {
    if (!handle) return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllvCreate: handle is NULL");
    *handle = nullptr;
    BRAID_TRY(check_comm(comm));
    int device = -1;
    BRAID_TRY(moe::nccl_status(comm, ncclCommCuDevice(comm, &device), "ncclCommCuDevice"));
    auto h = std::make_unique<braidAlltoAllvHandle>();
    if (device < 0) {
      BRAID_TRY(moe::HostAlltoAllv::create(comm, datatype, maxCountPerPeer, timeoutMs, &h->impl));
    } else {
#if BRAID_MOE_CUDA
      BRAID_TRY(moe::cuda::CudaAlltoAllv::create(comm, device, datatype, maxCountPerPeer, timeoutMs, &h->impl));
#else
      return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllvCreate: the communicator is on a CUDA device, and this "
                         "braid was built without the CUDA kernels (no CUDA, or no nccl_device headers)");
#endif
    }
    *handle = h.release();
    return Status::ok();
  });
}

BRAID_API ncclResult_t braidAlltoAllv(braidAlltoAllv_t handle, const void* sendbuff, const int64_t* sendCounts,
                                      void* recvbuff, int64_t* recvCounts, cudaStream_t stream) {
  return guarded(comm_of(handle), "braidAlltoAllv", [&]() -> Status {
    if (!handle || !handle->impl) return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllv: handle is NULL");
    const moe::HandleCall call(&handle->busy, comm_of(handle));
    BRAID_TRY(call.check("braidAlltoAllv"));
    return handle->impl->run(sendbuff, sendCounts, recvbuff, recvCounts, stream);
  });
}

BRAID_API ncclResult_t braidAlltoAllvGetAsyncError(braidAlltoAllv_t handle, ncclResult_t* asyncError) {
  return guarded(comm_of(handle), "braidAlltoAllvGetAsyncError", [&]() -> Status {
    if (!handle || !handle->impl)
      return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllvGetAsyncError: handle is NULL");
    if (!asyncError) return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllvGetAsyncError: asyncError is NULL");
    // Its message goes to ncclGetLastError, as a failed call's would.
    *asyncError = report(comm_of(handle), "braidAlltoAllvGetAsyncError", handle->impl->async_error());
    return Status::ok();
  });
}

BRAID_API ncclResult_t braidAlltoAllvDestroy(braidAlltoAllv_t handle) {
  return guarded(comm_of(handle), "braidAlltoAllvDestroy", [&]() -> Status {
    if (!handle) return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllvDestroy: handle is NULL");
    std::unique_ptr<braidAlltoAllvHandle> owned;  // declared first: freed after `call` let go of its busy flag
    const moe::HandleCall call(&handle->busy, comm_of(handle));
    BRAID_TRY(call.check_destroy("braidAlltoAllvDestroy"));  // refused: nothing freed, the handle stays
    owned.reset(handle);
    return owned->impl ? owned->impl->destroy() : Status::ok();
  });
}

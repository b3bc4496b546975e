// The C entry points of braid/moe.h: argument checks, then the backend the
// communicator's device picks (host_moe.h, or cuda/cuda_moe.h); no
// exception crosses them (shim's guarded), and every error is recorded for
// ncclGetLastError and NCCL_DEBUG=WARN.
#include "braid/moe.h"

#include <atomic>
#include <memory>

#include "src/moe/handle_call.h"
#include "src/moe/host_moe.h"
#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"
#include "src/shim/api.h"
#if BRAID_MOE_CUDA
#include "src/moe/cuda/cuda_moe.h"
#endif

using namespace braid;

struct braidMoe {
  std::unique_ptr<moe::MoeBackend> impl;
  std::atomic<bool> busy{false};  // a thread is in dispatch, combine or destroy (handle_call.h)
};

namespace {

Status check_handle(braidMoe_t moe) {
  if (!moe || !moe->impl) return BRAID_ERROR(ncclInvalidArgument, "MoE handle is NULL");
  return Status::ok();
}
ncclComm* comm_of(braidMoe_t moe) { return moe && moe->impl ? moe->impl->comm() : nullptr; }

}  // namespace

BRAID_API ncclResult_t braidMoeCreate(ncclComm_t comm, const braidMoeConfig_t* config, braidMoe_t* moe) {
  return guarded(comm, "braidMoeCreate", [&]() -> Status {
    if (!moe) return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: moe is NULL");
    *moe = nullptr;
    BRAID_TRY(check_comm(comm));
    if (!config) return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: config is NULL");
    int device = -1;
    BRAID_TRY(moe::nccl_status(comm, ncclCommCuDevice(comm, &device), "ncclCommCuDevice"));
    const braidMoeConfig_t whole = moe::complete_config(config);
    auto handle = std::make_unique<braidMoe>();
    if (device < 0) {
      BRAID_TRY(moe::HostMoe::create(comm, whole, &handle->impl));
    } else {
#if BRAID_MOE_CUDA
      BRAID_TRY(moe::cuda::CudaMoe::create(comm, whole, device, &handle->impl));
#else
      return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: the communicator is on a CUDA device, and this braid "
                         "was built without the CUDA MoE kernels (no CUDA, or no nccl_device headers)");
#endif
    }
    *moe = handle.release();
    return Status::ok();
  });
}

BRAID_API ncclResult_t braidMoeGetInfo(braidMoe_t moe, size_t* maxOutputRows, int* capacity) {
  return guarded(comm_of(moe), "braidMoeGetInfo", [&]() -> Status {
    BRAID_TRY(check_handle(moe));
    if (maxOutputRows) *maxOutputRows = size_t(moe->impl->shape().max_output_rows());
    if (capacity) *capacity = moe->impl->shape().capacity;
    return Status::ok();
  });
}

BRAID_API ncclResult_t braidMoeDispatch(braidMoe_t moe, const void* tokens, const int32_t* topkIdx, int numTokens,
                                        void* recvTokens, int32_t* recvCounts, int64_t* droppedRows,
                                        cudaStream_t stream) {
  return guarded(comm_of(moe), "braidMoeDispatch", [&]() -> Status {
    BRAID_TRY(check_handle(moe));
    const moe::HandleCall call(&moe->busy, comm_of(moe));
    BRAID_TRY(call.check("braidMoeDispatch"));
    return moe->impl->dispatch(tokens, topkIdx, numTokens, recvTokens, recvCounts, droppedRows, stream);
  });
}

BRAID_API ncclResult_t braidMoeCombine(braidMoe_t moe, const void* expertOut, const float* topkWeights,
                                       void* outTokens, cudaStream_t stream) {
  return guarded(comm_of(moe), "braidMoeCombine", [&]() -> Status {
    BRAID_TRY(check_handle(moe));
    const moe::HandleCall call(&moe->busy, comm_of(moe));
    BRAID_TRY(call.check("braidMoeCombine"));
    return moe->impl->combine(expertOut, topkWeights, outTokens, stream);
  });
}

BRAID_API ncclResult_t braidMoeGetCombineBuffer(braidMoe_t moe, void** expertOut) {
  return guarded(comm_of(moe), "braidMoeGetCombineBuffer", [&]() -> Status {
    if (!expertOut) return BRAID_ERROR(ncclInvalidArgument, "braidMoeGetCombineBuffer: expertOut is NULL");
    *expertOut = nullptr;
    BRAID_TRY(check_handle(moe));
    return moe->impl->combine_buffer(expertOut);
  });
}

BRAID_API ncclResult_t braidMoeGetDispatchBuffer(braidMoe_t moe, void** tokens) {
  return guarded(comm_of(moe), "braidMoeGetDispatchBuffer", [&]() -> Status {
    if (!tokens) return BRAID_ERROR(ncclInvalidArgument, "braidMoeGetDispatchBuffer: tokens is NULL");
    *tokens = nullptr;
    BRAID_TRY(check_handle(moe));
    return moe->impl->dispatch_buffer(tokens);
  });
}

BRAID_API ncclResult_t braidMoeGetStats(braidMoe_t moe, braidMoeStats_t* stats) {
  return guarded(comm_of(moe), "braidMoeGetStats", [&]() -> Status {
    BRAID_TRY(check_handle(moe));
    if (!stats) return BRAID_ERROR(ncclInvalidArgument, "braidMoeGetStats: stats is NULL");
    return moe->impl->stats(stats);
  });
}

BRAID_API ncclResult_t braidMoeGetAsyncError(braidMoe_t moe, ncclResult_t* asyncError) {
  return guarded(comm_of(moe), "braidMoeGetAsyncError", [&]() -> Status {
    BRAID_TRY(check_handle(moe));
    if (!asyncError) return BRAID_ERROR(ncclInvalidArgument, "braidMoeGetAsyncError: asyncError is NULL");
    // Its message goes to ncclGetLastError, as a failed call's would.
    *asyncError = report(comm_of(moe), "braidMoeGetAsyncError", moe->impl->async_error());
    return Status::ok();
  });
}

BRAID_API ncclResult_t braidMoeDestroy(braidMoe_t moe) {
  ncclComm* comm = comm_of(moe);
  return guarded(comm, "braidMoeDestroy", [&]() -> Status {
    if (!moe) return BRAID_ERROR(ncclInvalidArgument, "braidMoeDestroy: moe is NULL");
    std::unique_ptr<braidMoe> owned;  // declared first: freed after `call` let go of its busy flag
    const moe::HandleCall call(&moe->busy, comm);
    BRAID_TRY(call.check_destroy("braidMoeDestroy"));  // refused: nothing freed, the handle stays
    owned.reset(moe);
    if (!owned->impl) return Status::ok();
    return owned->impl->destroy();
  });
}

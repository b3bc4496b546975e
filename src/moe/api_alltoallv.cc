// The C entry points of braid/alltoallv.h: argument checks, then the host
// implementation (alltoallv.h); no exception crosses them (shim's guarded),
// and every error is recorded for ncclGetLastError and NCCL_DEBUG=WARN.
#include <memory>

#include "braid/alltoallv.h"
#include "src/moe/alltoallv.h"
#include "src/shim/api.h"

using namespace braid;

struct braidAlltoAllvHandle {
  std::unique_ptr<moe::HostAlltoAllv> impl;
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
    auto h = std::make_unique<braidAlltoAllvHandle>();
    BRAID_TRY(moe::HostAlltoAllv::create(comm, datatype, maxCountPerPeer, timeoutMs, &h->impl));
    *handle = h.release();
    return Status::ok();
  });
}

BRAID_API ncclResult_t braidAlltoAllv(braidAlltoAllv_t handle, const void* sendbuff, const int64_t* sendCounts,
                                      void* recvbuff, int64_t* recvCounts, cudaStream_t stream) {
  (void)stream;
  return guarded(comm_of(handle), "braidAlltoAllv", [&]() -> Status {
    if (!handle || !handle->impl) return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllv: handle is NULL");
    return handle->impl->run(sendbuff, sendCounts, recvbuff, recvCounts);
  });
}

BRAID_API ncclResult_t braidAlltoAllvDestroy(braidAlltoAllv_t handle) {
  return guarded(comm_of(handle), "braidAlltoAllvDestroy", [&]() -> Status {
    if (!handle) return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllvDestroy: handle is NULL");
    std::unique_ptr<braidAlltoAllvHandle> owned(handle);
    return owned->impl ? owned->impl->destroy() : Status::ok();
  });
}

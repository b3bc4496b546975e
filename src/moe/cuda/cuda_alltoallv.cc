#include "src/moe/cuda/cuda_alltoallv.h"

#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"
#include "src/ops/datatype.h"

namespace braid::moe::cuda {

Status CudaAlltoAllv::create(ncclComm_t comm, int device, ncclDataType_t type, size_t max_count, int timeout_ms,
                             std::unique_ptr<AlltoAllvBackend>* out) {
  BRAID_TRY(agree_alltoallv(comm, type, max_count, timeout_ms));
  int nranks = 0, rank = 0;
  BRAID_TRY(nccl_status(comm, ncclCommCount(comm, &nranks), "ncclCommCount"));
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  std::unique_ptr<CudaAlltoAllv> a(new CudaAlltoAllv(comm, device));
  DeviceAlltoAllv& d = a->dev_;
  d.layout = AlltoAllvLayout::of(nranks, datatype_size(type), max_count);
  d.rank = rank;
  d.timeout_ns = uint64_t(wait_bound_ms(timeout_ms)) * 1000000ull;
  BRAID_TRY(LsaWindow::open(comm, device, d.layout.bytes, sizeof(DeviceAlltoAllvState), "braidAlltoAllvCreate",
                            &a->window_));
  d.window = a->window_->window();
  d.state = static_cast<DeviceAlltoAllvState*>(a->window_->state());
  d.error = a->window_->device_error();
  *out = std::move(a);
  return Status::ok();
}

Status CudaAlltoAllv::async_error() {
  if (!window_) return BRAID_ERROR(ncclInvalidUsage, "the AlltoAllv handle was destroyed");
  DeviceMoeError e{};
  switch (window_->error_code(&e)) {
    case kDeviceOk: return Status::ok();
    case kDeviceTimeout:
      return BRAID_ERROR(ncclTimeout, "rank {}: call {}: no word from rank {} within {} ms (the rank is late, gone, "
                         "or failed its call); the handle takes no more calls", dev_.rank, e.epoch, e.peer,
                         dev_.timeout_ns / 1000000);
    case kDeviceBadCount:
      if (e.peer == dev_.rank && e.value >= 0)
        return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllv: call {}: sendCounts[{}] is not in [0, "
                           "maxCountPerPeer = {}]; the handle takes no more calls", e.epoch, e.value,
                           dev_.layout.max_count);
      return BRAID_ERROR(ncclRemoteError, "braidAlltoAllv: call {}: rank {} passed bad arguments (its error says "
                         "which); the handle takes no more calls", e.epoch, e.peer);
    default:
      return BRAID_ERROR(ncclInternalError, "braidAlltoAllv: call {}: rank {} signalled {} elements, over "
                         "maxCountPerPeer {}", e.epoch, e.peer, e.value, dev_.layout.max_count);
  }
}

Status CudaAlltoAllv::run(const void* send, const int64_t* send_counts, void* recv, int64_t* recv_counts,
                          cudaStream_t stream) {
  BRAID_TRY(async_error());
  if (!send_counts || !recv_counts || !recv)
    return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllv: sendCounts, recvCounts or recvbuff is NULL");
  const OnDevice on(device_);
  const int e = launch_alltoallv(dev_, kCtas, send, send_counts, recv, recv_counts, stream);
  if (e) return cuda_status(cudaError_t(e), "braidAlltoAllv: the kernel's launch");
  window_->launched(stream);
  return Status::ok();
}

Status CudaAlltoAllv::destroy() {
  if (!window_) return Status::ok();
  Status s = window_->close();
  window_.reset();
  return s;
}

}  // namespace braid::moe::cuda

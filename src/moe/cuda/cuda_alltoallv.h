// The AlltoAllv whose counts live in device memory (braid/alltoallv.h) on a
// CUDA communicator: one kernel per call on the caller's stream
// (alltoallv_kernels.cu), over a window every rank reaches through LSA
// pointers (lsa_window.h).  The call returns once the kernel is launched;
// the kernel reads the send counts and writes the receive counts in device
// memory, so it can be captured in a CUDA graph.  What the kernel hits (a
// bad count, a timeout) is recorded for the next call and
// braidAlltoAllvGetAsyncError; then the handle takes no more calls.
#pragma once

#include <memory>

#include "src/moe/alltoallv.h"
#include "src/moe/cuda/device_moe.h"
#include "src/moe/cuda/lsa_window.h"

namespace braid::moe::cuda {

class CudaAlltoAllv : public AlltoAllvBackend {
 public:
  // Collective over comm's ranks.
  static Status create(ncclComm_t comm, int device, ncclDataType_t type, size_t max_count, int timeout_ms,
                       std::unique_ptr<AlltoAllvBackend>* out);
  Status run(const void* send, const int64_t* send_counts, void* recv, int64_t* recv_counts,
             cudaStream_t stream) override;
  Status destroy() override;
  Status async_error() override;
  ncclComm_t comm() const override { return comm_; }

 private:
  CudaAlltoAllv(ncclComm_t comm, int device) : comm_(comm), device_(device) {}

  static constexpr int kCtas = 8;
  const ncclComm_t comm_;
  const int device_;
  DeviceAlltoAllv dev_;
  std::unique_ptr<LsaWindow> window_;
};

}  // namespace braid::moe::cuda

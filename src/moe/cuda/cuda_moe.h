// MoE dispatch and combine on a CUDA communicator (issue 40): the
// host-launched kernels of moe_kernels.cu, one per call, on the caller's
// stream, over a window every rank of the communicator reaches through
// NCCL's LSA pointers (NVLink peers, ranks sharing a GPU).
//
// Create is collective: the config is agreed (moe_config.h), then the
// window and the kernels' state (lsa_window.h).  Dispatch
// and combine only launch: they return before the kernels run, and their
// counts stay on the device, so both can be captured in a CUDA graph and
// replayed (the call number lives in device memory, device_moe.h).  What a
// kernel hits (a peer that does not signal within the timeout, a bad
// expert index, more rows than capacity) is recorded in mapped host
// memory: the handle's next call, braidMoeGetAsyncError and destroy report
// it, and the handle refuses further calls.
#pragma once

#include <memory>

#include "src/moe/cuda/device_moe.h"
#include "src/moe/cuda/lsa_window.h"
#include "src/moe/moe_backend.h"

namespace braid::moe::cuda {

class CudaMoe : public MoeBackend {
 public:
  static Status create(ncclComm_t comm, const braidMoeConfig_t& config, int device, std::unique_ptr<MoeBackend>* out);
  ~CudaMoe() override;

  Status dispatch(const void* tokens, const int32_t* topk, int32_t ntokens, void* out, int32_t* recv_counts,
                  int64_t* dropped, cudaStream_t stream) override;
  Status combine(const void* expert_out, const float* weights, void* out, cudaStream_t stream) override;
  Status combine_buffer(void** out) override;
  Status dispatch_buffer(void** out) override;
  Status destroy() override;
  // The kernels' counts so far (calls whose kernels completed).
  Status stats(braidMoeStats_t* out) override;
  Status async_error() override;
  ncclComm_t comm() const override { return comm_; }
  const Shape& shape() const override { return dev_.shape; }

 private:
  CudaMoe(ncclComm_t comm, int device, int ctas) : comm_(comm), device_(device), ctas_(ctas) {}

  const ncclComm_t comm_;
  const int device_;
  const int ctas_;
  DeviceMoe dev_;
  std::unique_ptr<LsaWindow> window_;
  bool combine_due_ = false;
  int32_t tokens_ = 0;  // the last dispatch's
};

}  // namespace braid::moe::cuda

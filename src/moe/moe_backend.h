// What a MoE handle (braid/moe.h) runs on: the host backend's protocol over
// mapped windows and RMA (host_moe.h), or CUDA kernels over LSA windows
// (cuda/cuda_moe.h), picked by the communicator's device at create.
#pragma once

#include <cstdint>

#include "braid/moe.h"
#include "braid/moe/layout.h"
#include "nccl.h"
#include "src/base/status.h"

namespace braid::moe {

class MoeBackend {
 public:
  virtual ~MoeBackend() = default;
  virtual Status dispatch(const void* tokens, const int32_t* topk, int32_t ntokens, void* out, int32_t* recv_counts,
                          int64_t* dropped, cudaStream_t stream) = 0;
  virtual Status combine(const void* expert_out, const float* weights, void* out, cudaStream_t stream) = 0;
  // braidMoeGetCombineBuffer: where this rank's expert results may be left for its sources to read.
  virtual Status combine_buffer(void** out) = 0;
  // braidMoeGetDispatchBuffer: where this rank's tokens may be left for the experts' owners to read.
  virtual Status dispatch_buffer(void** out) = 0;
  // Collective: a barrier, then the window is deregistered and freed.
  virtual Status destroy() = 0;
  virtual Status stats(braidMoeStats_t* out) = 0;
  // What a call that already returned hit since (CUDA: its kernels), or ok.
  virtual Status async_error() { return Status::ok(); }
  virtual ncclComm_t comm() const = 0;
  virtual const Shape& shape() const = 0;
};

}  // namespace braid::moe

// How the MoE and AlltoAllv checks hand braid their buffers.
#pragma once

#include <cstddef>
#include <cstring>

#include "harness.h"
#include "nccl.h"

namespace moe_test {

// Where a test's buffers are when braid gets them: host memory as they are
// (the host backend).  A CUDA communicator's side (tests/gpu/moe_cuda.cc)
// hands braid device copies on its stream instead, and copies the outputs
// back in done(), so both backends run the same checks (moe_layer.h,
// alltoallv_calls.h).
struct HostSide {
  const void* in(const void* p, size_t) { return p; }
  void* out(void* p, size_t) { return p; }
  cudaStream_t stream() const { return nullptr; }
  bool done(mp::Failures&) { return true; }  // the outputs are in the caller's vectors
  // Copies into, and out of, memory braid gave (a combine buffer).
  void to(void* place, const void* host, size_t bytes) {
    if (bytes) std::memcpy(place, host, bytes);  // an empty vector's data() may be null
  }
  void from(void* host, const void* place, size_t bytes) {
    if (bytes) std::memcpy(host, place, bytes);
  }
  void sum(ncclComm_t comm, double* v, mp::Failures& f) {
    double all = 0;
    MP_NCCL(f, ncclAllReduce(v, &all, 1, ncclFloat64, ncclSum, comm, nullptr));
    *v = all;
  }
};

}  // namespace moe_test

// A CUDA communicator's grow-only device buffers (scratch, staging, and the
// per-call tables), reallocated in stream order from the rank's own pool.
//
// Stream order and an own pool: nothing a call does may order this rank's
// next launch behind work of other streams, since a peer rank of this
// process may have a kernel waiting for that launch.  cudaMalloc would
// (CUDA's implicit synchronisation: commands of two streams do not overlap a
// device memory allocation issued between them), and so would the shared
// default pool, which may make this stream wait for a peer's stream before
// reusing memory the peer freed.
//
// CUDA graphs: a captured launch keeps the addresses it was captured with,
// and nothing can be allocated during a capture.  So a buffer must already
// be large enough when a call is captured (its shape run once before), and
// once any call of the communicator has been captured, a buffer it outgrows
// later is kept, not freed, until the communicator releases its memory: a
// graph may still be replayed on it.  Growth at least doubles, so what is
// kept never exceeds what is in use.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "src/base/status.h"

namespace braid::cuda {

// ncclInvalidUsage if `stream` is capturing: `what` needs memory first.
Status refuse_allocation_in_capture(cudaStream_t stream, const char* what);

class StreamBuffers {
 public:
  struct Buffer {
    void* ptr = nullptr;
    uint64_t bytes = 0;
    template <typename T>
    T* as() const {
      return static_cast<T*>(ptr);
    }
  };
  // The communicator's buffers, each for one purpose.
  Buffer scratch, lane_done, peers, p2p, premul, staging;

  explicit StreamBuffers(cudaMemPool_t pool = nullptr) : pool_(pool) {}
  void set_pool(cudaMemPool_t pool) { pool_ = pool; }
  // Makes b hold at least `need` bytes (growing it at least twofold).
  Status grow(Buffer* b, uint64_t need, cudaStream_t stream, const char* what);
  // A launch using these buffers was captured in a graph.
  void captured() { captured_ = true; }
  uint64_t bytes_held() const;  // in use and kept
  // Frees them all (the device idle: no kernel or graph uses them).
  void free_all();

 private:
  cudaMemPool_t pool_;
  std::vector<void*> kept_;  // outgrown after a capture
  uint64_t kept_bytes_ = 0;
  bool captured_ = false;
};

}  // namespace braid::cuda

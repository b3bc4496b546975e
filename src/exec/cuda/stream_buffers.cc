#include "src/exec/cuda/stream_buffers.h"

#include <algorithm>

#include "src/exec/cuda/call_order.h"
#include "src/exec/cuda/cuda_try.h"

namespace braid::cuda {

Status refuse_allocation_in_capture(cudaStream_t stream, const char* what) {
  bool capturing = false;
  BRAID_TRY(capture_status(stream, &capturing));
  if (capturing)
    return BRAID_ERROR(ncclInvalidUsage,
                       "the first call of this shape needs {} memory, which cannot be allocated during CUDA "
                       "graph capture: run it once before capturing",
                       what);
  return Status::ok();
}

Status StreamBuffers::grow(Buffer* b, uint64_t need, cudaStream_t stream, const char* what) {
  if (need <= b->bytes) return Status::ok();
  BRAID_TRY(refuse_allocation_in_capture(stream, what));
  need = std::max<uint64_t>(need, 2 * b->bytes);
  if (b->ptr && captured_) {
    kept_.push_back(b->ptr);
    kept_bytes_ += b->bytes;
  } else if (b->ptr) {
    CUDA_TRY(cudaFreeAsync(b->ptr, stream));
  }
  *b = Buffer{};
  CUDA_TRY(cudaMallocFromPoolAsync(&b->ptr, need, pool_, stream));
  b->bytes = need;
  return Status::ok();
}

uint64_t StreamBuffers::bytes_held() const {
  return scratch.bytes + lane_done.bytes + peers.bytes + p2p.bytes + premul.bytes + staging.bytes + kept_bytes_;
}

void StreamBuffers::free_all() {
  for (Buffer* b : {&scratch, &lane_done, &peers, &p2p, &premul, &staging}) {
    if (b->ptr) cudaFree(b->ptr);
    *b = Buffer{};
  }
  for (void* p : kept_) cudaFree(p);
  kept_.clear();
  kept_bytes_ = 0;
}

}  // namespace braid::cuda

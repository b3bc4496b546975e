#include "src/exec/cuda/call_order.h"

#include "src/exec/cuda/cuda_try.h"

namespace braid::cuda {

Status capture_status(cudaStream_t stream, bool* capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream, &status);
  if (e == cudaErrorStreamCaptureImplicit) {
    cudaGetLastError();
    return BRAID_ERROR(ncclInvalidUsage,
                       "a call on the legacy default stream while a stream is being captured "
                       "into a CUDA graph: use a stream of your own");
  }
  CUDA_TRY(e);
  *capturing = status != cudaStreamCaptureStatusNone;
  return Status::ok();
}

Status wait_outside_capture(cudaEvent_t done) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t e = cudaEventSynchronize(done);
  cudaThreadExchangeStreamCaptureMode(&mode);  // back to the thread's own
  CUDA_TRY(e);
  return Status::ok();
}

Status CallOrder::init() {
  CUDA_TRY(cudaEventCreateWithFlags(&last_done_, cudaEventDisableTiming));
  CUDA_TRY(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  return Status::ok();
}

void CallOrder::release() {
  if (last_done_) cudaEventDestroy(last_done_);
  if (join_) cudaEventDestroy(join_);
  last_done_ = join_ = nullptr;
  last_stream_.reset();
}

Status CallOrder::begin(cudaStream_t stream, bool* capturing) {
  BRAID_TRY(capture_status(stream, capturing));
  if (*capturing || !last_stream_) return Status::ok();
  unsigned long long id = 0;
  CUDA_TRY(cudaStreamGetId(stream, &id));
  if (id != *last_stream_) CUDA_TRY(cudaStreamWaitEvent(stream, last_done_, 0));
  return Status::ok();
}

Status CallOrder::end(cudaStream_t stream, bool capturing) {
  if (capturing) return Status::ok();
  unsigned long long id = 0;
  CUDA_TRY(cudaStreamGetId(stream, &id));
  CUDA_TRY(cudaEventRecord(last_done_, stream));
  last_stream_ = id;
  return Status::ok();
}

// Relaxed capture mode for this thread: in the default global mode, a query
// while any thread captures is a prohibited call that invalidates that
// capture.
bool CallOrder::idle() const {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const bool idle = cudaEventQuery(last_done_) != cudaErrorNotReady;
  cudaThreadExchangeStreamCaptureMode(&mode);
  return idle;
}

Status CallOrder::check_group(const std::vector<cudaStream_t>& streams) {
  if (streams.size() < 2) return Status::ok();
  for (cudaStream_t s : streams) {
    bool capturing = false;
    BRAID_TRY(capture_status(s, &capturing));
    if (capturing)
      return BRAID_ERROR(ncclInvalidUsage,
                         "a group captured in a CUDA graph has calls on {} streams of one "
                         "communicator: capture them on one stream",
                         streams.size());
  }
  return Status::ok();
}

Status CallOrder::join_before(const std::vector<cudaStream_t>& streams) {
  for (size_t i = 1; i < streams.size(); ++i) {
    CUDA_TRY(cudaEventRecord(join_, streams[i]));
    CUDA_TRY(cudaStreamWaitEvent(streams[0], join_, 0));
  }
  return Status::ok();
}

Status CallOrder::join_after(const std::vector<cudaStream_t>& streams) {
  if (streams.size() < 2) return Status::ok();
  for (cudaStream_t s : streams) CUDA_TRY(cudaStreamWaitEvent(s, last_done_, 0));
  return Status::ok();
}

}  // namespace braid::cuda

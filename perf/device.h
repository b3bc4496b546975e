// Where the perf tools put their buffers.  Like nccl-tests, the tools use
// device memory when a CUDA device is visible (and BRAID_BACKEND is not
// "host"); otherwise host memory.  Data is laid out and checked in host
// mirrors, copied to and from the device around each checked call.
#pragma once

#include <cstddef>

#include "nccl.h"

namespace perf {

bool device_buffers();  // decided once per process
// Before CUDA starts, for ranks that are threads sharing a GPU (kept if the
// environment says otherwise): 32 hardware queues and kernels loaded at start.
void prepare_thread_ranks();
// All of these are no-ops / host equivalents without device buffers.
void* buffer_alloc(size_t bytes);
void buffer_free(void* p);
void copy_to_buffer(void* dst, const void* host, size_t bytes);
void copy_from_buffer(void* host, const void* src, size_t bytes);
// A non-blocking stream, or (`null_stream`, -y 1) the legacy default stream.
cudaStream_t stream_create(bool null_stream);
void stream_destroy(cudaStream_t s);
void stream_sync(cudaStream_t s);  // exits the process on a CUDA error
size_t device_total_memory();  // the current device's (0 without device buffers)
const char* device_description();  // "host memory" or "cuda device 0 (NVIDIA H100 ...)"

// -I's CUDA events (device buffers only; the host clock times host buffers).
void* event_create();
void event_record(void* event, cudaStream_t s);
double event_seconds(void* start, void* stop);  // both completed
void event_destroy(void* event);

// -G, as nccl-tests: the timed calls are captured from `s` into a CUDA
// graph (this thread's capture only, so ranks that are threads capture at
// once), which is then launched -G times.  Device buffers only: without
// them the harness never calls these (they exit the process).
struct CapturedGraph {
  void* graph = nullptr;  // cudaGraph_t
  void* exec = nullptr;   // cudaGraphExec_t
};
void capture_begin(cudaStream_t s);
CapturedGraph capture_end(cudaStream_t s);  // instantiated
void graph_launch(const CapturedGraph& g, cudaStream_t s);
void graph_destroy(CapturedGraph* g);

}  // namespace perf

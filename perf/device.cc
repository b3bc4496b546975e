#include "perf/device.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#if BRAID_PERF_CUDA
#include <cuda_runtime.h>
#endif

namespace perf {

#if BRAID_PERF_CUDA
namespace {
void die(cudaError_t e, const char* what) {
  fmt::print(stderr, "perf: {} failed: {}\n", what, cudaGetErrorString(e));
  std::exit(2);  // nccl-tests' testCudaError
}
#define PERF_CUDA(expr)                     \
  do {                                      \
    cudaError_t e_ = (expr);                \
    if (e_ != cudaSuccess) die(e_, #expr);  \
  } while (0)
}  // namespace

void prepare_thread_ranks() {
  // Ranks that are threads of this process each have a stream whose
  // kernels wait for the others'.  With more streams than hardware queues
  // (CUDA_DEVICE_MAX_CONNECTIONS, default 8) streams share queues, and a
  // rank's next launch can block a peer's current one behind it: a
  // deadlock.  And a kernel loaded lazily at its first launch may wait for
  // the device, where a peer's kernel spins.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

bool device_buffers() {
  static const bool on = [] {
    prepare_thread_ranks();
    const char* backend = std::getenv("BRAID_BACKEND");
    if (backend && std::string(backend) == "host") return false;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      cudaGetLastError();
      return false;
    }
    return true;
  }();
  return on;
}

void* buffer_alloc(size_t bytes) {
  if (!device_buffers()) return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
  PERF_CUDA(cudaMemset(p, 0, bytes));
  return p;
}
void buffer_free(void* p) {
  if (!device_buffers()) return std::free(p);
  cudaFree(p);
}
void copy_to_buffer(void* dst, const void* host, size_t bytes) {
  if (!device_buffers()) return void(std::memcpy(dst, host, bytes));
  PERF_CUDA(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
}
void copy_from_buffer(void* host, const void* src, size_t bytes) {
  if (!device_buffers()) return void(std::memcpy(host, src, bytes));
  PERF_CUDA(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
}
cudaStream_t stream_create(bool null_stream) {
  if (!device_buffers() || null_stream) return nullptr;
  cudaStream_t s;
  // Non-blocking: ranks that are threads of one process must not serialise
  // on the legacy default stream.
  PERF_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void stream_destroy(cudaStream_t s) {
  if (s) cudaStreamDestroy(s);
}
void stream_sync(cudaStream_t s) {
  if (device_buffers()) PERF_CUDA(cudaStreamSynchronize(s));  // NULL: the legacy default stream
}
size_t device_total_memory() {
  if (!device_buffers()) return 0;
  size_t free = 0, total = 0;
  PERF_CUDA(cudaMemGetInfo(&free, &total));
  return total;
}
const char* device_description() {
  static const std::string d = [] {
    if (!device_buffers()) return std::string("host memory");
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, dev);
    return fmt::format("cuda device {} ({})", dev, p.name);
  }();
  return d.c_str();
}
void* event_create() {
  cudaEvent_t e = nullptr;
  PERF_CUDA(cudaEventCreate(&e));
  return e;
}
void event_record(void* event, cudaStream_t s) { PERF_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event), s)); }
double event_seconds(void* start, void* stop) {
  float ms = 0;
  PERF_CUDA(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)));
  return ms * 1e-3;
}
void event_destroy(void* event) {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}
void capture_begin(cudaStream_t s) { PERF_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)); }
CapturedGraph capture_end(cudaStream_t s) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  PERF_CUDA(cudaStreamEndCapture(s, &graph));
  PERF_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  return CapturedGraph{graph, exec};
}
void graph_launch(const CapturedGraph& g, cudaStream_t s) {
  PERF_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(g.exec), s));
}
void graph_destroy(CapturedGraph* g) {
  if (g->exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g->exec));
  if (g->graph) cudaGraphDestroy(static_cast<cudaGraph_t>(g->graph));
  *g = CapturedGraph{};
}
#else
namespace {
[[noreturn]] void no_graphs() {
  fmt::print(stderr, "perf: CUDA graphs (-G) need a build with CUDA and device buffers\n");
  std::exit(3);
}
[[noreturn]] void no_events() {
  fmt::print(stderr, "perf: CUDA events need a build with CUDA and device buffers\n");
  std::exit(2);
}
}  // namespace
void* event_create() { no_events(); }
void event_record(void*, cudaStream_t) { no_events(); }
double event_seconds(void*, void*) { no_events(); }
void event_destroy(void*) {}
void capture_begin(cudaStream_t) { no_graphs(); }
CapturedGraph capture_end(cudaStream_t) { no_graphs(); }
void graph_launch(const CapturedGraph&, cudaStream_t) { no_graphs(); }
void graph_destroy(CapturedGraph*) {}
bool device_buffers() { return false; }
void* buffer_alloc(size_t bytes) { return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096); }
void buffer_free(void* p) { std::free(p); }
void copy_to_buffer(void* dst, const void* host, size_t bytes) { std::memcpy(dst, host, bytes); }
void copy_from_buffer(void* host, const void* src, size_t bytes) { std::memcpy(host, src, bytes); }
cudaStream_t stream_create(bool) { return nullptr; }
void stream_destroy(cudaStream_t) {}
void stream_sync(cudaStream_t) {}
size_t device_total_memory() { return 0; }
const char* device_description() { return "host memory"; }
#endif

}  // namespace perf

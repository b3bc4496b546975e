// A stand-in for libcudart.so with two devices, for testing
// libbraid-devmap.so (tools/devmap) where there is no GPU: the functions it
// maps, answering from a fixed world that records which real device each
// thread made current; and the stream, event, memset and copy calls it
// interposes or makes, done at once on host memory and logged per thread
// ("memsetAsync 0x2": on stream 0x2, cudaStreamPerThread), so the probe can
// check which calls reached the runtime, on which streams, in which order.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace {
constexpr int kDevices = 2;
thread_local int current = 0;
bool valid(int d) { return d >= 0 && d < kDevices; }

thread_local std::string log_text;
void note(const char* what, const void* handle = nullptr) {
  char line[64];
  if (handle) std::snprintf(line, sizeof line, "%s %p;", what, handle);
  else std::snprintf(line, sizeof line, "%s;", what);
  log_text += line;
}
std::atomic<uintptr_t> next_handle{0x1000};
template <typename H>
H new_handle() {
  return reinterpret_cast<H>(next_handle.fetch_add(0x10));
}
}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = kDevices;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!valid(device)) return cudaErrorInvalidDevice;
  current = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = current;
  return cudaSuccess;
}
cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  return valid(device) ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!valid(device)) return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "fake-%d", device);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!valid(device)) return cudaErrorInvalidDevice;
  *value = device * 1000 + int(attr);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (!valid(device)) return cudaErrorInvalidDevice;
  std::snprintf(id, size_t(len), "0000:0%d:00.0", device);
  return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!valid(device) || !valid(peer)) return cudaErrorInvalidDevice;
  *can = device != peer;  // the real runtime says 0 for a device and itself
  return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int) {
  return valid(peer) && peer != current ? cudaSuccess : cudaErrorInvalidDevice;
}

// (Each makes its handle itself: a call to cudaStreamCreate from here would
// reach the preloaded library's, as a program's call does.)
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new_handle<cudaStream_t>();
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = new_handle<cudaStream_t>();
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int, int) {
  *s = new_handle<cudaStream_t>();
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = new_handle<cudaEvent_t>();
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t s) {
  note("eventRecord", s);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t, unsigned int) {
  note("streamWaitEvent", s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  note("streamSynchronize", s);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  note("deviceSynchronize");
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  note("memset");
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  note("memsetAsync", s);
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* d, const void* src, size_t n, cudaMemcpyKind) {
  note("memcpy");
  std::memcpy(d, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s) {
  note("memcpyAsync", s);
  std::memcpy(d, src, n);
  return cudaSuccess;
}

// What the probe reads back: the real device this thread made current, and
// this thread's log of calls (taken and cleared).
int fake_cudart_current() { return current; }
const char* fake_cudart_take_log() {
  thread_local std::string taken;
  taken.swap(log_text);
  log_text.clear();
  return taken.c_str();
}

}  // extern "C"

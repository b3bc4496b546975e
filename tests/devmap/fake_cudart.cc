// A stand-in for libcudart.so with two devices, for testing
// libbraid-devmap.so (tools/devmap/devmap.cc) where there is no GPU: the
// functions it maps, answering from a fixed world that records which real
// device each thread made current.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

namespace {
constexpr int kDevices = 2;
thread_local int current = 0;
bool valid(int d) { return d >= 0 && d < kDevices; }
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

// What the probe reads back: the real device this thread made current.
int fake_cudart_current() { return current; }

}  // extern "C"

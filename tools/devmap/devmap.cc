// libbraid-devmap.so: runs a program written for one GPU per rank with
// more ranks than GPUs, by showing it more devices than there are.
//
//   BRAID_DEVICES=8 LD_PRELOAD=libbraid-devmap.so ./program
//
// Programs such as NCCL's examples (examples/06_device_api) pick device
// `rank` and refuse more ranks than cudaGetDeviceCount says.  Preloaded
// ahead of the CUDA runtime (a program linked to libcudart.so, which is
// how NCCL's examples link), this library answers cudaGetDeviceCount with
// BRAID_DEVICES and maps every device index v the program passes to real
// device v % (real count): rank r of 8 on one GPU runs on device 0, and on
// two GPUs on device r % 2.  cudaGetDevice returns the index the thread
// set.  Peer access between two indices of one real device is that
// device's own memory: allowed, and enabling it succeeds without a call.
// braid itself (its static CUDA runtime) sees the real devices and allows
// several ranks per GPU.  Without BRAID_DEVICES every call passes through.
//
// Such programs run their ranks as threads (the examples do): several
// ranks then share one GPU's context, where a rank's kernel waits for its
// peers'.  So, before the program starts CUDA, this library asks for 32
// hardware queues (8 by default: a kernel queued behind a peer's waiting
// one would never start) and for every kernel loaded at start (a lazy load
// at a first launch may wait for the device, where a peer's kernel spins),
// unless the environment already says otherwise.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "tools/devmap/devmap.h"

namespace devmap {

int virtual_count() {
  static const int n = [] {
    const char* v = std::getenv("BRAID_DEVICES");
    const int n = v ? std::atoi(v) : 0;
    return n > 0 ? n : 0;
  }();
  return n;
}

int real_count() {
  REAL(cudaGetDeviceCount);
  static const int n = [] {
    int n = 0;
    if (!real_cudaGetDeviceCount || real_cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    return n;
  }();
  return n;
}

}  // namespace devmap

namespace {

using devmap::mapping;
using devmap::real_count;
using devmap::virtual_count;

// The real device behind index v; -1 when v is not a device the program sees.
int real_of(int v) {
  const int n = real_count();
  if (v < 0 || v >= virtual_count() || n == 0) return -1;
  return v % n;
}

thread_local int chosen = -1;  // the index this thread set, if any

__attribute__((constructor)) void settle_thread_ranks() {
  if (!mapping()) return;
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  REAL(cudaGetDeviceCount);
  if (!mapping()) return real_cudaGetDeviceCount(count);
  if (!count) return cudaErrorInvalidValue;
  if (real_count() == 0) return real_cudaGetDeviceCount(count);  // no device: the runtime's own answer
  *count = virtual_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  REAL(cudaSetDevice);
  if (!mapping()) return real_cudaSetDevice(device);
  const int r = real_of(device);
  if (r < 0) return cudaErrorInvalidDevice;
  const cudaError_t e = real_cudaSetDevice(r);
  if (e == cudaSuccess) chosen = device;
  return e;
}

cudaError_t cudaGetDevice(int* device) {
  REAL(cudaGetDevice);
  const cudaError_t e = real_cudaGetDevice(device);
  if (e == cudaSuccess && mapping() && chosen >= 0 && real_of(chosen) == *device) *device = chosen;
  return e;
}

cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  REAL(cudaInitDevice);
  if (!mapping()) return real_cudaInitDevice(device, deviceFlags, flags);
  const int r = real_of(device);
  return r < 0 ? cudaErrorInvalidDevice : real_cudaInitDevice(r, deviceFlags, flags);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  REAL(cudaGetDeviceProperties);
  if (!mapping()) return real_cudaGetDeviceProperties(prop, device);
  const int r = real_of(device);
  return r < 0 ? cudaErrorInvalidDevice : real_cudaGetDeviceProperties(prop, r);
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  REAL(cudaDeviceGetAttribute);
  if (!mapping()) return real_cudaDeviceGetAttribute(value, attr, device);
  const int r = real_of(device);
  return r < 0 ? cudaErrorInvalidDevice : real_cudaDeviceGetAttribute(value, attr, r);
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  REAL(cudaDeviceGetPCIBusId);
  if (!mapping()) return real_cudaDeviceGetPCIBusId(pciBusId, len, device);
  const int r = real_of(device);
  return r < 0 ? cudaErrorInvalidDevice : real_cudaDeviceGetPCIBusId(pciBusId, len, r);
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  REAL(cudaDeviceCanAccessPeer);
  if (!mapping()) return real_cudaDeviceCanAccessPeer(canAccessPeer, device, peerDevice);
  const int r = real_of(device), p = real_of(peerDevice);
  if (r < 0 || p < 0) return cudaErrorInvalidDevice;
  if (r == p) {  // one GPU: its own memory
    *canAccessPeer = 1;
    return cudaSuccess;
  }
  return real_cudaDeviceCanAccessPeer(canAccessPeer, r, p);
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  REAL(cudaDeviceEnablePeerAccess);
  REAL(cudaGetDevice);
  if (!mapping()) return real_cudaDeviceEnablePeerAccess(peerDevice, flags);
  const int p = real_of(peerDevice);
  if (p < 0) return cudaErrorInvalidDevice;
  int current = -1;
  if (real_cudaGetDevice(&current) == cudaSuccess && current == p) return cudaSuccess;
  return real_cudaDeviceEnablePeerAccess(p, flags);
}

}  // extern "C"

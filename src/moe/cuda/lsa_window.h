// What braid's CUDA MoE and AlltoAllv handles stand on: a window every rank
// of the communicator reaches through NCCL's LSA pointers (ncclMemAlloc
// memory, zeroed, registered NCCL_WIN_COLL_SYMMETRIC), device memory for
// the kernels' state (zeroed), and the error record the kernels fill
// (DeviceMoeError, in mapped host memory).
//
// Ranks may be threads sharing one GPU, whose kernels wait for each other:
// nothing here may block on device work while a peer's kernel could be
// waiting for this rank's next one.  So the agreements and the barriers run
// on the host (src/shim/host_exchange.h), the state shares the window's
// allocation, the error records are pooled rather than freed (cudaFreeHost
// waits for every kernel), the handle's reads of its state go through its
// own stream, and what may wait for the device (registering, deregistering
// and freeing the window) is fenced by host barriers on both sides.
//
// Open is collective and fails on every rank alike: every rank's LSA team
// must be the whole communicator, and every rank must get its memory,
// before any registers the window; then every rank's window must be
// symmetric.  Close is collective: this rank's last launch is waited for
// (an event the handle recorded after it, on the caller's stream, which may
// be gone by then; a graph's replays are the caller's to wait for), then a
// barrier (after it no peer's kernel stores into the window), then the
// window is deregistered and freed, then a second barrier.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "nccl.h"
#include "src/base/status.h"
#include "src/moe/cuda/device_moe.h"

namespace braid::moe::cuda {

class LsaWindow {
 public:
  static Status open(ncclComm_t comm, int device, size_t window_bytes, size_t state_bytes, const char* what,
                     std::unique_ptr<LsaWindow>* out);
  LsaWindow(const LsaWindow&) = delete;
  LsaWindow& operator=(const LsaWindow&) = delete;
  ~LsaWindow();  // frees what close() did not; a registered window stays (a peer may still store into it)

  // After each launch on `stream`: close() waits for it (a launch being
  // captured into a graph is not: its replays are the caller's to wait for).
  void launched(cudaStream_t stream);
  Status close();

  ncclWindow_t window() const { return window_; }
  char* base() const { return static_cast<char*>(memory_); }  // this rank's part, at the window's offset 0
  void* state() const { return state_; }
  DeviceMoeError* device_error() const { return device_error_; }
  // The kernels' first error, or kDeviceOk; *e its record.
  int32_t error_code(DeviceMoeError* e) const;
  // `bytes` of the state at `device` into `host`, through the handle's stream.
  Status read(void* host, const void* device, size_t bytes);

 private:
  LsaWindow(ncclComm_t comm, int device, const char* what) : comm_(comm), device_(device), what_(what) {}
  Status allocate(size_t window_bytes, size_t state_bytes);
  void release();

  const ncclComm_t comm_;
  const int device_;
  const std::string what_;
  void* memory_ = nullptr;
  ncclWindow_t window_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t last_launch_ = nullptr;
  bool launched_ = false;
  void* state_ = nullptr;
  DeviceMoeError* host_error_ = nullptr;
  DeviceMoeError* device_error_ = nullptr;
};

// The handle's device is current while a call runs; the caller's comes back.
class OnDevice {
 public:
  explicit OnDevice(int device);
  ~OnDevice();

 private:
  int previous_ = -1;
};

Status cuda_status(cudaError_t e, const std::string& what);

}  // namespace braid::moe::cuda

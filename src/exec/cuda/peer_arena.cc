#include "src/exec/cuda/peer_arena.h"

#include "src/exec/cuda/cuda_try.h"

namespace braid::cuda {

Status enable_peer_access(int device, int peer_device) {
  int can = 0;
  CUDA_TRY(cudaDeviceCanAccessPeer(&can, device, peer_device));
  if (!can)
    return BRAID_ERROR(ncclSystemError,
                       "GPU {} cannot access GPU {} (no peer access between them), which the CUDA backend needs for "
                       "ranks of one process on both; run the ranks as processes, or set NCCL_P2P_DISABLE=1 (device "
                       "buffers through host memory) or BRAID_BACKEND=host",
                       device, peer_device);
  const cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // not sticky: clear it
    return Status::ok();
  }
  CUDA_TRY(e);
  return Status::ok();
}

Status open_peer_arena(const TransportContext& comm, int r, const cudaIpcMemHandle_t& handle, void** mapped) {
  const cudaError_t e = cudaIpcOpenMemHandle(mapped, handle, cudaIpcMemLazyEnablePeerAccess);
  if (e == cudaSuccess) return Status::ok();
  const bool other_namespace = comm.peers[size_t(r)].pid_ns != comm.peers[size_t(comm.rank)].pid_ns;
  return BRAID_ERROR(ncclUnhandledCudaError, "cudaIpcOpenMemHandle of rank {}'s arena failed: {} ({}){}", r,
                     cudaGetErrorString(e), cudaGetErrorName(e),
                     other_namespace ? "; that rank is in another pid namespace, and CUDA IPC handles open only "
                                       "within one (share it: docker --pid=host; or set BRAID_BACKEND=host)"
                                     : "");
}

}  // namespace braid::cuda

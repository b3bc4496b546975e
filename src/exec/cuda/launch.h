// Host entry points of the CUDA kernels (kernels.cu).  All asynchronous on
// `stream`; errors are launch errors only (what the kernels hit is reported
// through the launch's host-mapped error word).
#pragma once

#include <cuda_runtime.h>

#include "src/exec/cuda/device_plan.h"
#include "src/plan/duration_stamp.h"

namespace braid::cuda {

// Loads every kernel now (see kernels.cu): call once per process and device.
cudaError_t preload_kernels();
// How many blocks of the collective kernel `device` runs at once.  Ranks
// spin on each other inside their kernels, so a launch must fit beside its
// peers' launches on a shared device, or it may wait for them forever.
cudaError_t resident_collective_blocks(int device, int* blocks);
// lanes x slices blocks (see CollectiveLaunch).
cudaError_t launch_collective(const CollectiveLaunch& launch, uint32_t lanes, uint32_t slices, cudaStream_t stream);
// One block: an LL one-shot collective.
cudaError_t launch_ll(const LLLaunch& launch, cudaStream_t stream);
// BRAID_STRAGGLER=auto: one thread stamps a tracked call's arrival, or its
// completion, on the duration board (`entry`: its device address).
cudaError_t launch_stamp_arrival(DurationEntry* entry, cudaStream_t stream);
cudaError_t launch_stamp_completion(DurationEntry* entry, uint64_t call, cudaStream_t stream);
cudaError_t launch_p2p(const P2PLaunch& launch, uint32_t blocks, cudaStream_t stream);
// One-sided calls (cuda_rma.h): a signal (the sender's count for the
// counter, one more, stored into the receiver's counter in stream order
// after the payload's copy); a wait.
cudaError_t launch_rma_signal(uint64_t* sent, uint64_t* counter, cudaStream_t stream);
cudaError_t launch_rma_wait(const RmaWaitLaunch& launch, cudaStream_t stream);
// data[i] /= divisor: ncclAvg's last step.
cudaError_t launch_divide(void* data, uint64_t count, ncclDataType_t type, int divisor, cudaStream_t stream);
// out[i] = in[i] * scalar (PreMulSum's first step): the scalar is read from
// device memory at run time when scalar_device is set, else its bytes are
// scalar_bits.
cudaError_t launch_scale(void* out, const void* in, uint64_t count, ncclDataType_t type, const void* scalar_device,
                         uint64_t scalar_bits, cudaStream_t stream);

}  // namespace braid::cuda

// Ranks that are threads of one process sharing a GPU share its context,
// and their kernels wait for each other.  Two settings, read when CUDA
// starts (so the program's, not braid's, to make), keep that from hanging:
// CUDA_DEVICE_MAX_CONNECTIONS=32 (with the default 8 hardware queues, a
// rank's kernel can be queued behind a peer's waiting one) and
// CUDA_MODULE_LOADING=EAGER (a kernel loaded lazily at its first launch may
// wait for the device, where a peer's kernel spins).  README.md, "Ranks may
// share one GPU".  Plain C++ (no CUDA), so the CPU tests reach it.
#pragma once

namespace braid::cuda {

// Warns once per process when `threads_on_device` (this rank included) is 2
// or more and either setting is missing.
void warn_unless_thread_ranks_settled(int device, int threads_on_device);

}  // namespace braid::cuda

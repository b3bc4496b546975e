// What the host-launched MoE and AlltoAllv kernels (moe_kernels.cu,
// alltoallv_kernels.cu) read and write, set up by CudaMoe (cuda_moe.h) and
// CudaAlltoAllv (cuda_alltoallv.h).  Plain C++: the host side is compiled without
// nvcc.
//
// A CUDA graph replays a kernel with the arguments it was captured with, so
// nothing that changes from call to call is an argument: the call number
// (and from it the epoch, signal.h epoch_of_call) lives in DeviceMoeState,
// read by every CTA when the kernel starts and advanced by the last CTA to
// finish.  Calls of one handle are stream-ordered (one stream, or streams
// the caller orders), as NCCL's calls on one communicator are.
#pragma once

#include <cstdint>

#include "braid/moe.h"
#include "braid/moe/layout.h"
#include "nccl.h"
#include "src/moe/alltoallv_protocol.h"

namespace braid::moe::cuda {

// Device memory, zeroed at create.
struct DeviceMoeState {
  uint64_t dispatch_calls, combine_calls;  // calls completed
  uint64_t dispatch_exits, combine_exits;  // CTAs that finished a call, all calls
  uint64_t plan_ready;                     // the dispatch call whose plan CTA 0 wrote
  int32_t tokens;                          // the last dispatch's token count, for its combine
  int32_t stop;                            // raised with the first error: every wait gives up
  int32_t plan_failed;                     // the planned call's top-k has a bad index (kFailedSender words)
  braidMoeStats_t stats;
};

// What went wrong on the device, in mapped host memory: the first error
// (the first to raise the state's stop word) fills it, then publishes `code`.
enum DeviceErrorCode : int32_t {
  kDeviceOk = 0,
  kDeviceTimeout = 1,       // no signal from `peer` for `local_expert` within the timeout
  kDeviceOverCapacity = 2,  // `peer` signalled `value` rows for `local_expert`, over capacity
  kDeviceBadExpert = 3,     // token `value` routes to an expert out of range
  kDeviceRowsMismatch = 4,  // combine: `peer` returned `value` rows for `local_expert`, not what was sent
  kDeviceBadCount = 5,      // AlltoAllv: `peer`'s sendCounts[`value`] is out of range
  kDeviceCountOverMax = 6,  // AlltoAllv: `peer` signalled `value` elements, over maxCountPerPeer
  kDevicePlanTimeout = 7,   // dispatch: CTA 0's plan did not come within the timeout
  kDevicePeerFailed = 8,    // `peer`'s word says the call failed (a bad argument there, calls.h)
  kDeviceRefused = 9,       // the host refused this rank's arguments (the call's own error said why)
};
struct DeviceMoeError {
  int32_t code;
  int32_t combine;  // 0: dispatch, 1: combine
  int32_t peer, local_expert;
  int64_t value;
  uint64_t epoch;
};

struct DeviceMoe {
  Shape shape;
  WindowLayout layout;
  OutputLayout output = OutputLayout::ExpertMajor;
  ncclWindow_t window = nullptr;  // every rank's, in this rank's LSA team
  int32_t rank = 0;
  ncclDataType_t dtype = ncclBfloat16;
  uint64_t timeout_ns = 0;
  DeviceMoeState* state = nullptr;
  uint32_t *dispatch_arrivals = nullptr, *combine_arrivals = nullptr;  // [nranks], never reset
  int32_t *wanted = nullptr, *sent = nullptr;                          // [experts]
  int32_t *topk = nullptr, *slots = nullptr;                           // [max_tokens][top_k], the last dispatch's
  int32_t* received = nullptr;                                         // [nranks][local experts]
  int64_t* first_row = nullptr;                                        // [nranks][local experts]
  DeviceMoeError* error = nullptr;                                     // mapped host memory
};

// The AlltoAllv's kernel (alltoallv_kernels.cu; the protocol is
// src/moe/alltoallv.h's, its window alltoallv_protocol.h's).
struct DeviceAlltoAllvState {
  uint64_t calls, exits;
  int32_t stop;
};
struct DeviceAlltoAllv {
  AlltoAllvLayout layout;
  ncclWindow_t window = nullptr;
  int32_t rank = 0;
  uint64_t timeout_ns = 0;
  DeviceAlltoAllvState* state = nullptr;  // device memory, zeroed at create
  DeviceMoeError* error = nullptr;        // mapped host memory
};
int launch_alltoallv(const DeviceAlltoAllv& h, int ctas, const void* send, const int64_t* send_counts, void* recv,
                     int64_t* recv_counts, cudaStream_t stream);

// Shared memory a CTA of either MoE kernel takes: what it is launched with,
// and its own variables' (the most of either kernel; 0 if unknown).
size_t kernel_shared_bytes(const Shape& s);
size_t kernel_static_shared_bytes();
constexpr int kThreadsPerCta = 512;

// On `stream`; 0 or a cudaError_t.  droppedRows: device memory or null.
// pull: tokens is this rank's dispatch buffer, read in place by the
// experts' owners (zero-copy dispatch, layout.h).  refused: the host
// refused this call's arguments; the kernel still takes part, with no
// rows and kFailedSender words (calls.h), so that the peers' calls fail at
// once, and then stops the handle (kDeviceRefused).
int launch_dispatch(const DeviceMoe& h, int ctas, const void* tokens, bool pull, const int32_t* topk,
                    int32_t ntokens, void* out, int32_t* recv_counts, int64_t* dropped, bool refused,
                    cudaStream_t stream);
// pull: expert_out is this rank's combine buffer, read in place by its
// sources (zero-copy combine, layout.h).  refused: as dispatch's.
int launch_combine(const DeviceMoe& h, int ctas, const void* expert_out, bool pull, const float* weights, void* out,
                   bool refused, cudaStream_t stream);

// CUDA loads kernels lazily, and loading one may wait for the device to go
// idle: a first launch while a peer rank's kernel spins waiting for this
// rank would never return.  These load the MoE and AlltoAllv kernels now
// (at create, before any of the handle's launches); 0 or a cudaError_t.
int preload_moe_kernels();
int preload_alltoallv_kernel();

// The ranks of comm's LSA team (those whose windows this rank's kernels
// reach through ncclGetPeerPointer).
int lsa_team_size(ncclComm_t comm);

}  // namespace braid::moe::cuda

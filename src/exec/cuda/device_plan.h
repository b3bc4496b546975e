// The schedule as the CUDA kernels read it: the rank's records
// (src/ops/plan_records.h, the same the host executor interprets) copied to
// device memory once per schedule, each connection resolved to a FIFO per
// slice, and interpreted by one thread block per (lane, slice).
//
// Connections are FIFOs living in the *receiver's* memory (its arena, mapped
// into the sender's address space with CUDA IPC, or directly when both ranks
// are threads of one process).  Counters only ever grow: every call on a
// connection moves the same number of fragments on both sides, so the values
// left by one launch are where the next one starts, and a CUDA graph replay
// needs no host involvement.
#pragma once

#include <cstddef>
#include <cstdint>

#include "braid/chunking.h"
#include "braid/hd.h"
#include "nccl.h"
#include "src/ops/ll_oneshot.h"
#include "src/ops/op_step.h"
#include "src/ops/plan_records.h"
#include "src/ops/reduce_ops.h"

namespace braid::cuda {

// One end of one connection.  `slots`, `lengths`, `tail`, `head` all point
// into the receiver's arena; the sender writes slots/lengths/tail and reads
// head, the receiver the other way round.
struct DevFifo {
  char* slots = nullptr;        // nslots * slot_bytes
  uint64_t* lengths = nullptr;  // per slot: bytes in the fragment
  uint64_t* totals = nullptr;   // per slot: bytes of the whole message (point-to-point)
  uint64_t* tail = nullptr;     // fragments posted (written by the sender)
  uint64_t* head = nullptr;     // fragments consumed (written by the receiver)
  int32_t peer = -1;            // the rank at the other end
};

// What one launch needs, passed by value as the kernel argument (no per-call
// device allocation, so launches can be captured in CUDA graphs).
struct CollectiveLaunch {
  const LaneRecord* lanes = nullptr;
  const OpRecord* ops = nullptr;
  const DepRecord* deps = nullptr;
  // An op's send_conn / recv_conn, in slice s: fifos[s * fifos_per_slice + conn].
  const DevFifo* fifos = nullptr;
  // The call runs as gridDim.y independent slices (op_step.h, slice_of):
  // each its own part of every buffer block and its own connections, so S
  // blocks per lane move data in parallel, like NCCL's channels.
  StepBuffers buffers;
  uint32_t fifos_per_slice = 0;
  uint32_t nslots = 0;
  uint64_t slot_bytes = 0;
  ncclDataType_t type = ncclFloat;
  ReduceKind kind = ReduceKind::Sum;
  uint32_t* lane_done = nullptr;  // ops completed per (slice, lane), zeroed before each launch
  // One-sided schedules (schedule.h): what this rank's Signals carry, and
  // where its Waits keep their peers' (per slice, per rank; zeroed before
  // each launch that has them).  Ranks that are threads of one process only:
  // their buffers' addresses mean the same to every rank.
  PeerBuffers self;
  PeerBuffers* peers = nullptr;
  uint32_t nranks = 0;
  int* error = nullptr;           // host-mapped: first error code the kernel hit
  const int* abort_flag = nullptr;  // host-mapped: ncclCommAbort or ncclCommRevoke raised it
  const int* exited = nullptr;      // host-mapped: a word per rank, raised once its process exited
  uint64_t timeout_ns = 0;
};

// Grouped send/recv: one block per (peer, direction), its ops in call order.
struct DevP2POp {
  char* buffer = nullptr;
  uint64_t bytes = 0;
  int32_t fifo = -1;
  uint8_t is_send = 0;
};
struct DevP2PBlock {
  uint32_t op_begin = 0, op_count = 0;
};
struct P2PLaunch {
  const DevP2PBlock* blocks = nullptr;
  const DevP2POp* ops = nullptr;
  const DevFifo* fifos = nullptr;
  uint32_t nslots = 0;
  uint64_t slot_bytes = 0;
  int* error = nullptr;
  const int* abort_flag = nullptr;
  const int* exited = nullptr;
  uint64_t timeout_ns = 0;
};

// A small collective on the LL protocol (src/ops/ll_oneshot.h): one block.
// `seq` (device memory, this rank's) counts the LL calls run so far; the
// kernel reads it and stores the next value as it ends, so graph replays
// keep counting without the host.
struct LLLaunch {
  LLArgs args;  // args.regions: a device array of every rank's LL region as mapped here
  uint64_t* seq = nullptr;
  int* error = nullptr;
  const int* abort_flag = nullptr;
  const int* exited = nullptr;
  uint64_t timeout_ns = 0;
};

// ncclWaitSignal (src/exec/cuda/cuda_rma.h): up to kMaxRmaWaits counters
// of this rank's arena, each waited for until it reached what this rank
// consumed of it plus `count`, then consumed.
struct RmaWait {
  uint32_t index = 0;  // into arrived[] and consumed[]: sender x (ctx, sigIdx) pairs
  int32_t peer = 0;    // the sender (its exited word stops the wait)
  uint32_t pair = 0;   // ctx x numRmaSig + sigIdx (what a timeout reports)
  uint64_t count = 0;
};
constexpr uint32_t kMaxRmaWaits = 32;
struct RmaWaitLaunch {
  const uint64_t* arrived = nullptr;
  uint64_t* consumed = nullptr;
  RmaWait waits[kMaxRmaWaits];
  uint32_t n = 0;
  int* error = nullptr;
  const int* abort_flag = nullptr;
  const int* exited = nullptr;
  uint64_t timeout_ns = 0;
};

// Error codes the kernels report (through CollectiveLaunch::error).
enum DevError : int {
  kDevOk = 0,
  kDevTimeout = 1,   // a peer did not move for timeout_ns
  kDevAborted = 2,   // ncclCommAbort
  kDevMismatch = 3,  // send/recv sizes disagree, or a fragment is too short
  kDevBadPlan = 4,   // the schedule touches a buffer this rank passed as NULL
  kDevPeerExited = 5,  // the process of the rank a wait was for exited
};

// A word the host raises while kernels run (the abort flag, an exited
// word): volatile on the device, an atomic load where the CPU tests run it.
BRAID_HD int load_raised(const int* word) {
#if defined(__CUDA_ARCH__)
  return *(const volatile int*)word;
#else
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
#endif
}

// The exited word of `peer` (nullptr: a wait for this rank's own lanes).
BRAID_HD const int* exited_word(const int* exited, int32_t peer) {
  return exited && peer >= 0 ? exited + peer : nullptr;
}

// Why a kernel's wait stops before what it waits for comes (kDevOk: it
// does not): the abort flag stops every wait, a peer's exited word only the
// waits for that peer, which may have finished its part of the call before
// it exited.  The CPU tests wait through it too.
BRAID_HD int wait_stop(const int* abort_flag, const int* peer_exited) {
  if (load_raised(abort_flag)) return kDevAborted;
  if (peer_exited && load_raised(peer_exited)) return kDevPeerExited;
  return kDevOk;
}

// The host-mapped words a launch's `error` points at: the error code, the
// abort flag, then where the first timed-out wait was, for the host's warning.
enum DevFlag : int {
  kFlagError = 0,
  kFlagAbort = 1,
  kFlagWaitTaken = 2,  // 1 while a timed-out wait records itself below, 2 once it has
  kFlagWaitKind = 3,   // a DevWait
  kFlagWaitBlockX = 4,  // lane (collective) or peer-direction block (p2p)
  kFlagWaitBlockY = 5,  // slice
  kFlagWaitOp = 6,
  kFlagWaitTile = 7,  // tile (collective) or byte offset (p2p)
  kFlagWaitSeen = 8,  // the counter's value (low 32 bits)
  kFlagWaitWant = 9,  // the value waited for (low 32 bits)
  kFlagWords = 10,  // then the exited words, one per rank (CollectiveLaunch::exited)
};
// kWaitLL: an LL line (op: the peer, tile: the word, seen/want: its flags).
// kWaitSignal: a one-sided signal (op: the sender, tile: its (ctx, sigIdx)
// pair, seen/want: the counter's value and the value wanted).
enum DevWait : int { kWaitDep = 1, kWaitData = 2, kWaitSlot = 3, kWaitLL = 4, kWaitSignal = 5 };

// The host's handle on one schedule's records in device memory (cuda_backend.cc).
struct DevicePlan {
  LaneRecord* lanes = nullptr;  // all records in one allocation
  OpRecord* ops = nullptr;
  DepRecord* deps = nullptr;
  DevFifo* fifos = nullptr;
  uint32_t nlanes = 0;
  uint32_t max_slices = 1;       // channels_ / channels the schedule uses, within the block budget
  uint32_t fifos_per_slice = 0;  // fifos[s * fifos_per_slice + i]: slice s
  uint32_t max_frame = 1;        // the schedule's largest frame (src/ops/op_step.h)
  bool chunk_messages = true;    // false: signals only, the call runs as one tile
  bool signals = false;          // Signals and Waits: the launch carries a peer table
  void* block = nullptr;
  size_t bytes = 0;                // of block
  cudaEvent_t uploaded = nullptr;  // behind the block's upload, until a captured call waited for it
};

}  // namespace braid::cuda

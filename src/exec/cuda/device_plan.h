// The schedule as the CUDA kernels read it: plain fixed-size records in
// device memory (MSCCL++'s execution-plan idea), built once per (schedule,
// rank) on the host and interpreted by one thread block per lane.
//
// Connections are FIFOs living in the *receiver's* memory (its arena, mapped
// into the sender's address space with CUDA IPC, or directly when both ranks
// are threads of one process).  Counters only ever grow: every call on a
// connection moves the same number of fragments on both sides, so the values
// left by one launch are where the next one starts, and a CUDA graph replay
// needs no host involvement.
#pragma once

#include <cstdint>

#include "braid/chunking.h"
#include "braid/hd.h"
#include "nccl.h"
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
};

enum DevBuffer : uint8_t { kDevInput = 0, kDevOutput = 1, kDevScratch = 2 };

struct DevOp {
  uint8_t type = 0;  // braid::OpType
  uint8_t src_buffer = 0, dst_buffer = 0;
  uint8_t pad = 0;
  uint32_t src_index = 0, dst_index = 0;
  uint32_t count = 1;
  int32_t send_fifo = -1, recv_fifo = -1;  // indices into the plan's fifo table
  uint32_t dep_begin = 0, dep_count = 0;   // into the plan's dep table
};

struct DevDep {
  uint32_t lane = 0;
  uint32_t op = 0;
};

struct DevLane {
  uint32_t op_begin = 0, op_count = 0;
};

// What one launch needs, passed by value as the kernel argument (no per-call
// device allocation, so launches can be captured in CUDA graphs).
struct CollectiveLaunch {
  const DevLane* lanes = nullptr;
  const DevOp* ops = nullptr;
  const DevDep* deps = nullptr;
  const DevFifo* fifos = nullptr;
  const char* input = nullptr;
  char* output = nullptr;
  char* scratch = nullptr;
  BufferShape input_shape, output_shape;  // of the whole call
  uint64_t scratch_stride = 0;  // scratch elements each slice owns
  uint64_t tile_elems = 0;
  // The call runs as gridDim.y independent slices: slice s takes elements
  // [count*s/S, count*(s+1)/S) of every buffer block and its own connections
  // (fifos [s * fifos_per_slice, ...)), so S blocks per lane move data in
  // parallel, like NCCL's channels.
  uint32_t fifos_per_slice = 0;
  uint32_t esize = 0;
  uint32_t nslots = 0;
  uint64_t slot_bytes = 0;
  ncclDataType_t type = ncclFloat;
  ReduceKind kind = ReduceKind::Sum;
  uint32_t* lane_done = nullptr;  // ops completed per (slice, lane), zeroed before each launch
  int* error = nullptr;           // host-mapped: first error code the kernel hit
  const int* abort_flag = nullptr;  // host-mapped: ncclCommAbort raised it
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
  uint64_t timeout_ns = 0;
};

// Error codes the kernels report (through CollectiveLaunch::error).
enum DevError : int {
  kDevOk = 0,
  kDevTimeout = 1,   // a peer did not move for timeout_ns
  kDevAborted = 2,   // ncclCommAbort
  kDevMismatch = 3,  // send/recv sizes disagree, or a fragment is too short
  kDevBadPlan = 4,   // the schedule touches a buffer this rank passed as NULL
};

// The host-mapped words a launch's `error` points at: the error code, the
// abort flag, then where the first timed-out wait was, for the host's warning.
enum DevFlag : int {
  kFlagError = 0,
  kFlagAbort = 1,
  kFlagWaitTaken = 2,  // 1 once a timed-out wait recorded itself below
  kFlagWaitKind = 3,   // a DevWait
  kFlagWaitBlockX = 4,  // lane (collective) or peer-direction block (p2p)
  kFlagWaitBlockY = 5,  // slice
  kFlagWaitOp = 6,
  kFlagWaitTile = 7,  // tile (collective) or byte offset (p2p)
  kFlagWaitSeen = 8,  // the counter's value (low 32 bits)
  kFlagWaitWant = 9,  // the value waited for (low 32 bits)
  kFlagWords = 10,
};
enum DevWait : int { kWaitDep = 1, kWaitData = 2, kWaitSlot = 3 };

}  // namespace braid::cuda

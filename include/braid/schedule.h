// The schedule IR: braid's contract between producers (algorithms/, synth/,
// MSCCL XML import) and consumers (verifier, simulator, executors, renderer).
//
// A Schedule describes one collective on `nranks` ranks.  Each rank has three
// buffers, each cut into chunks: input (the caller's send buffer), output (the
// caller's receive buffer) and scratch (braid-owned).  How many elements a
// chunk holds is decided at run time from the call's count (see chunk_range in
// chunking.h); the IR only speaks in chunk indices.
//
// Each rank runs a set of lanes (a thread block on GPU, a cooperative task on
// CPU).  A lane is an ordered list of ops.  An op may wait for ops of other
// lanes of the same rank (deps).  Point-to-point matching: on a connection
// (sender rank, receiver rank, channel), the k-th message sent is the k-th
// message received.  An op moving `count` chunks sends or receives them as
// one message (per tile: a frame, src/ops/op_step.h), in index order, as
// MSCCL sends a step of cnt chunks; its peer's matching op moves as many.
// Both executors do so.  Within a
// rank, at most one lane sends to a given (peer, channel) and at most one
// lane receives from it, so order is defined.
//
// Op semantics (src/dst are chunk ranges of `count` chunks; "recv" takes the
// next chunks from recv_peer; "send" posts chunks to send_peer; (+) is the
// collective's reduction):
//   Send               send(src)
//   Recv               dst = recv
//   RecvCopySend       dst = recv; send(dst)
//   RecvReduceSend     send(recv (+) src)              (no local write)
//   RecvReduceCopy     dst = recv (+) src
//   RecvReduceCopySend dst = recv (+) src; send(dst)
//   Copy               dst = src
//   Reduce             dst = dst (+) src
//   Nop                nothing (a dependency carrier)
//
// One-sided ops reach into a peer's buffers directly, for ranks that can
// load and store each other's memory (Backend::runs_one_sided: on the host
// backend, threads of one process and processes of one host, through
// mapped shareable memory or CMA; on the CUDA backend, threads of one
// process on one GPU so far).  Their
// peer-side ChunkRef names a chunk of that peer's buffers:
//   Put                peer send_peer's dst = src
//   Get                dst = peer recv_peer's src
//   GetReduce          dst = dst (+) peer recv_peer's src
//   GetReduceCopy      dst = peer recv_peer's src (+) src: the peer's chunk
//                      and this rank's own chunk named by the same ref (a
//                      block of every rank's input, as two-shot folds it),
//                      the peer's the left operand; one pass where a Copy
//                      and a GetReduce take two
//   Signal             tell send_peer: a message of no chunks on the lane's
//                      connection, matched like any other message
//   Wait               wait for recv_peer's next message (its Signal)
// A rank may touch a peer's buffers only while the peer is in the call: after
// a Wait for a Signal from that peer earlier on its own rank (lane order or
// deps), and before an op of the peer that the access happens before (a
// signal chain back to it).  The verifier checks both, and that no two
// unordered ops of any ranks touch the same bytes when one writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace braid {

enum class Collective : uint8_t {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AlltoAll,
  Gather,
  Scatter,
  Custom,
};

enum class BufferKind : uint8_t { Input, Output, Scratch };

enum class OpType : uint8_t {
  Send,
  Recv,
  RecvCopySend,
  RecvReduceSend,
  RecvReduceCopy,
  RecvReduceCopySend,
  Copy,
  Reduce,
  Nop,
  Put,
  Get,
  GetReduce,
  Signal,
  Wait,
  GetReduceCopy,  // appended: the others keep their numbers
};
constexpr OpType kLastOpType = OpType::GetReduceCopy;

// Every transport buffers at least this many fragments per connection, and
// schedules ask for no fewer (Schedule::slots).  Two, not one: a fused
// recv-reduce-send holds its incoming fragment while it waits for room
// downstream, so a ring whose every link already holds one fragment could
// never move with one slot.
constexpr int kMinSlots = 2;

// A contiguous range of chunks in one of a rank's buffers.
struct ChunkRef {
  BufferKind buffer = BufferKind::Input;
  uint32_t index = 0;
  friend bool operator==(const ChunkRef&, const ChunkRef&) = default;
};

// "Wait until op `op` of lane `lane` (same rank) has completed."
struct Dep {
  uint16_t lane = 0;
  uint32_t op = 0;
  friend bool operator==(const Dep&, const Dep&) = default;
};

struct Op {
  OpType type = OpType::Nop;
  int32_t send_peer = -1;  // rank receiving what this op sends, or -1
  int32_t recv_peer = -1;  // rank whose chunks this op receives, or -1
  ChunkRef src;            // read by Send, *ReduceSend/Copy, Copy, Reduce
  ChunkRef dst;            // written by Recv*, Copy*, Reduce
  uint32_t count = 1;      // chunks moved by this op
  std::vector<Dep> deps;
  friend bool operator==(const Op&, const Op&) = default;
};

// An op without dependencies (the common way producers start one).
inline Op make_op(OpType type, int32_t send_peer = -1, int32_t recv_peer = -1, ChunkRef src = {}, ChunkRef dst = {}) {
  Op op;
  op.type = type;
  op.send_peer = send_peer;
  op.recv_peer = recv_peer;
  op.src = src;
  op.dst = dst;
  return op;
}

struct Lane {
  uint16_t channel = 0;  // connections are keyed by (peer, channel)
  std::vector<Op> ops;
  friend bool operator==(const Lane&, const Lane&) = default;
};

struct RankProgram {
  uint32_t input_chunks = 0;
  uint32_t output_chunks = 0;
  uint32_t scratch_chunks = 0;
  std::vector<Lane> lanes;
  friend bool operator==(const RankProgram&, const RankProgram&) = default;
};

struct Schedule {
  std::string name;
  Collective collective = Collective::Custom;
  int nranks = 0;
  int root = -1;  // Broadcast/Reduce/Gather/Scatter: the root the schedule was built for
  // Placements the schedule is correct for.  In place means the input buffer
  // aliases the output (AllReduce/Broadcast/Reduce: same bytes; AllGather and
  // Gather: input = output chunk block `rank`; ReduceScatter and Scatter:
  // output = input chunk block `rank`; AlltoAll: same bytes).
  bool in_place = true;
  bool out_of_place = true;
  // Size range this schedule is meant for, inclusive, in the unit MSCCL
  // selects with: the call's whole message, count x type size, times
  // nranks for AllGather, ReduceScatter and AlltoAll (message_bytes).
  uint64_t min_bytes = 0;
  uint64_t max_bytes = UINT64_MAX;
  std::string protocol = "Simple";  // MSCCL protocol hint; host ignores it
  // Fragments each connection must buffer for the schedule to be free of
  // deadlock (verify.h); executors give every connection at least this many.
  int slots = kMinSlots;
  std::vector<RankProgram> ranks;
  friend bool operator==(const Schedule&, const Schedule&) = default;
};

// The size a call is selected by (Schedule::min_bytes): `count` is the NCCL
// call's count argument, as in chunking.h.
constexpr uint64_t message_bytes(Collective c, int nranks, uint64_t count, uint64_t type_size) {
  const bool per_peer = c == Collective::AllGather || c == Collective::ReduceScatter || c == Collective::AlltoAll;
  return count * type_size * (per_peer ? uint64_t(nranks) : 1);
}

const char* to_string(Collective c);
const char* to_string(BufferKind b);
const char* to_string(OpType t);
std::optional<Collective> collective_from_string(const std::string& s);
std::optional<OpType> op_type_from_string(const std::string& s);

// Which parts of an op are meaningful.  Sending and receiving are messages
// on the lane's connection to the peer (a Signal's carries no chunks);
// src and dst, as read and written here, are the rank's own chunks.
constexpr bool op_sends(OpType t) {
  return t == OpType::Send || t == OpType::RecvCopySend || t == OpType::RecvReduceSend ||
         t == OpType::RecvReduceCopySend || t == OpType::Signal;
}
constexpr bool op_receives(OpType t) {
  return t == OpType::Recv || t == OpType::RecvCopySend || t == OpType::RecvReduceSend ||
         t == OpType::RecvReduceCopy || t == OpType::RecvReduceCopySend || t == OpType::Wait;
}
// (GetReduceCopy reads src twice: its own, here, and its peer's: op_gets.)
constexpr bool op_reads_src(OpType t) {
  return t == OpType::Send || t == OpType::RecvReduceSend || t == OpType::RecvReduceCopy ||
         t == OpType::RecvReduceCopySend || t == OpType::Copy || t == OpType::Reduce || t == OpType::Put ||
         t == OpType::GetReduceCopy;
}
constexpr bool op_writes_dst(OpType t) {
  return t == OpType::Recv || t == OpType::RecvCopySend || t == OpType::RecvReduceCopy ||
         t == OpType::RecvReduceCopySend || t == OpType::Copy || t == OpType::Reduce || t == OpType::Get ||
         t == OpType::GetReduce || t == OpType::GetReduceCopy;
}
constexpr bool op_reduces(OpType t) {
  return t == OpType::RecvReduceSend || t == OpType::RecvReduceCopy || t == OpType::RecvReduceCopySend ||
         t == OpType::Reduce || t == OpType::GetReduce || t == OpType::GetReduceCopy;
}
// One-sided: Put writes send_peer's dst; Get, GetReduce and GetReduceCopy
// read recv_peer's src.
constexpr bool op_puts(OpType t) { return t == OpType::Put; }
constexpr bool op_gets(OpType t) {
  return t == OpType::Get || t == OpType::GetReduce || t == OpType::GetReduceCopy;
}
constexpr bool op_one_sided(OpType t) { return op_puts(t) || op_gets(t); }
// Whether an op's send_peer / recv_peer field names a rank.
constexpr bool op_uses_send_peer(OpType t) { return op_sends(t) || op_puts(t); }
constexpr bool op_uses_recv_peer(OpType t) { return op_receives(t) || op_gets(t); }
// Chunks in the message an op sends or receives (a signal's: none).
constexpr uint32_t message_chunks(const Op& op) {
  return op.type == OpType::Signal || op.type == OpType::Wait ? 0 : op.count;
}
// Whether some message of a schedule carries chunks (without, its messages
// are signals: executors need no fragments, and run a call as one tile).
inline bool has_chunk_messages(const Schedule& s) {
  for (const RankProgram& p : s.ranks)
    for (const Lane& lane : p.lanes)
      for (const Op& op : lane.ops)
        if ((op_sends(op.type) || op_receives(op.type)) && message_chunks(op) > 0) return true;
  return false;
}
// Whether a schedule has one-sided ops (only executors with peer access run it).
inline bool has_one_sided_ops(const Schedule& s) {
  for (const RankProgram& p : s.ranks)
    for (const Lane& lane : p.lanes)
      for (const Op& op : lane.ops)
        if (op_one_sided(op.type)) return true;
  return false;
}

}  // namespace braid

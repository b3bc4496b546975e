// A small helper for writing schedule generators: appends ops to a rank's
// lanes and returns their Dep handle, so generators read like the algorithm.
#pragma once

#include <string>
#include <utility>

#include "braid/schedule.h"

namespace braid {

inline ChunkRef in(uint32_t i) { return {BufferKind::Input, i}; }
inline ChunkRef out(uint32_t i) { return {BufferKind::Output, i}; }
inline ChunkRef scratch(uint32_t i) { return {BufferKind::Scratch, i}; }

// Non-negative modulo for ring arithmetic.
inline int mod(int a, int n) { return ((a % n) + n) % n; }

class ScheduleBuilder {
 public:
  // Every rank gets `input_chunks`/`output_chunks` chunks and one lane.
  ScheduleBuilder(std::string name, Collective c, int nranks, int root, uint32_t input_chunks,
                  uint32_t output_chunks) {
    s_.name = std::move(name);
    s_.collective = c;
    s_.nranks = nranks;
    s_.root = root;
    s_.ranks.resize(nranks);
    for (RankProgram& p : s_.ranks) {
      p.input_chunks = input_chunks;
      p.output_chunks = output_chunks;
      p.lanes.resize(1);
    }
  }

  void set_scratch(int rank, uint32_t chunks) { s_.ranks[rank].scratch_chunks = chunks; }

  Dep send(int rank, int to, ChunkRef src) { return add(rank, make_op(OpType::Send, to, -1, src, {})); }
  Dep recv(int rank, int from, ChunkRef dst) { return add(rank, make_op(OpType::Recv, -1, from, {}, dst)); }
  Dep recv_copy_send(int rank, int from, ChunkRef dst, int to) {
    return add(rank, make_op(OpType::RecvCopySend, to, from, {}, dst));
  }
  Dep recv_reduce_send(int rank, int from, ChunkRef src, int to) {
    return add(rank, make_op(OpType::RecvReduceSend, to, from, src, {}));
  }
  Dep recv_reduce_copy(int rank, int from, ChunkRef src, ChunkRef dst) {
    return add(rank, make_op(OpType::RecvReduceCopy, -1, from, src, dst));
  }
  Dep recv_reduce_copy_send(int rank, int from, ChunkRef src, ChunkRef dst, int to) {
    return add(rank, make_op(OpType::RecvReduceCopySend, to, from, src, dst));
  }
  Dep copy(int rank, ChunkRef src, ChunkRef dst) { return add(rank, make_op(OpType::Copy, -1, -1, src, dst)); }

  Schedule take() { return std::move(s_); }

 private:
  Dep add(int rank, Op op) {
    std::vector<Op>& ops = s_.ranks[rank].lanes[0].ops;
    ops.push_back(std::move(op));
    return Dep{0, uint32_t(ops.size() - 1)};
  }

  Schedule s_;
};

}  // namespace braid

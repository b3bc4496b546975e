// A small helper for writing schedule generators: appends ops to a rank's
// lanes and returns their Dep handle, so generators read like the algorithm.
#pragma once

#include <string>
#include <utility>
#include <vector>

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

  // Ops added for `rank` from now on go to its lane `lane` (created, with
  // any lanes before it, if it does not exist yet).
  void use_lane(int rank, uint16_t lane) {
    std::vector<Lane>& lanes = s_.ranks[rank].lanes;
    if (lanes.size() <= lane) lanes.resize(size_t(lane) + 1);
    current_lane_.resize(s_.ranks.size());
    current_lane_[size_t(rank)] = lane;
  }

  // `after`: ops of other lanes of `rank` this one waits for.
  Dep send(int rank, int to, ChunkRef src, std::vector<Dep> after = {}) {
    Op op = make_op(OpType::Send, to, -1, src, {});
    op.deps = std::move(after);
    return add(rank, std::move(op));
  }
  Dep recv(int rank, int from, ChunkRef dst, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::Recv, -1, from, {}, dst), std::move(after));
  }
  Dep recv_copy_send(int rank, int from, ChunkRef dst, int to, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::RecvCopySend, to, from, {}, dst), std::move(after));
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
  Dep copy(int rank, ChunkRef src, ChunkRef dst, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::Copy, -1, -1, src, dst), std::move(after));
  }
  Dep reduce(int rank, ChunkRef src, ChunkRef dst, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::Reduce, -1, -1, src, dst), std::move(after));
  }
  // One-sided (schedule.h): `src` of put and `dst` of get name this rank's
  // chunks; the other ref names the peer's.
  Dep put(int rank, int to, ChunkRef src, ChunkRef peer_dst, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::Put, to, -1, src, peer_dst), std::move(after));
  }
  Dep get(int rank, int from, ChunkRef peer_src, ChunkRef dst, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::Get, -1, from, peer_src, dst), std::move(after));
  }
  Dep get_reduce(int rank, int from, ChunkRef peer_src, ChunkRef dst, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::GetReduce, -1, from, peer_src, dst), std::move(after));
  }
  // dst = peer from's src (+) this rank's src (the same ref on both).
  Dep get_reduce_copy(int rank, int from, ChunkRef src, ChunkRef dst, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::GetReduceCopy, -1, from, src, dst), std::move(after));
  }
  Dep signal(int rank, int to, std::vector<Dep> after = {}) {
    return add(rank, make_op(OpType::Signal, to), std::move(after));
  }
  Dep wait(int rank, int from) { return add(rank, make_op(OpType::Wait, -1, from)); }

  Schedule take() { return std::move(s_); }

 private:
  Dep add(int rank, Op op, std::vector<Dep> after = {}) {
    if (!after.empty()) op.deps = std::move(after);
    const uint16_t lane = size_t(rank) < current_lane_.size() ? current_lane_[size_t(rank)] : 0;
    std::vector<Op>& ops = s_.ranks[rank].lanes[lane].ops;
    ops.push_back(std::move(op));
    return Dep{lane, uint32_t(ops.size() - 1)};
  }

  Schedule s_;
  std::vector<uint16_t> current_lane_;  // per rank; empty: every rank on lane 0
};

}  // namespace braid

// The op step both executors share (src/ops/op_step.h): where a step's
// bytes lie in a slice and tile, how many elements it moves, and which
// memory operation each op type does.  The executors' own tests run whole
// schedules through it (test_executor.cc, with slices); these pin the
// arithmetic down on its own.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "src/ops/op_step.h"

using namespace braid;

namespace {

// Marks, per element of a buffer, how many steps touched it.
struct Coverage {
  explicit Coverage(uint64_t elems) : hits(elems, 0) {}
  void add(const char* base, const StepSpan& s, uint32_t esize) {
    const uint64_t first = uint64_t(s.ptr - base) / esize;
    for (uint64_t i = 0; i < s.elems; ++i) ++hits.at(first + i);
  }
  std::vector<int> hits;
};

}  // namespace

TEST_CASE("op step: every element of a user buffer lies in exactly one (slice, chunk, tile)", "[op_step]") {
  const uint32_t esize = 4;
  for (uint64_t blocks : {1, 3})
    for (uint32_t chunks_per_block : {1, 2, 5})
      for (uint64_t block_elems : {0, 1, 7, 64, 1000})
        for (uint32_t slices : {1u, 2u, 3u, 8u})
          for (uint64_t tile_elems : {1, 3, 16}) {
            INFO("blocks " << blocks << " chunks/block " << chunks_per_block << " block " << block_elems << " slices "
                           << slices << " tile " << tile_elems);
            const BufferShape shape{blocks, block_elems, uint32_t(blocks * chunks_per_block)};
            std::vector<char> memory(shape.elems() * esize + esize);
            StepBuffers b;
            b.input = memory.data();
            b.input_shape = shape;
            b.output_shape = shape;
            b.tile_elems = tile_elems;
            b.esize = esize;
            Coverage cover(shape.elems());
            for (uint32_t s = 0; s < slices; ++s) {
              const uint64_t capacity = slice_capacity(b, s, slices);
              const uint64_t tiles = slice_tiles(capacity, tile_elems);
              for (uint32_t k = 0; k < shape.chunks; ++k)
                for (uint64_t t = 0; t < tiles; ++t) {
                  const StepSpan span = step_span(b, capacity, s, slices, uint8_t(BufferKind::Input), k, t);
                  CHECK(span.user);
                  CHECK(span.elems <= tile_elems);
                  cover.add(memory.data(), span, esize);
                }
            }
            for (int h : cover.hits) REQUIRE(h == 1);
          }
}

TEST_CASE("op step: one slice is the plain chunk split, scratch chunks follow each other per slice", "[op_step]") {
  const BufferShape shape{2, 10, 4};  // two blocks of 10, two chunks each: [0,5) [5,10) [10,15) [15,20)
  std::vector<char> in(20), scratch(64);
  StepBuffers b;
  b.input = in.data();
  b.scratch = scratch.data();
  b.input_shape = b.output_shape = shape;
  b.tile_elems = 100;
  b.esize = 1;
  b.scratch_stride = 3 * 5;  // three scratch chunks of capacity 5
  const uint64_t cap = slice_capacity(b, 0, 1);
  CHECK(cap == 5);
  for (uint32_t k = 0; k < 4; ++k) {
    const StepSpan s = step_span(b, cap, 0, 1, uint8_t(BufferKind::Input), k, 0);
    CHECK(s.ptr == in.data() + 5 * k);
    CHECK(s.elems == 5);
  }
  // Two slices: the first takes [0, 5) of each block, so its chunks are
  // [0,3) [3,5) [10,13) [13,15); scratch chunks of slice 1 start a stride in.
  const uint64_t cap0 = slice_capacity(b, 0, 2), cap1 = slice_capacity(b, 1, 2);
  CHECK(cap0 == 3);
  CHECK(cap1 == 3);
  CHECK(step_span(b, cap0, 0, 2, uint8_t(BufferKind::Input), 1, 0).ptr == in.data() + 3);
  CHECK(step_span(b, cap0, 0, 2, uint8_t(BufferKind::Input), 1, 0).elems == 2);
  CHECK(step_span(b, cap0, 0, 2, uint8_t(BufferKind::Input), 2, 0).ptr == in.data() + 10);
  const StepSpan sc = step_span(b, cap1, 1, 2, uint8_t(BufferKind::Scratch), 2, 0);
  CHECK(sc.ptr == scratch.data() + 15 + 2 * 3);
  CHECK(sc.elems == 3);
  CHECK_FALSE(sc.user);
  // A buffer the rank did not pass: a null span of the right length.
  StepBuffers none = b;
  none.input = nullptr;
  CHECK(step_span(none, cap, 0, 1, uint8_t(BufferKind::Input), 0, 0).ptr == nullptr);
}

TEST_CASE("op step: step lengths, and what a bad step reports", "[op_step]") {
  char a[8], c[8];
  const StepSpan user5{a, 5, true}, user4{c, 4, true}, scratch9{a, 9, false}, scratch3{c, 3, false};
  uint64_t n = 0;
  StepSpan ops[2] = {user5, scratch9};
  CHECK(step_length(ops, 2, false, 0, &n) == kStepOk);
  CHECK(n == 5);  // the user operand is exact
  StepSpan scratch_only[2] = {scratch9, scratch3};
  CHECK(step_length(scratch_only, 2, false, 0, &n) == kStepOk);
  CHECK(n == 3);  // scratch alone: the shortest
  CHECK(step_length(scratch_only, 2, true, 2, &n) == kStepOk);
  CHECK(n == 2);  // a received fragment shorter than scratch
  StepSpan received[1] = {user5};
  CHECK(step_length(received, 1, true, 9, &n) == kStepOk);
  CHECK(n == 5);  // a fragment from scratch may be longer than the chunk
  CHECK(step_length(received, 1, true, 4, &n) == kStepShortFragment);
  StepSpan disagree[2] = {user5, user4};
  CHECK(step_length(disagree, 2, false, 0, &n) == kStepLengthsDisagree);
  StepSpan null_buffer[1] = {StepSpan{nullptr, 3, true}};
  CHECK(step_length(null_buffer, 1, false, 0, &n) == kStepNullBuffer);
  StepSpan empty[1] = {StepSpan{nullptr, 0, true}};
  CHECK(step_length(empty, 1, false, 0, &n) == kStepOk);
  CHECK(n == 0);
}

TEST_CASE("op step: every op type does its one memory operation", "[op_step]") {
  // A policy that records what it was asked to do.
  struct Recorder {
    std::string log;
    uint32_t esize() const { return 2; }
    void copy(const StepSpan* dst, char* slot, const char*, uint64_t bytes) {
      log = std::string("copy") + (dst ? " dst" : "") + (slot ? " slot" : "") + " " + std::to_string(bytes);
    }
    void reduce(const StepSpan* dst, char* slot, const char*, const StepSpan&, uint64_t n) {
      log = std::string("reduce") + (dst ? " dst" : "") + (slot ? " slot" : "") + " " + std::to_string(n);
    }
    void local_copy(const StepSpan&, const StepSpan&, uint64_t bytes) { log = "local_copy " + std::to_string(bytes); }
    void local_reduce(const StepSpan&, const StepSpan&, uint64_t n) { log = "local_reduce " + std::to_string(n); }
  };
  char in[4], slot[4], buf[4];
  const StepSpan src{buf, 3, true}, dst{buf, 3, true};
  const std::pair<OpType, const char*> want[] = {
      {OpType::Send, "copy slot 6"},
      {OpType::Recv, "copy dst 6"},
      {OpType::RecvCopySend, "copy dst slot 6"},
      {OpType::RecvReduceSend, "reduce slot 3"},
      {OpType::RecvReduceCopy, "reduce dst 3"},
      {OpType::RecvReduceCopySend, "reduce dst slot 3"},
      {OpType::Copy, "local_copy 6"},
      {OpType::Reduce, "local_reduce 3"},
      {OpType::Nop, ""},
  };
  for (const auto& [type, expected] : want) {
    Recorder m;
    const bool sends = op_sends(type), receives = op_receives(type);
    op_step(type, m, src, dst, receives ? in : nullptr, sends ? slot : nullptr, 3);
    INFO(to_string(type));
    CHECK(m.log == expected);
  }
}

TEST_CASE("op step: a dependency is met once the lane has done that op in this tile", "[op_step]") {
  // A lane of 4 ops: op 2 of tile 0 is its 3rd completion, of tile 3 its 15th.
  CHECK(dep_completions(0, 4, 2) == 3);
  CHECK(dep_completions(3, 4, 2) == 15);
  CHECK(dep_completions(1, 1, 0) == 2);
}

TEST_CASE("op step: a run of GetReduces into one chunk folds as one, in the ops' order", "[op_step]") {
  // Two-shot-like lane on 4 ranks: block 1 of every input (one chunk per
  // block) into output chunk 1; each peer's input is its own vector.
  const BufferShape shape{4, 8, 4};
  std::vector<char> in(32), out(32), peer_in[4] = {std::vector<char>(32), std::vector<char>(32),
                                                   std::vector<char>(32), std::vector<char>(32)};
  StepBuffers mine;
  mine.input = in.data();
  mine.output = out.data();
  mine.input_shape = mine.output_shape = shape;
  mine.tile_elems = 100;
  const uint64_t cap = slice_capacity(mine, 0, 1);
  auto get = [](OpType t, int peer, uint32_t dst_index = 1) {
    OpRecord r;
    r.type = uint8_t(t);
    r.src_buffer = uint8_t(BufferKind::Input);
    r.dst_buffer = uint8_t(BufferKind::Output);
    r.src_index = 1;
    r.dst_index = dst_index;
    r.peer = peer;
    return r;
  };
  std::vector<OpRecord> ops = {get(OpType::GetReduceCopy, 2), get(OpType::GetReduce, 3), get(OpType::GetReduce, 0),
                               get(OpType::Put, 2)};
  auto op_at = [&](uint32_t j) { return ops[j]; };
  std::vector<int> refused;  // peers whose op may not join (a dependency not met)
  auto reach = [&](uint32_t, const OpRecord& op, StepBuffers* theirs) {
    if (std::find(refused.begin(), refused.end(), op.peer) != refused.end()) return false;
    *theirs = mine;
    theirs->input = peer_in[op.peer].data();
    return true;
  };
  FoldRun<8> run;
  plan_fold_run(0, uint32_t(ops.size()), op_at, reach, mine, cap, 0, 1, 0, &run);
  CHECK(run.ops == 3);  // the Put ends it
  REQUIRE(run.nsrc == 4);
  CHECK(run.dst == out.data() + 8);
  CHECK(run.n == 8);
  // The GetReduceCopy's peer first, then this rank's own, then the others in order.
  CHECK(run.srcs[0] == peer_in[2].data() + 8);
  CHECK(run.srcs[1] == in.data() + 8);
  CHECK(run.srcs[2] == peer_in[3].data() + 8);
  CHECK(run.srcs[3] == peer_in[0].data() + 8);
  // Started by a GetReduce: the chunk itself is the first source.
  plan_fold_run(1, uint32_t(ops.size()), op_at, reach, mine, cap, 0, 1, 0, &run);
  CHECK(run.ops == 2);
  REQUIRE(run.nsrc == 3);
  CHECK(run.srcs[0] == out.data() + 8);
  CHECK(run.srcs[1] == peer_in[3].data() + 8);
  // An op that may not join, another destination, or more than a chunk end the run.
  refused = {3};
  plan_fold_run(0, uint32_t(ops.size()), op_at, reach, mine, cap, 0, 1, 0, &run);
  CHECK(run.ops == 1);
  refused.clear();
  ops[1].dst_index = 2;
  plan_fold_run(0, uint32_t(ops.size()), op_at, reach, mine, cap, 0, 1, 0, &run);
  CHECK(run.ops == 1);
  ops[1].dst_index = 1;
  ops[2].count = 2;
  plan_fold_run(0, uint32_t(ops.size()), op_at, reach, mine, cap, 0, 1, 0, &run);
  CHECK(run.ops == 2);
  // No more sources than the run holds.
  ops[2].count = 1;
  FoldRun<3> small;
  plan_fold_run(0, uint32_t(ops.size()), op_at, reach, mine, cap, 0, 1, 0, &small);
  CHECK(small.ops == 1);
  CHECK(small.nsrc == 2);
}

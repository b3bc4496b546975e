// The CUDA kernels' fold (src/ops/vector_fold.h), run here with its
// workers as a loop: every worker's share, in any order, must give the
// left-to-right chain of pairwise reductions bit for bit, for every
// datatype and op, 1 to 9 sources, lengths around the unrolled pass's
// edges, 16-byte aligned and element-aligned buffers, a second destination,
// and in place (the destination one of the sources).  The same template is
// what a thread block runs, so only the hardware is left to the GPU checks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "src/ops/datatype.h"
#include "src/ops/vector_fold.h"
#include "reduce_mismatches.h"

using namespace braid;

namespace {

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,     ncclUint64,
                                 ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Max, ReduceKind::Min};

// dst = ((s0 (op) s1) (op) s2) ..., one element at a time.
void chain(char* dst, const std::vector<const char*>& srcs, size_t n, ncclDataType_t type, ReduceKind kind) {
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    with_reduce_kind(kind, [&](auto k) {
      for (size_t i = 0; i < n; ++i) {
        S acc, x;
        std::memcpy(&acc, srcs[0] + i * sizeof(S), sizeof(S));
        for (size_t s = 1; s < srcs.size(); ++s) {
          std::memcpy(&x, srcs[s] + i * sizeof(S), sizeof(S));
          acc = reduce_elem<decltype(k)::value, S>(acc, x);
        }
        std::memcpy(dst + i * sizeof(S), &acc, sizeof(S));
      }
    });
  });
}

// Buffers of `bytes` at `offset` past a 64-byte boundary, filled with
// random bits.
struct Buffer {
  std::vector<char> storage;
  char* at;
  Buffer(size_t bytes, size_t offset, std::mt19937& rng) : storage(bytes + 64 + offset) {
    at = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 + offset;
    for (size_t i = 0; i < bytes; ++i) at[i] = char(rng());
  }
};

// The fold of the call's type and reduction, as the kernels dispatch it
// (false: a type braid does not reduce).
bool fold(ncclDataType_t type, ReduceKind kind, char* dst, char* dst2, const char* const* srcs, int nsrc,
          uint64_t n, uint64_t w, uint64_t workers) {
  return with_storage_type(type, [&](auto storage) {
    with_reduce_kind(kind, [&](auto k) {
      fold_sources<decltype(k)::value, decltype(storage)>(dst, dst2, srcs, nsrc, n, w, workers);
    });
  });
}

// Every worker's share, the last worker first: each must touch only its own
// elements (a worker that wrote another's before that one read it would
// show in place).
void run_workers(ncclDataType_t type, ReduceKind kind, char* dst, char* dst2, const std::vector<const char*>& srcs,
                 size_t n, uint64_t workers) {
  bool ok = true;
  for (uint64_t w = workers; w-- > 0;)
    ok &= fold(type, kind, dst, dst2, srcs.data(), int(srcs.size()), n, w, workers);
  REQUIRE(ok);
}

}  // namespace

TEST_CASE("the kernels' fold is the chain of pairwise reductions, bit for bit", "[fold]") {
  std::mt19937 rng(7);
  for (ncclDataType_t type : kTypes)
    for (ReduceKind kind : kKinds)
      for (int nsrc : {1, 2, 3, 8, 9})
        // Around the unrolled pass's edge (4 vectors of 64 workers: 1024
        // 4-byte elements), with tails of single vectors and of elements.
        for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(1023), size_t(1057), size_t(5000)})
          for (size_t offset : {size_t(0), datatype_size(type)}) {
            CAPTURE(type, int(kind), nsrc, n, offset);
            const size_t bytes = n * datatype_size(type);
            std::vector<Buffer> srcs;
            for (int s = 0; s < nsrc; ++s) srcs.emplace_back(bytes, offset, rng);
            std::vector<const char*> ptrs;
            for (const Buffer& b : srcs) ptrs.push_back(b.at);
            Buffer want(bytes, 0, rng), dst(bytes, offset, rng), dst2(bytes, offset, rng);
            chain(want.at, ptrs, n, type, kind);
            run_workers(type, kind, dst.at, dst2.at, ptrs, n, 64);
            CHECK(mismatches(want.at, dst.at, n, type) == 0);
            CHECK(mismatches(want.at, dst2.at, n, type) == 0);
            // In place: the destination is the first source (a GetReduce's).
            std::vector<char> first(srcs[0].at, srcs[0].at + bytes);
            run_workers(type, kind, srcs[0].at, nullptr, ptrs, n, 64);
            CHECK(mismatches(want.at, srcs[0].at, n, type) == 0);
            std::copy(first.begin(), first.end(), srcs[0].at);
            // One worker, as many as vectors, and more: every split covers all.
            for (uint64_t workers : {uint64_t(1), uint64_t(3), uint64_t(1000)}) {
              std::memset(dst.at, 0, bytes);
              run_workers(type, kind, dst.at, nullptr, ptrs, n, workers);
              CHECK(mismatches(want.at, dst.at, n, type) == 0);
            }
          }
}

TEST_CASE("the kernels' fold refuses a type it cannot reduce", "[fold]") {
  char dst[16] = {}, src[16] = {};
  const char* srcs[1] = {src};
  CHECK_FALSE(fold(ncclNumTypes, ReduceKind::Sum, dst, nullptr, srcs, 1, 1, 0, 1));
}

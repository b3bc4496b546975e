// The host data path's fast loops (src/ops/host_kernels.cc) against the element
// semantics the CUDA kernels share (src/ops/reduce_ops.h): bit for bit, on
// random bit patterns (NaN, infinities, subnormals included), every
// datatype and op, odd lengths and misaligned buffers; and the fused forms
// (reduce_to, and copy_to streaming or not) against plain reduce / memcpy.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/ops/datatype.h"
#include "src/ops/host_kernels.h"
#include "src/ops/reduce_ops.h"
#include "reduce_mismatches.h"

using namespace braid;

namespace {

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,     ncclUint64,
                                 ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin};

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// reduce_elem applied one element at a time: the reference.
void reference(void* dst, const void* a, const void* b, size_t n, ncclDataType_t type, ncclRedOp_t op) {
  ReduceKind kind = ReduceKind::Sum;  // set by reduce_kind_of (GCC cannot see REQUIRE throw)
  REQUIRE(reduce_kind_of(op, &kind));
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    with_reduce_kind(kind, [&](auto k) {
      for (size_t i = 0; i < n; ++i) {
        S x, y;
        std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(S), sizeof(S));
        std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(S), sizeof(S));
        S r = reduce_elem<decltype(k)::value, S>(x, y);
        std::memcpy(static_cast<char*>(dst) + i * sizeof(S), &r, sizeof(S));
      }
    });
  });
}

}  // namespace

// ctest runs the [datatype] tests twice: as the CPU allows, and with
// BRAID_REDUCE_ISA=baseline (tests/CMakeLists.txt); this says which ran.
TEST_CASE("reductions run on the vector code the CPU and BRAID_REDUCE_ISA allow", "[datatype][host]") {
  const char* asked = std::getenv("BRAID_REDUCE_ISA");
  const bool baseline = asked && std::string(asked) == "baseline";
#if defined(__x86_64__)
  const bool avx2 = __builtin_cpu_supports("avx2");
#else
  const bool avx2 = false;
#endif
  CHECK(std::string(reduce_isa()) == (avx2 && !baseline ? "avx2" : "baseline"));
}

TEST_CASE("host reduce loops are bit-identical to reduce_elem on random bits", "[datatype][host]") {
  for (ncclDataType_t type : kTypes)
    for (ncclRedOp_t op : kOps)
      for (size_t n : {size_t(1), size_t(7), size_t(64), size_t(1000), size_t(4099)}) {
        const size_t es = datatype_size(type);
        auto a = random_bytes(n * es + 8, uint32_t(n * 31 + type * 7 + op));
        auto b = random_bytes(n * es + 8, uint32_t(n * 17 + type * 3 + op + 1));
        std::vector<unsigned char> want(n * es + 8), got(n * es + 8);
        // Offsets by one element: loops must not assume alignment.
        reference(want.data() + es, a.data() + es, b.data() + es, n, type, op);
        reduce(got.data() + es, a.data() + es, b.data() + es, n, type, op);
        INFO(datatype_name(type) << " " << redop_name(op) << " n=" << n);
        REQUIRE(mismatches(want.data() + es, got.data() + es, n, type) == 0);
      }
}

TEST_CASE("host fp8 reductions are bit-identical to reduce_elem on every pair of values", "[datatype][host]") {
  // All 256 x 256 operand pairs, so every rounding case the formats have
  // (ties, subnormal results, saturation, NaN) is met; an odd length and an
  // offset leave a tail for the scalar code and misalign the vector loads.
  const size_t n = 256 * 256 + 5;
  std::vector<unsigned char> a(n + 1), b(n + 1), want(n + 1), got(n + 1);
  for (size_t i = 0; i < n; ++i) {
    a[i + 1] = static_cast<unsigned char>(i);
    b[i + 1] = static_cast<unsigned char>(i >> 8);
  }
  for (ncclDataType_t type : {ncclFloat8e4m3, ncclFloat8e5m2})
    for (ncclRedOp_t op : kOps) {
      reference(want.data() + 1, a.data() + 1, b.data() + 1, n, type, op);
      reduce(got.data() + 1, a.data() + 1, b.data() + 1, n, type, op);
      INFO(datatype_name(type) << " " << redop_name(op));
      REQUIRE(mismatches(want.data() + 1, got.data() + 1, n, type) == 0);
    }
}

TEST_CASE("reduce_to and copy_to (either destination streamed or not) equal reduce and memcpy", "[datatype][host]") {
  for (ncclDataType_t type : {ncclFloat32, ncclFloat16, ncclInt8, ncclFloat64})
    for (bool stream : {false, true})
      for (bool stream2 : {false, true})
        for (size_t n : {size_t(1), size_t(33), size_t(5000), size_t(70001)}) {
          const size_t es = datatype_size(type), bytes = n * es;
          auto a = random_bytes(bytes + 64, uint32_t(n + type));
          auto b = random_bytes(bytes + 64, uint32_t(n * 3 + type));
          std::vector<unsigned char> want(bytes), dst(bytes + 64, 0), dst2(bytes + 64, 0);
          reduce(want.data(), a.data() + 3 * es, b.data() + es, n, type, ncclSum);
          reduce_to(dst.data() + 5 * es, dst2.data() + es, a.data() + 3 * es, b.data() + es, n, type, ncclSum,
                    stream2);
          INFO(datatype_name(type) << " stream=" << stream << " stream2=" << stream2 << " n=" << n);
          REQUIRE(std::memcmp(want.data(), dst.data() + 5 * es, bytes) == 0);
          REQUIRE(std::memcmp(want.data(), dst2.data() + es, bytes) == 0);
          // In place (dst aliases an input), no second copy.
          std::vector<unsigned char> inplace(a.begin() + 3 * es, a.begin() + 3 * es + bytes);
          reduce_to(inplace.data(), nullptr, inplace.data(), b.data() + es, n, type, ncclSum, stream2);
          REQUIRE(std::memcmp(want.data(), inplace.data(), bytes) == 0);

          std::fill(dst.begin(), dst.end(), 0);
          std::fill(dst2.begin(), dst2.end(), 0);
          copy_to(dst.data() + 7, dst2.data() + 1, a.data() + 2, bytes, stream, stream2);
          REQUIRE(std::memcmp(a.data() + 2, dst.data() + 7, bytes) == 0);
          REQUIRE(std::memcmp(a.data() + 2, dst2.data() + 1, bytes) == 0);
          REQUIRE(dst[6] == 0);
          REQUIRE(dst[7 + bytes] == 0);
          REQUIRE(dst2[0] == 0);
          REQUIRE(dst2[1 + bytes] == 0);
        }
}

TEST_CASE("reduce_many folds every source in order into every destination, in place too", "[datatype][host]") {
  for (ncclDataType_t type : kTypes)
    for (ncclRedOp_t op : kOps)
      for (int nsrc : {2, 3, 5})
        for (size_t n : {size_t(1), size_t(7), size_t(5003)}) {
          const size_t es = datatype_size(type), bytes = n * es;
          std::vector<std::vector<unsigned char>> in;
          for (int s = 0; s < nsrc; ++s) in.push_back(random_bytes(bytes + es, uint32_t(n * 13 + type * 5 + op + s)));
          // Reference: ((s0 op s1) op s2) ..., then / nsrc for the Avg form.
          std::vector<unsigned char> want(bytes), want_avg(bytes);
          reference(want.data(), in[0].data() + es, in[1].data() + es, n, type, op);
          for (int s = 2; s < nsrc; ++s) reference(want.data(), want.data(), in[s].data() + es, n, type, op);
          with_storage_type(type, [&](auto storage) {
            using S = decltype(storage);
            for (size_t i = 0; i < n; ++i) {
              S v;
              std::memcpy(&v, want.data() + i * es, es);
              v = divide_elem(v, nsrc);
              std::memcpy(want_avg.data() + i * es, &v, es);
            }
          });
          std::vector<const void*> srcs;
          for (auto& v : in) srcs.push_back(v.data() + es);  // misaligned by one element
          for (bool stream : {false, true})
            for (int divisor : {0, nsrc}) {
              INFO(datatype_name(type) << " " << redop_name(op) << " nsrc=" << nsrc << " n=" << n
                                       << " stream=" << stream << " divisor=" << divisor);
              const auto& expect = divisor ? want_avg : want;
              std::vector<unsigned char> d0(bytes + 64, 0), d1(bytes + 64, 0);
              void* dsts[2] = {d0.data() + 16, d1.data() + es};
              reduce_many(dsts, 2, srcs.data(), nsrc, n, type, op, divisor, stream);
              store_fence();
              REQUIRE(mismatches(expect.data(), d0.data() + 16, n, type) == 0);
              REQUIRE(mismatches(expect.data(), d1.data() + es, n, type) == 0);
              REQUIRE(d0[15] == 0);
              REQUIRE(d0[16 + bytes] == 0);
              // In place: the output is the last source.
              std::vector<unsigned char> last(in.back());
              std::vector<const void*> aliased(srcs);
              aliased.back() = last.data() + es;
              void* self[1] = {last.data() + es};
              reduce_many(self, 1, aliased.data(), nsrc, n, type, op, divisor, stream);
              store_fence();
              REQUIRE(mismatches(expect.data(), last.data() + es, n, type) == 0);
            }
        }
}

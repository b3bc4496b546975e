// MoE's host weighted sum (src/ops/weighted_sum.h) against the element
// conversions the CUDA kernels share (src/ops/row_elements.h), one element
// at a time: bit for bit (NaN vs NaN aside), on random bit patterns (NaN,
// infinities, subnormals included), every row type, odd lengths and
// misaligned rows.  Tagged [datatype]: ctest runs it on the vector code the
// CPU allows and again on the baseline loops (BRAID_REDUCE_ISA=baseline).
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "src/ops/row_elements.h"
#include "src/ops/weighted_sum.h"

using namespace braid;

namespace {

const ncclDataType_t kRowTypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

size_t bytes_of(ncclDataType_t t) { return t == ncclFloat32 ? 4 : t == ncclFloat16 || t == ncclBfloat16 ? 2 : 1; }

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

}  // namespace

TEST_CASE("the host weighted sum adds and stores rows as the shared element code does", "[datatype][moe]") {
  std::mt19937 rng(7);
  for (ncclDataType_t type : kRowTypes) {
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(33), size_t(7168 + 5)}) {
      for (size_t misalign : {size_t(0), size_t(1)}) {
        CAPTURE(type, n, misalign);
        const size_t eb = bytes_of(type);
        std::vector<unsigned char> storage((n + 1) * eb);
        for (auto& b : storage) b = static_cast<unsigned char>(rng());
        const void* row = storage.data() + misalign * eb;
        std::vector<float> acc(n), want(n);
        std::uniform_real_distribution<float> value(-4.0f, 4.0f);
        for (size_t i = 0; i < n; ++i) acc[i] = want[i] = value(rng);
        const float w = value(rng);
        add_scaled_row(acc.data(), row, w, n, type);
        with_element_type(type, [&]<ncclDataType_t T>() {
          for (size_t i = 0; i < n; ++i) want[i] += w * element<T>(row, int64_t(i));
        });
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) bad += !same_float(acc[i], want[i]);
        CHECK(bad == 0);

        // Stores: the sums, plus values past the types' ranges and NaN.
        acc[0] = 1e30f;
        if (n > 2) acc[2] = -std::numeric_limits<float>::infinity();
        if (n > 3) acc[3] = std::numeric_limits<float>::quiet_NaN();
        std::vector<unsigned char> got((n + 1) * eb), expect(n * eb);
        store_row(got.data() + misalign * eb, acc.data(), n, type);
        with_element_type(type, [&]<ncclDataType_t T>() {
          for (size_t i = 0; i < n; ++i) set_element<T>(expect.data(), int64_t(i), acc[i]);
        });
        CHECK(std::memcmp(got.data() + misalign * eb, expect.data(), n * eb) == 0);
      }
    }
  }
}

// Combine's weighted sum as the CUDA kernel computes it, 16 bytes of a row
// at a time (src/moe/cuda/chunked_weighted_sum.h), against a plain
// reference: every element the k-ordered sum of rounded products, for every
// row type, top_k up to past two load batches, and results missing (null
// rows).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "src/moe/cuda/chunked_weighted_sum.h"

using namespace braid;
using namespace braid::moe;

namespace {

constexpr int64_t kHidden = 96;  // rows are kHidden / (elements a chunk) + 1 chunks: 7 to 25

// A row of random elements in [-4, 4], as type T rounds them.
template <ncclDataType_t T>
std::vector<Chunk<T>> random_row(std::mt19937& rng, int64_t chunks) {
  std::vector<Chunk<T>> row(static_cast<size_t>(chunks));
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  for (int64_t x = 0; x < chunks * Chunk<T>::kElements; ++x) set_element<T>(row.data(), x, value(rng));
  return row;
}

template <ncclDataType_t T>
void check_type(int32_t K) {
  std::mt19937 rng(uint32_t(K * 131 + int(T)));
  const int64_t chunks = kHidden / Chunk<T>::kElements + 1;
  std::vector<std::vector<Chunk<T>>> results;
  std::vector<const char*> rows;
  std::vector<float> weights;
  std::uniform_real_distribution<float> weight(0.0f, 1.0f);
  for (int32_t k = 0; k < K; ++k) {
    results.push_back(random_row<T>(rng, chunks));
    // Every third result missing (a dropped or masked choice).
    rows.push_back(k % 3 == 1 ? nullptr : reinterpret_cast<const char*>(results.back().data()));
    weights.push_back(weight(rng));
  }
  std::vector<Chunk<T>> chunked(static_cast<size_t>(chunks)), by_element(static_cast<size_t>(chunks));
  char* out = reinterpret_cast<char*>(chunked.data());
  for (int64_t c = 0; c < chunks; ++c) weighted_sum_chunk<T>(rows.data(), weights.data(), K, c * 16, out);
  for (int64_t x = 0; x < chunks * Chunk<T>::kElements; ++x)
    weighted_sum_element<T>(rows.data(), weights.data(), K, x, reinterpret_cast<char*>(by_element.data()));

  for (int64_t x = 0; x < chunks * Chunk<T>::kElements; ++x) {
    float acc = 0.0f;
    for (int32_t k = 0; k < K; ++k) {
      if (!rows[size_t(k)]) continue;
      const float product = weights[size_t(k)] * element<T>(rows[size_t(k)], x);
      acc = acc + product;
    }
    std::vector<Chunk<T>> expected(1);
    set_element<T>(expected.data(), 0, acc);
    const size_t bytes = 16 / size_t(Chunk<T>::kElements);
    INFO("type " << int(T) << " top_k " << K << " element " << x);
    REQUIRE(std::memcmp(out + x * int64_t(bytes), expected.data(), bytes) == 0);
    REQUIRE(std::memcmp(reinterpret_cast<char*>(by_element.data()) + x * int64_t(bytes), expected.data(), bytes) ==
            0);
  }
}

}  // namespace

TEST_CASE("moe weighted sum by 16-byte chunks: each element the k-ordered sum, every row type", "[moe]") {
  for (int32_t K : {1, 2, 7, 8, 9, 16, 19}) {
    check_type<ncclFloat32>(K);
    check_type<ncclFloat16>(K);
    check_type<ncclBfloat16>(K);
    check_type<ncclFloat8e4m3>(K);
    check_type<ncclFloat8e5m2>(K);
  }
}

TEST_CASE("moe weighted sum: a token whose results are all missing sums to zero", "[moe]") {
  const char* rows[3] = {nullptr, nullptr, nullptr};
  const float weights[3] = {1.0f, 2.0f, 3.0f};
  Chunk<ncclBfloat16> out;
  std::memset(&out, 0xff, sizeof out);
  weighted_sum_chunk<ncclBfloat16>(rows, weights, 3, 0, reinterpret_cast<char*>(&out));
  Chunk<ncclBfloat16> zero{};
  REQUIRE(std::memcmp(&out, &zero, sizeof out) == 0);
}

// Datatypes as the perf tools see them (names, sizes, encodings) and the
// exact test data.  Written against nccl.h only: the tools must run
// unchanged on NVIDIA's NCCL.
//
// Inputs are small integers (raw bit patterns for pure copies) derived from
// (rank, index, seed) and chosen per datatype, op and rank count so that
// every partial result of a reduction is exactly representable in the
// datatype: the result is then independent of the reduction order and is
// compared bitwise.  Every rank contributes to every element where the
// type's exact range allows it, so a lost, doubled or misplaced contribution
// changes the result:
//   sum, avg (integers), mulsum: 1..K per rank, K = budget / nranks
//                      (owner-only patterns when the budget is below nranks);
//   prod:  1 or 2 per rank, at most log2(budget) twos per element;
//   max:   one owner per element holds 5..8, the others 0..4;
//   min:   one owner per element holds 0..3, the others 4..8;
//   avg (floating types): base +/- 1 with a zero sum of deviations, so the
//          mean is the integer `base` (2 ulp accepted, as nccl-tests does, except fp8);
//   copies (no reduction): finite pseudo-random bit patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace perf {

// nccl-tests' stand-in for an ncclRedOpCreatePreMulSum op ("mulsum").
constexpr ncclRedOp_t kMulSum = ncclNumOps;
// Data for collectives that only move bytes.
constexpr int kCopy = -1;

size_t type_size(ncclDataType_t t);
const char* type_name(ncclDataType_t t);
const char* op_name(int op);
bool is_floating(ncclDataType_t t);
// nccl-tests names ("float", "bfloat16", "f8e4m3", ... or "all").
bool parse_types(const std::string& arg, bool mpi_only, std::vector<ncclDataType_t>* out);
// "sum", "prod", "max", "min", "avg", "mulsum" or "all" (all six).
bool parse_ops(const std::string& arg, std::vector<ncclRedOp_t>* out);

// The bits of `value` in type `t` (round to nearest even for floats).
uint64_t encode(ncclDataType_t t, double value);
uint64_t load(ncclDataType_t t, const void* buffer, size_t index);
void store(ncclDataType_t t, void* buffer, size_t index, uint64_t bits);

// The data of one checked run.
class Data {
 public:
  Data(ncclDataType_t type, int op, int nranks, uint64_t seed);

  ncclDataType_t type() const { return type_; }
  // What rank `rank` holds at element `index` of its send buffer.
  uint64_t input(int rank, size_t index) const;
  // The reduction of input(*, index) over all ranks.
  uint64_t reduced(size_t index) const;
  // mulsum: the scalar rank `rank` premultiplies with (1 or 2), as bits.
  uint64_t scalar_bits(int rank) const { return encode(type_, scalar(rank)); }
  // Whether `got` is acceptable where `want` is expected.
  bool matches(uint64_t got, uint64_t want) const;
  // Writes input(rank, first + k) to buffer[k] for k < n.
  void fill(void* buffer, int rank, size_t first, size_t n) const;

 private:
  double value(int rank, size_t index) const;
  double scalar(int rank) const { return 1 + rank % 2; }

  ncclDataType_t type_;
  int op_;
  int nranks_;
  uint64_t seed_;
  uint64_t budget_;  // all integers 0..budget_ are exact in the type
  int pow2_;         // 2^pow2_ is exact in the type
};

}  // namespace perf

// Datatypes as the perf tools see them: names, sizes, and exact test values.
//
// Inputs are small integers chosen so that every reduction is exact in every
// type and independent of reduction order, yet any lost, doubled or
// misplaced contribution changes the result:
//   sum, max: one rank per element (rank (n - i mod n) mod n) holds 1 + i%4,
//             the others 0; prod: that rank holds 2, the others 1;
//   min:      that rank holds 0, the others 1 + i%4;
//   avg:      every rank holds w = 1 + i%4 (1 for fp8), so the mean is w;
//   copies:   a pattern of rank and index, within the type's exact range.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nccl.h"

namespace perf {

size_t type_size(ncclDataType_t t);
const char* type_name(ncclDataType_t t);
const char* op_name(ncclRedOp_t op);
bool parse_types(const std::string& arg, bool mpi_only, std::vector<ncclDataType_t>* out);
bool parse_ops(const std::string& arg, std::vector<ncclRedOp_t>* out);

double input_value(ncclDataType_t t, ncclRedOp_t op, int rank, int nranks, size_t index);
void store(ncclDataType_t t, void* buffer, size_t index, double value);
// Bitwise comparison of element `index` with `value` encoded in the type.
bool equal_stored(ncclDataType_t t, const void* buffer, size_t index, double value);

}  // namespace perf

#include "perf/values.h"

#include <cstdint>
#include <cstring>

#include "src/core/float_formats.h"

namespace perf {
namespace {

struct TypeInfo {
  ncclDataType_t type;
  const char* name;
  size_t size;
  bool mpi;        // OpenMPI has a matching datatype
  double exact;    // integers below this are exact
};
constexpr TypeInfo kTypes[] = {
    {ncclInt8, "int8", 1, true, 128},           {ncclUint8, "uint8", 1, true, 256},
    {ncclInt32, "int32", 4, true, 1 << 30},     {ncclUint32, "uint32", 4, true, 1 << 30},
    {ncclInt64, "int64", 8, true, 1 << 30},     {ncclUint64, "uint64", 8, true, 1 << 30},
    {ncclFloat16, "half", 2, false, 2048},      {ncclFloat32, "float", 4, true, 1 << 24},
    {ncclFloat64, "double", 8, true, 1 << 30},  {ncclBfloat16, "bfloat16", 2, false, 256},
    {ncclFloat8e4m3, "f8e4m3", 1, false, 16},   {ncclFloat8e5m2, "f8e5m2", 1, false, 8},
};

const TypeInfo& info(ncclDataType_t t) {
  for (const TypeInfo& i : kTypes)
    if (i.type == t) return i;
  return kTypes[7];
}

bool is_fp8(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

uint64_t encode(ncclDataType_t t, double v) {
  switch (t) {
    case ncclInt8: return uint8_t(int8_t(v));
    case ncclUint8: return uint8_t(v);
    case ncclInt32: return uint32_t(int32_t(v));
    case ncclUint32: return uint32_t(v);
    case ncclInt64: return uint64_t(int64_t(v));
    case ncclUint64: return uint64_t(v);
    case ncclFloat16: return braid::float_to_half(float(v));
    case ncclFloat32: { float f = float(v); uint32_t u; std::memcpy(&u, &f, 4); return u; }
    case ncclFloat64: { uint64_t u; std::memcpy(&u, &v, 8); return u; }
    case ncclBfloat16: return braid::float_to_bf16(float(v));
    case ncclFloat8e4m3: return braid::float_to_e4m3(float(v));
    case ncclFloat8e5m2: return braid::float_to_e5m2(float(v));
    default: return 0;
  }
}

}  // namespace

size_t type_size(ncclDataType_t t) { return info(t).size; }
const char* type_name(ncclDataType_t t) { return info(t).name; }

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "?";
  }
}

bool parse_types(const std::string& arg, bool mpi_only, std::vector<ncclDataType_t>* out) {
  out->clear();
  for (const TypeInfo& i : kTypes) {
    if (mpi_only && !i.mpi) continue;
    if (arg == "all" || arg == i.name) out->push_back(i.type);
  }
  // nccl-tests' aliases
  if (out->empty() && (arg == "fp16" || arg == "float16")) out->push_back(ncclFloat16);
  if (out->empty() && (arg == "fp32" || arg == "float32")) out->push_back(ncclFloat32);
  if (out->empty() && (arg == "bf16")) out->push_back(ncclBfloat16);
  if (mpi_only && !out->empty() && !info(out->front()).mpi) out->clear();
  return !out->empty();
}

bool parse_ops(const std::string& arg, std::vector<ncclRedOp_t>* out) {
  out->clear();
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg})
    if (arg == "all" || arg == op_name(op)) out->push_back(op);
  return !out->empty();
}

double input_value(ncclDataType_t t, ncclRedOp_t op, int rank, int nranks, size_t index) {
  const bool owner = (index + size_t(rank)) % size_t(nranks) == 0;  // one rank per element
  const double w = double(1 + index % 4);
  switch (op) {
    case ncclSum: case ncclMax: return owner ? w : 0;
    case ncclProd: return owner ? 2 : 1;
    case ncclMin: return owner ? 0 : w;
    case ncclAvg: return is_fp8(t) ? 1 : w;
    default: break;
  }
  // Not a reduction: a rank- and index-dependent pattern in the exact range.
  double range = std::min(info(t).exact, 1024.0 * 1024);
  return double((uint64_t(rank) * 7919 + index * 31 + index / 97) % uint64_t(range));
}

void store(ncclDataType_t t, void* buffer, size_t index, double value) {
  uint64_t bits = encode(t, value);
  std::memcpy(static_cast<char*>(buffer) + index * type_size(t), &bits, type_size(t));  // little endian
}

bool equal_stored(ncclDataType_t t, const void* buffer, size_t index, double value) {
  uint64_t want = encode(t, value), got = 0;
  std::memcpy(&got, static_cast<const char*>(buffer) + index * type_size(t), type_size(t));
  return got == want;
}

}  // namespace perf

#include "perf/values.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace perf {
namespace {

struct TypeInfo {
  ncclDataType_t type;
  const char* name;
  size_t size;
  bool mpi;          // OpenMPI has a matching datatype
  uint64_t budget;   // integers 0..budget are exact (capped to keep sums small)
  int pow2;          // largest k with 2^k exact and in range
};
constexpr TypeInfo kTypes[] = {
    {ncclInt8, "int8", 1, true, 127, 6},
    {ncclUint8, "uint8", 1, true, 255, 7},
    {ncclInt32, "int32", 4, true, uint64_t(1) << 30, 30},
    {ncclUint32, "uint32", 4, true, uint64_t(1) << 30, 31},
    {ncclInt64, "int64", 8, true, uint64_t(1) << 40, 62},
    {ncclUint64, "uint64", 8, true, uint64_t(1) << 40, 63},
    {ncclFloat16, "half", 2, false, 2048, 15},
    {ncclFloat32, "float", 4, true, uint64_t(1) << 24, 100},
    {ncclFloat64, "double", 8, true, uint64_t(1) << 40, 1000},
    {ncclBfloat16, "bfloat16", 2, false, 256, 100},
    {ncclFloat8e4m3, "f8e4m3", 1, false, 16, 8},
    {ncclFloat8e5m2, "f8e5m2", 1, false, 8, 15},
};

const TypeInfo& info(ncclDataType_t t) {
  for (const TypeInfo& i : kTypes)
    if (i.type == t) return i;
  return kTypes[7];
}

// A binary float with `ebits` exponent and `mbits` mantissa bits (IEEE-like
// layout; e4m3 has no infinities, which does not matter for finite values).
struct Minifloat {
  int ebits, mbits, bias;
};
constexpr Minifloat kHalf{5, 10, 15}, kBf16{8, 7, 127}, kE4m3{4, 3, 7}, kE5m2{5, 2, 15};

uint64_t encode_minifloat(const Minifloat& f, double v) {
  uint64_t sign = std::signbit(v) ? uint64_t(1) << (f.ebits + f.mbits) : 0;
  double a = std::fabs(v);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int biased = e - 1 + f.bias;
  if (biased <= 0) {  // subnormal: multiples of 2^(1 - bias - mbits)
    double q = std::nearbyint(std::ldexp(a, f.bias - 1 + f.mbits));
    return sign | uint64_t(q);  // a carry into the exponent field is the right encoding
  }
  double q = std::nearbyint(std::ldexp(a, -(e - 1) + f.mbits)) - std::ldexp(1.0, f.mbits);
  uint64_t mant = uint64_t(q);
  if (mant >> f.mbits) {
    mant = 0;
    ++biased;
  }
  uint64_t max_biased = (uint64_t(1) << f.ebits) - 1;
  if (uint64_t(biased) > max_biased) biased = int(max_biased);  // saturate (never hit by test data)
  return sign | (uint64_t(biased) << f.mbits) | mant;
}

uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ULL;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dULL;
  x ^= x >> 33;
  return x;
}

// Maps a float's bits to an integer that is monotonic in the value.
int64_t ordered(ncclDataType_t t, uint64_t bits) {
  const int top = int(type_size(t)) * 8 - 1;
  const uint64_t sign = uint64_t(1) << top;
  const int64_t mag = int64_t(bits & (sign - 1));
  return (bits & sign) ? -mag : mag;
}

}  // namespace

size_t type_size(ncclDataType_t t) { return info(t).size; }
const char* type_name(ncclDataType_t t) { return info(t).name; }

bool is_floating(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: case ncclFloat32: case ncclFloat64: case ncclBfloat16: case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return true;
    default:
      return false;
  }
}

const char* op_name(int op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    case kMulSum: return "mulsum";
    default: return "none";
  }
}

bool parse_types(const std::string& arg, bool mpi_only, std::vector<ncclDataType_t>* out) {
  out->clear();
  std::string name = arg;
  // Aliases nccl-tests accepts.
  if (name == "char") name = "int8";
  if (name == "int") name = "int32";
  if (name == "fp16" || name == "float16") name = "half";
  if (name == "fp32" || name == "float32") name = "float";
  if (name == "fp64" || name == "float64") name = "double";
  if (name == "bf16") name = "bfloat16";
  if (name == "fp8_e4m3" || name == "e4m3") name = "f8e4m3";
  if (name == "fp8_e5m2" || name == "e5m2") name = "f8e5m2";
  for (const TypeInfo& i : kTypes) {
    if (name != "all" && name != i.name) continue;
    if (mpi_only && !i.mpi) {
      if (name == "all") continue;
      return false;
    }
    out->push_back(i.type);
  }
  return !out->empty();
}

bool parse_ops(const std::string& arg, std::vector<ncclRedOp_t>* out) {
  out->clear();
  // nccl-tests' order; "all" includes mulsum (an ncclRedOpCreatePreMulSum op) as it does.
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, kMulSum})
    if (arg == "all" || arg == op_name(op)) out->push_back(op);
  return !out->empty();
}

uint64_t encode(ncclDataType_t t, double v) {
  switch (t) {
    case ncclInt8: return uint8_t(int8_t(int64_t(v)));
    case ncclUint8: return uint8_t(uint64_t(v));
    case ncclInt32: return uint32_t(int32_t(int64_t(v)));
    case ncclUint32: return uint32_t(uint64_t(v));
    case ncclInt64: return uint64_t(int64_t(v));
    case ncclUint64: return uint64_t(v);
    case ncclFloat16: return encode_minifloat(kHalf, v);
    case ncclBfloat16: return encode_minifloat(kBf16, v);
    case ncclFloat8e4m3: return encode_minifloat(kE4m3, v);
    case ncclFloat8e5m2: return encode_minifloat(kE5m2, v);
    case ncclFloat32: {
      float f = float(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }
    case ncclFloat64: {
      uint64_t u;
      std::memcpy(&u, &v, 8);
      return u;
    }
    default: return 0;
  }
}

uint64_t load(ncclDataType_t t, const void* buffer, size_t index) {
  const size_t size = type_size(t);
  const unsigned char* p = static_cast<const unsigned char*>(buffer) + index * size;
  switch (size) {
    case 1: return p[0];
    case 2: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    default: { uint64_t v; std::memcpy(&v, p, 8); return v; }
  }
}

void store(ncclDataType_t t, void* buffer, size_t index, uint64_t bits) {
  const size_t size = type_size(t);
  unsigned char* p = static_cast<unsigned char*>(buffer) + index * size;
  switch (size) {
    case 1: p[0] = uint8_t(bits); break;
    case 2: { uint16_t v = uint16_t(bits); std::memcpy(p, &v, 2); break; }
    case 4: { uint32_t v = uint32_t(bits); std::memcpy(p, &v, 4); break; }
    default: std::memcpy(p, &bits, 8); break;
  }
}

Data::Data(ncclDataType_t type, int op, int nranks, uint64_t seed)
    : type_(type), op_(op), nranks_(std::max(1, nranks)), seed_(seed), budget_(info(type).budget),
      pow2_(info(type).pow2) {}

double Data::value(int rank, size_t index) const {
  const uint64_t n = uint64_t(nranks_);
  const uint64_t u = uint64_t(index) + seed_ * 0x9e3779b97f4a7c15ULL;
  const uint64_t hu = mix(u);                                           // per element
  const uint64_t h = mix(u ^ (uint64_t(rank + 1) * 0xc2b2ae3d27d4eb4fULL));  // per element and rank
  const bool owner = hu % n == uint64_t(rank);
  auto summable = [&](uint64_t budget) -> double {
    const uint64_t k = budget / n;
    if (k >= 2) return double(1 + h % std::min<uint64_t>(k, 64));
    if (k == 1) return double(1 + (owner ? (hu >> 16) % (budget - n + 1) : 0));
    return owner ? double(1 + (hu >> 16) % std::min<uint64_t>(budget, 4)) : 0.0;
  };
  switch (op_) {
    case ncclSum: return summable(budget_);
    case kMulSum: return summable(budget_ / 2);
    case ncclProd: {
      const uint64_t twos = uint64_t(std::min<int64_t>(nranks_, pow2_));
      return (uint64_t(rank) + hu) % (n + 1) < twos ? 2.0 : 1.0;
    }
    case ncclMax: return owner ? double(5 + (hu >> 16) % 4) : double(h % 5);
    case ncclMin: return owner ? double((hu >> 16) % 4) : double(4 + h % 5);
    case ncclAvg: {
      if (!is_floating(type_)) return summable(budget_);  // integers: truncated mean
      const uint64_t k = budget_ / n;
      if (k >= 2) {
        const double base = double(2 + (hu >> 16) % std::min<uint64_t>(k - 1, 4));
        if (n == 1) return base;
        const uint64_t up = hu % n, down = (up + 1) % n;
        return base + (uint64_t(rank) == up ? 1 : 0) - (uint64_t(rank) == down ? 1 : 0);
      }
      return k == 1 ? 1.0 : 0.0;
    }
    default: return 0;
  }
}

uint64_t Data::input(int rank, size_t index) const {
  if (op_ != kCopy) return encode(type_, value(rank, index));
  // Copies: any finite bit pattern (clearing the exponent's top bit keeps
  // floats finite, so no NaN payload can be canonicalised on the way).
  uint64_t bits = mix(uint64_t(index) * 0x9e3779b97f4a7c15ULL ^ mix(seed_ + uint64_t(rank) * 0x632be59bd9b4e019ULL));
  switch (type_) {
    case ncclFloat16: case ncclBfloat16: return bits & 0xbfff;
    case ncclFloat32: return bits & 0xbfffffffULL;
    case ncclFloat64: return bits & 0xbfffffffffffffffULL;
    case ncclFloat8e4m3: case ncclFloat8e5m2: return bits & 0xbf;
    default: break;
  }
  const size_t size = type_size(type_);
  return size == 8 ? bits : bits & ((uint64_t(1) << (8 * size)) - 1);
}

uint64_t Data::reduced(size_t index) const {
  if (op_ == kCopy) return input(0, index);
  double acc = op_ == kMulSum ? scalar(0) * value(0, index) : value(0, index);
  for (int r = 1; r < nranks_; ++r) {
    const double v = value(r, index);
    switch (op_) {
      case ncclSum: case ncclAvg: acc += v; break;
      case kMulSum: acc += scalar(r) * v; break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  if (op_ == ncclAvg) acc = is_floating(type_) ? acc / nranks_ : std::floor(acc / nranks_);
  return encode(type_, acc);
}

bool Data::matches(uint64_t got, uint64_t want) const {
  if (got == want) return true;
  // Averages may be computed as a premultiplied sum (NCCL does for floats),
  // rounding each term: nccl-tests accepts 2 ulp.  Not for fp8, where 2 ulp
  // would hide a whole lost contribution.
  if (op_ != ncclAvg || !is_floating(type_) || type_size(type_) == 1) return false;
  const int64_t d = ordered(type_, got) - ordered(type_, want);
  return d >= -2 && d <= 2;
}

void Data::fill(void* buffer, int rank, size_t first, size_t n) const {
  for (size_t k = 0; k < n; ++k) store(type_, buffer, k, input(rank, first + k));
}

}  // namespace perf

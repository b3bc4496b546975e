// Random mixes of calls on one communicator, checked exactly: a soak test for
// the interplay of braid's paths (boards, one-shot and two-shot, pulling,
// the slots, single-copy windows), each chosen by size and some by timing,
// that per-path tests reach one at a time.
//
// Every rank draws the same sequence from one seed: collectives and shifted
// send/recv pairs with random datatypes, ops, roots, placement (in place or
// not), NULL for unused buffers, sizes around every byte threshold the
// planner has, and buffer addresses off by whole elements from any larger
// alignment; runs of up to three calls share a group, and some groups
// come again.  Inputs are hashed
// from (seed, call, rank, element), so no two ranks' blocks and no two
// offsets look alike (a fixed pattern repeats and hides a block sent to
// the wrong place):
// - calls that only move data carry random bytes, compared byte for byte;
// - reductions carry random integers in a range where every partial result
//   is exact in the datatype, whatever the order of the fold.
// Each buffer has guard bytes on both sides, checked after the call, and a
// buffer the call may not write (a send buffer out of place, a non-root's
// Reduce or Gather output) must come back unchanged.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "collective_check.h"

namespace mp::random_calls {

inline uint64_t hash(uint64_t seed, uint64_t call, uint64_t rank, uint64_t i) {
  return mix(mix(mix(seed ^ call) ^ rank) ^ i);
}

// Kinds of call: the collectives of collective_check.h, then a send/recv
// pair where every rank sends to rank + shift and receives from rank - shift.
constexpr int kSendRecv = int(std::size(kAllColls));

struct Call {
  int kind = 0;  // a Coll, or kSendRecv
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;
  int root = 0, shift = 1;
  bool in_place = false, null_unused = false;
  size_t misalign = 0;  // elements past a 64-byte boundary, for both buffers
  uint64_t id = 0;      // the call's index in the sequence, hashed into its values
};

inline Coll coll_of(const Call& c) { return Coll(c.kind); }
inline bool is_reduction(const Call& c) { return c.kind != kSendRecv && reduces(coll_of(c)); }

inline std::string describe(const Call& c, int rank, int n) {
  if (c.kind == kSendRecv)
    return fmt::format("call {}: send/recv shift {} count={} type={} rank {}/{}", c.id, c.shift, c.count,
                       int(c.type), rank, n);
  CollCase cc{.coll = coll_of(c), .count = c.count, .type = c.type, .op = c.op, .root = c.root,
              .in_place = c.in_place};
  return fmt::format("call {}: {} misalign={}{}", c.id, mp::describe(cc, rank, n), c.misalign,
                     c.null_unused ? " null-unused" : "");
}

// Elements of the send and receive buffers.
struct Extents {
  size_t send = 0, recv = 0;
};
inline Extents extents(const Call& c, int n) {
  const size_t N = size_t(n);
  if (c.kind == kSendRecv) return {c.count, c.count};
  switch (coll_of(c)) {
    case Coll::AllGather: case Coll::Gather: return {c.count, N * c.count};
    case Coll::ReduceScatter: case Coll::Scatter: return {N * c.count, c.count};
    case Coll::AlltoAll: return {N * c.count, N * c.count};
    default: return {c.count, c.count};
  }
}

// Sizes: mostly small, some around the planner's byte thresholds (4 KiB
// boards, 32 KiB direct, 128 KiB one-sided and two-shot, 1 and 4 MiB), a few
// large; the largest buffer of a call stays within max_bytes.
inline size_t draw_count(std::mt19937_64& rng, size_t esize, size_t blocks, size_t max_bytes) {
  static const size_t thresholds[] = {4096, 32768, 131072, 262144, 1 << 20, 4 << 20};
  const size_t limit = std::max<size_t>(1, max_bytes / (esize * blocks));
  size_t count = 0;
  switch (rng() % 8) {
    case 0: count = rng() % 3; break;                              // 0, 1, 2
    case 1: case 2: count = 1 + rng() % 300; break;                // a board's
    case 3: case 4: count = 1 + rng() % (64 * 1024 / esize); break;  // up to 64 KiB
    case 5: {  // one element either side of a threshold, per rank or per call
      const size_t bytes = thresholds[rng() % std::size(thresholds)] / (rng() % 2 ? 1 : blocks);
      count = std::max<size_t>(1, bytes / esize) - 1 + rng() % 3;
      break;
    }
    default: count = 1 + rng() % limit; break;
  }
  return std::min(count, limit);
}

inline Call draw_call(std::mt19937_64& rng, int n, size_t max_bytes, uint64_t id) {
  static const ncclDataType_t types[] = {ncclInt8,   ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,
                                         ncclUint64, ncclFloat16, ncclFloat32,  ncclFloat64,    ncclBfloat16,
                                         ncclFloat8e4m3, ncclFloat8e5m2};
  static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  Call c;
  c.id = id;
  c.kind = int(rng() % (kSendRecv + 1));
  // Common cases more often: float and bf16 sums, as training runs them.
  c.type = rng() % 3 == 0 ? (rng() % 2 ? ncclFloat : ncclBfloat16) : types[rng() % std::size(types)];
  c.op = rng() % 3 == 0 ? ncclSum : ops[rng() % std::size(ops)];
  c.root = int(rng() % size_t(n));
  c.shift = 1 + int(rng() % size_t(std::max(1, n - 1)));
  c.in_place = c.kind != kSendRecv && rng() % 3 == 0;
  c.null_unused = !c.in_place && rng() % 4 == 0;
  c.misalign = rng() % 4 == 0 ? 1 + rng() % 15 : 0;
  const Extents one_block = extents(Call{.kind = c.kind, .count = 1}, n);
  c.count = draw_count(rng, type_size(c.type), std::max(one_block.send, one_block.recv), max_bytes);
  return c;
}

// The sequence: groups of one to three calls, `ncalls` calls in all.  One
// group in eight is the one before again, 2 to 9 times (with new values):
// paths chosen by timing (pulling or the slots, cached or streamed stores)
// settle, and switch, only over calls of one shape.
inline std::vector<std::vector<Call>> draw_groups(uint64_t seed, int n, int ncalls, size_t max_bytes) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<Call>> groups;
  for (int id = 0; id < ncalls;) {
    if (!groups.empty() && rng() % 8 == 0) {
      const std::vector<Call> shape = groups.back();
      for (int again = 2 + int(rng() % 8); again > 0 && id < ncalls; --again) {
        groups.push_back(shape);
        for (Call& c : groups.back()) c.id = uint64_t(id++);
      }
      continue;
    }
    const int size = rng() % 4 == 0 ? 2 + int(rng() % 2) : 1;
    groups.emplace_back();
    for (int k = 0; k < size && id < ncalls; ++k) groups.back().push_back(draw_call(rng, n, max_bytes, uint64_t(id++)));
  }
  return groups;
}

// The seeds a test runs: its own, or the one BRAID_TEST_SEED names (to
// search further, or to rerun a failure).
inline std::vector<uint64_t> seeds(std::vector<uint64_t> fixed) {
  if (const char* s = std::getenv("BRAID_TEST_SEED")) return {std::strtoull(s, nullptr, 0)};
  return fixed;
}

// ---- values ----

// The exact integers `v` of a minifloat and their encodings (found by
// decoding every bit pattern once).
inline const std::map<int, uint16_t>& minifloat_codes(ncclDataType_t t) {
  static const auto table = [] {
    std::map<ncclDataType_t, std::map<int, uint16_t>> all;
    for (ncclDataType_t type : {ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2}) {
      for (uint32_t b = 0; b < (type_size(type) == 2 ? 1u << 16 : 1u << 8); ++b) {
        const uint64_t bits = b;  // little-endian: the pattern's bytes first
        const double v = load(&bits, 0, type);
        if (v == std::floor(v) && std::fabs(v) <= 4096 && !(v == 0 && std::signbit(v)))  // not -0
          all[type].emplace(int(v), uint16_t(b));
      }
    }
    return all;
  }();
  return table.at(t);
}

inline void store_value(void* p, size_t i, ncclDataType_t t, int64_t v) {
  switch (t) {
    case ncclInt8: static_cast<int8_t*>(p)[i] = int8_t(v); break;
    case ncclUint8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    case ncclInt32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case ncclUint32: static_cast<uint32_t*>(p)[i] = uint32_t(v); break;
    case ncclInt64: static_cast<int64_t*>(p)[i] = v; break;
    case ncclUint64: static_cast<uint64_t*>(p)[i] = uint64_t(v); break;
    case ncclFloat32: static_cast<float*>(p)[i] = float(v); break;
    case ncclFloat64: static_cast<double*>(p)[i] = double(v); break;
    case ncclFloat16: case ncclBfloat16: static_cast<uint16_t*>(p)[i] = minifloat_codes(t).at(int(v)); break;
    default: static_cast<uint8_t*>(p)[i] = uint8_t(minifloat_codes(t).at(int(v))); break;
  }
}

// The magnitude up to which any sum of up to 8 values is exact in `t` (and
// in range), whatever the order: 8 x bound stays within the integers the
// type holds exactly.
inline int64_t sum_bound(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return 15;
    case ncclUint8: return 31;
    case ncclInt32: case ncclUint32: return int64_t(1) << 27;
    case ncclInt64: case ncclUint64: case ncclFloat64: return int64_t(1) << 40;
    case ncclFloat32: return int64_t(1) << 20;
    case ncclFloat16: return 255;  // sums up to 2040 < 2048
    case ncclBfloat16: return 31;  // up to 248 < 256
    case ncclFloat8e4m3: return 2;  // up to 16
    default: return 1;             // e5m2: up to 8
  }
}
inline bool is_unsigned(ncclDataType_t t) { return t == ncclUint8 || t == ncclUint32 || t == ncclUint64; }

// Element i of rank r's input to a reduction.
inline int64_t reduction_input(const Call& c, uint64_t seed, int rank, int n, size_t i) {
  const int64_t bound = sum_bound(c.type);
  const int64_t lo = is_unsigned(c.type) ? 0 : -bound;
  const uint64_t h = hash(seed, c.id, uint64_t(rank), i);
  switch (c.op) {
    case ncclProd: {  // +-1, and 2 on at most one rank: the product is +-1 or +-2
      if (size_t(rank) == i % size_t(n) && h % 4 == 0) return 2;
      return !is_unsigned(c.type) && (h >> 8) % 5 == 0 ? -1 : 1;
    }
    case ncclAvg: {  // the same on every rank (avg == value), in [0, min(bound, 6)]
      const uint64_t same = hash(seed, c.id, 0, i);
      return int64_t(same % uint64_t(std::min<int64_t>(bound, 6) + 1));
    }
    default: return lo + int64_t(h % uint64_t(bound - lo + 1));
  }
}

inline double reduction_result(const Call& c, uint64_t seed, int n, size_t i) {
  double acc = double(reduction_input(c, seed, 0, n, i));
  for (int r = 1; r < n; ++r) {
    const double v = double(reduction_input(c, seed, r, n, i));
    switch (c.op) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  return c.op == ncclAvg ? acc / n : acc;
}

// Byte k of rank r's input to a call that moves data.
inline uint8_t input_byte(const Call& c, uint64_t seed, int rank, size_t k) {
  return uint8_t(hash(seed, c.id, uint64_t(rank), k / 8) >> (8 * (k % 8)));
}

// ---- running ----

constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuardByte = 0x5a, kPoisonByte = 0xa5;

// One call's buffers: the regions they lie in (guards included), and what
// the regions held before the call.
struct Placed {
  char* send = nullptr;
  char* recv = nullptr;
  struct Region {
    char* begin = nullptr;
    size_t bytes = 0;
    std::vector<char> before;
  };
  std::vector<Region> regions;  // one in place, two out of place
};

inline size_t region_bytes(size_t payload) { return (2 * kGuardBytes + 15 * 8 + payload + 63) / 64 * 64; }

// Arena bytes a group's buffers take.
inline size_t group_bytes(const std::vector<Call>& group, int n) {
  size_t total = 0;
  for (const Call& c : group) {
    const Extents e = extents(c, n);
    const size_t es = type_size(c.type);
    total += c.in_place ? region_bytes(std::max(e.send, e.recv) * es)
                        : region_bytes(e.send * es) + region_bytes(e.recv * es);
  }
  return total;
}

// Lays out `c`'s buffers at `*arena` (advanced past them) and fills them:
// inputs, poison where output goes, guards.
inline Placed place_and_fill(const Call& c, uint64_t seed, int rank, int n, char** arena) {
  const Extents e = extents(c, n);
  const size_t es = type_size(c.type), block = c.count * es;
  auto region = [&](size_t payload) {
    Placed::Region r{*arena, region_bytes(payload), {}};
    *arena += r.bytes;
    std::memset(r.begin, kGuardByte, r.bytes);
    return r;
  };
  Placed p;
  if (c.in_place) {
    p.regions.push_back(region(std::max(e.send, e.recv) * es));
    char* base = p.regions[0].begin + kGuardBytes + c.misalign * es;
    p.send = p.recv = base;
    const Coll k = coll_of(c);
    if (k == Coll::AllGather || k == Coll::Gather) p.send = base + size_t(rank) * block;
    if (k == Coll::ReduceScatter || k == Coll::Scatter) p.recv = base + size_t(rank) * block;
    std::memset(base, kPoisonByte, std::max(e.send, e.recv) * es);
  } else {
    p.regions.push_back(region(e.send * es));
    p.regions.push_back(region(e.recv * es));
    p.send = p.regions[0].begin + kGuardBytes + c.misalign * es;
    p.recv = p.regions[1].begin + kGuardBytes + c.misalign * es;
    std::memset(p.recv, kPoisonByte, e.recv * es);
  }
  if (is_reduction(c))
    for (size_t i = 0; i < e.send; ++i) store_value(p.send, i, c.type, reduction_input(c, seed, rank, n, i));
  else
    for (size_t k = 0; k < e.send * es; ++k) p.send[k] = char(input_byte(c, seed, rank, k));
  for (Placed::Region& r : p.regions) r.before.assign(r.begin, r.begin + r.bytes);
  return p;
}

inline ncclResult_t issue(const Call& c, const Placed& p, int rank, int n, ncclComm_t comm) {
  const void* send = p.send;
  void* recv = p.recv;
  if (c.kind == kSendRecv) {
    ncclResult_t r = ncclSend(send, c.count, c.type, (rank + c.shift) % n, comm, nullptr);
    return r != ncclSuccess ? r : ncclRecv(recv, c.count, c.type, (rank - c.shift + n) % n, comm, nullptr);
  }
  const Coll k = coll_of(c);
  if (c.null_unused && rank != c.root) {
    if (k == Coll::Broadcast || k == Coll::Scatter) send = nullptr;
    if (k == Coll::Reduce || k == Coll::Gather) recv = nullptr;
  }
  switch (k) {
    case Coll::AllReduce: return ncclAllReduce(send, recv, c.count, c.type, c.op, comm, nullptr);
    case Coll::AllGather: return ncclAllGather(send, recv, c.count, c.type, comm, nullptr);
    case Coll::ReduceScatter: return ncclReduceScatter(send, recv, c.count, c.type, c.op, comm, nullptr);
    case Coll::Broadcast: return ncclBroadcast(send, recv, c.count, c.type, c.root, comm, nullptr);
    case Coll::Reduce: return ncclReduce(send, recv, c.count, c.type, c.op, c.root, comm, nullptr);
    case Coll::AlltoAll: return ncclAlltoAll(send, recv, c.count, c.type, comm, nullptr);
    case Coll::Gather: return ncclGather(send, recv, c.count, c.type, c.root, comm, nullptr);
    case Coll::Scatter: return ncclScatter(send, recv, c.count, c.type, c.root, comm, nullptr);
  }
  return ncclInternalError;
}

// Whether this rank's receive buffer holds output.
inline bool has_output(const Call& c, int rank) {
  return c.kind == kSendRecv || !((coll_of(c) == Coll::Reduce || coll_of(c) == Coll::Gather) && rank != c.root);
}

// The output byte k of a call that moves data: byte `k % block` of which
// rank's input, at which offset.
inline uint8_t moved_byte(const Call& c, uint64_t seed, int rank, int n, size_t k) {
  const size_t block = c.count * type_size(c.type), b = k / block, j = k % block;
  if (c.kind == kSendRecv) return input_byte(c, seed, (rank - c.shift + n) % n, k);
  switch (coll_of(c)) {
    case Coll::AllGather: case Coll::Gather: return input_byte(c, seed, int(b), j);
    case Coll::Broadcast: return input_byte(c, seed, c.root, k);
    case Coll::AlltoAll: return input_byte(c, seed, int(b), size_t(rank) * block + j);
    default: return input_byte(c, seed, c.root, size_t(rank) * block + k);  // Scatter
  }
}

// Checks `c`'s output and that nothing else in its regions changed.
inline void check(const Call& c, const Placed& p, uint64_t seed, int rank, int n, Failures& f) {
  const size_t es = type_size(c.type), out_bytes = has_output(c, rank) ? extents(c, n).recv * es : 0;
  size_t wrong = 0, first = 0;
  std::string got, want;
  auto note = [&](size_t at, const std::string& g, const std::string& w) {
    if (wrong++ == 0) first = at, got = g, want = w;
  };
  if (is_reduction(c)) {
    const size_t offset = coll_of(c) == Coll::ReduceScatter ? size_t(rank) * c.count : 0;
    for (size_t i = 0; i < out_bytes / es; ++i) {
      const double g = load(p.recv, i, c.type), w = reduction_result(c, seed, n, offset + i);
      if (g != w) note(i, fmt::format("{}", g), fmt::format("{}", w));
    }
  } else {
    for (size_t k = 0; k < out_bytes; ++k) {
      const uint8_t g = uint8_t(p.recv[k]), w = moved_byte(c, seed, rank, n, k);
      if (g != w) note(k, fmt::format("byte {:#x}", g), fmt::format("{:#x}", w));
    }
  }
  if (wrong)
    f.fail(fmt::format("{}: {} wrong, first at {}: got {} want {}", describe(c, rank, n), wrong, first, got, want));
  for (const Placed::Region& r : p.regions)
    for (size_t k = 0; k < r.bytes; ++k) {
      const char* at = r.begin + k;
      if (at >= p.recv && at < p.recv + out_bytes) continue;
      if (*at != r.before[k]) {
        f.fail(fmt::format("{}: a byte it may not write changed, at {:+} bytes from the output's start",
                           describe(c, rank, n), at - p.recv));
        break;
      }
    }
}

// Arena memory the caller provides (e.g. in a registered window), or null
// for fresh heap memory per group.
struct Arena {
  char* base = nullptr;
  size_t bytes = 0;
};

// One rank's part of a sequence on one communicator, a group at a time.
class Sequence {
 public:
  // Every rank of `comm` (2 to 8 of them: sum_bound) makes the same
  // sequence, with an arena at the same offsets of a window if any.
  Sequence(uint64_t seed, int ncalls, size_t max_bytes, int rank, int n, ncclComm_t comm, const Arena& given = {})
      : seed_(seed), rank_(rank), n_(n), comm_(comm), given_(given), groups_(draw_groups(seed, n, ncalls, max_bytes)) {}

  bool done() const { return next_ == groups_.size(); }

  // Lays out and fills the next group's buffers.
  void prepare(Failures& f) {
    if (n_ < 2 || n_ > 8) return f.fail(fmt::format("random mixes need 2 to 8 ranks, not {}", n_));
    const std::vector<Call>& group = groups_[next_];
    const size_t need = group_bytes(group, n_);
    heap_.assign(given_.base ? 0 : need + 64, 0);
    char* arena = given_.base ? given_.base : reinterpret_cast<char*>((uintptr_t(heap_.data()) + 63) / 64 * 64);
    if (given_.base && need > given_.bytes) return f.fail(fmt::format("seed {}: the arena is too small", seed_));
    placed_.clear();
    for (const Call& c : group) placed_.push_back(place_and_fill(c, seed_, rank_, n_, &arena));
  }
  // A send/recv pair is a group of its own at least: outside one, each
  // rank's blocking send would wait for a receive it has not posted yet.
  bool needs_group() const { return groups_[next_].size() > 1 || groups_[next_][0].kind == kSendRecv; }
  // Issues the prepared group's calls (inside a group the caller opened
  // where needs_group()); false where one failed.
  bool issue(Failures& f) {
    const std::vector<Call>& group = groups_[next_];
    bool ok = placed_.size() == group.size();
    for (size_t k = 0; ok && k < group.size(); ++k)
      if (ncclResult_t r = random_calls::issue(group[k], placed_[k], rank_, n_, comm_); !accepted(r)) {
        f.fail(fmt::format("seed {} {}: {}: {}", seed_, describe(group[k], rank_, n_), ncclGetErrorString(r),
                           ncclGetLastError(comm_)));
        ok = false;
      }
    return ok;
  }
  // Checks the issued group, once it has completed, and moves on.
  void check_and_advance(Failures& f) {
    const std::vector<Call>& group = groups_[next_++];
    for (size_t k = 0; k < group.size(); ++k) check(group[k], placed_[k], seed_, rank_, n_, f);
    if (f.count) f.fail(fmt::format("in the sequence of seed {}", seed_));
  }

  // Whether run_group puts a lone call in a group too (NCCL lets ranks
  // group alike calls differently).
  void group_lone_calls(bool on) { group_lone_calls_ = on; }

  // Runs the next group on its own.
  // For a nonblocking communicator (NCCL's config blocking=0): calls may
  // return ncclInProgress, and run_group waits for them to end.
  void nonblocking(bool on) { nonblocking_ = on; }

  void run_group(Failures& f) {
    prepare(f);
    const bool grouped = group_lone_calls_ || needs_group();
    if (grouped) MP_NCCL(f, ncclGroupStart());
    bool issued = !f.count && issue(f);
    if (grouped)
      if (ncclResult_t r = ncclGroupEnd(); !accepted(r)) {
        f.fail(fmt::format("seed {}: ncclGroupEnd: {}: {}", seed_, ncclGetErrorString(r), ncclGetLastError(comm_)));
        issued = false;
      }
    ncclResult_t state = ncclSuccess;
    if (nonblocking_)
      do MP_NCCL(f, ncclCommGetAsyncError(comm_, &state));
      while (state == ncclInProgress && !f.count);
    if (state != ncclSuccess) f.fail(fmt::format("seed {}: the calls ended in {}", seed_, ncclGetErrorString(state)));
    if (issued && !f.count) check_and_advance(f);
  }

 private:
  uint64_t seed_;
  int rank_, n_;
  ncclComm_t comm_;
  Arena given_;
  std::vector<std::vector<Call>> groups_;
  bool accepted(ncclResult_t r) const { return r == ncclSuccess || (nonblocking_ && r == ncclInProgress); }

  size_t next_ = 0;
  bool group_lone_calls_ = false, nonblocking_ = false;
  std::vector<char> heap_;
  std::vector<Placed> placed_;
};

// Runs the next group of every sequence in one NCCL group: sequences of
// several communicators, or of several ranks one thread drives.
inline void run_together(const std::vector<Sequence*>& sequences, Failures& f) {
  for (Sequence* s : sequences) s->prepare(f);
  if (f.count) return;
  MP_NCCL(f, ncclGroupStart());
  bool issued = true;
  for (Sequence* s : sequences) issued = s->issue(f) && issued;
  MP_NCCL(f, ncclGroupEnd());
  if (issued)
    for (Sequence* s : sequences) s->check_and_advance(f);
}

// Runs the sequence for `seed` on this rank, every group on its own.
inline void run_sequence(uint64_t seed, int ncalls, size_t max_bytes, int rank, int n, ncclComm_t comm,
                         Failures& f, const Arena& given = {}) {
  Sequence sequence(seed, ncalls, max_bytes, rank, n, comm, given);
  while (!sequence.done() && !f.count) sequence.run_group(f);
}

}  // namespace mp::random_calls

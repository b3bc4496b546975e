// What moe_perf's ranks share: the options, the routing every rank derives
// from its rank, the element conversions the checks use, and what a rank
// hands back; for the host ranks (moe_perf.cc) and the CUDA ranks
// (moe_perf_cuda.cu) alike.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "braid/moe.h"
#include "nccl.h"
#include "src/ops/float_formats.h"

namespace moe_perf {

using Clock = std::chrono::steady_clock;
constexpr int kMaxRounds = 64;

struct Options {
  int nranks = 8, tokens = 128, hidden = 7168, topk = 8, experts = 256, iters = 20, warmup = 3;
  int blocks = 0;  // config.blocks (0: the library's default)
  int rounds = 5;
  int tile = 16, check = 1, hosts = 0;  // hosts 0: ranks are threads of this process
  int device = 0;                       // 1: ranks are threads on the GPUs (CUDA communicators)
  int zero_copy = 0;                    // braidMoeZeroCopy_t flags (moe_perf.cc says what each does)
  double skew = 0;
  float capacity_factor = 0;
  ncclDataType_t dtype = ncclBfloat16;
  braidMoeLayout_t layout = braidMoeExpertMajor;
};

inline int elem_bytes(ncclDataType_t t) { return t == ncclFloat32 ? 4 : t == ncclFloat8e4m3 ? 1 : 2; }
inline float load(ncclDataType_t t, const char* p, size_t i) {
  switch (t) {
    case ncclFloat32: return reinterpret_cast<const float*>(p)[i];
    case ncclFloat16: return braid::half_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case ncclBfloat16: return braid::bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    default: return braid::e4m3_to_float(reinterpret_cast<const uint8_t*>(p)[i]);
  }
}
inline void store(ncclDataType_t t, char* p, size_t i, float v) {
  switch (t) {
    case ncclFloat32: reinterpret_cast<float*>(p)[i] = v; break;
    case ncclFloat16: reinterpret_cast<uint16_t*>(p)[i] = braid::float_to_half(v); break;
    case ncclBfloat16: reinterpret_cast<uint16_t*>(p)[i] = braid::float_to_bf16(v); break;
    default: reinterpret_cast<uint8_t*>(p)[i] = braid::float_to_e4m3(v); break;
  }
}

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Distinct experts per token; a fraction `skew` of the choices among the hot eighth.
inline std::vector<int32_t> route(const Options& o, int rank) {
  uint64_t s = mix(uint64_t(rank) + 12345);
  const int hot = std::max(o.topk, o.experts / 8);
  std::vector<int32_t> topk(size_t(o.tokens) * o.topk);
  for (int t = 0; t < o.tokens; ++t)
    for (int k = 0; k < o.topk; ++k) {
      int32_t e;
      bool fresh;
      do {
        s = mix(s);
        const bool is_hot = double(s >> 11) / double(1ull << 53) < o.skew;
        s = mix(s);
        e = int32_t(s % uint64_t(is_hot ? hot : o.experts));
        fresh = true;
        for (int j = 0; j < k; ++j) fresh = fresh && topk[size_t(t) * o.topk + j] != e;
      } while (!fresh);
      topk[size_t(t) * o.topk + k] = e;
    }
  return topk;
}

struct RankResult {
  // Per round, this rank's mean per call.
  double moe_dispatch_us[kMaxRounds] = {}, moe_combine_us[kMaxRounds] = {};
  double a2a_dispatch_us[kMaxRounds] = {}, a2a_combine_us[kMaxRounds] = {};
  double routed_remote_bytes = 0;  // per layer: rows this rank routes to other ranks (not dropped) x row bytes
  double moe_wire = 0, a2a_wire = 0;  // per layer, bytes this rank puts to other ranks
  double signals_per_dest = 0, fences_per_call = 0;
  int64_t dropped = 0, wrong = 0;
  char error[512] = {};  // plain bytes: forked ranks return results in shared memory
};

#define TRY(call)                                                                                  \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      snprintf(res.error, sizeof(res.error), "%s: %s: %s", #call, ncclGetErrorString(r_), ncclGetLastError(nullptr)); \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

// In the per-layer lambdas, which return the failed call's result.
#define LTRY(call)                              \
  do {                                          \
    const ncclResult_t r_ = (call);             \
    if (r_ != ncclSuccess) return r_;           \
  } while (0)

inline double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

inline braidMoeConfig_t config_of(const Options& o) {
  braidMoeConfig_t cfg = BRAID_MOE_CONFIG_INITIALIZER;
  cfg.numExperts = o.experts;
  cfg.topK = o.topk;
  cfg.hidden = o.hidden;
  cfg.maxTokensPerRank = o.tokens;
  cfg.dtype = o.dtype;
  cfg.tileRows = o.tile;
  cfg.capacityFactor = o.capacity_factor;
  cfg.layout = o.layout;
  cfg.blocks = o.blocks;
  cfg.zeroCopy = o.zero_copy;
  return cfg;
}

// Warm-up, then rounds that alternate: every round runs -n layers of each
// path (moe_layer, a2a_layer: (double* dispatch_us, double* combine_us) ->
// ncclResult_t, adding a layer's times); then the MoE path's bytes on the
// wire, signals and fences per layer from its statistics, and what its
// kernels hit (CUDA).
template <class MoeLayer, class A2aLayer>
ncclResult_t run_rounds(const Options& o, braidMoe_t moe, MoeLayer&& moe_layer, A2aLayer&& a2a_layer,
                        RankResult& res) {
  double ignored = 0;
  for (int i = 0; i < o.warmup; ++i) {
    LTRY(moe_layer(&ignored, &ignored));
    LTRY(a2a_layer(&ignored, &ignored));
  }
  braidMoeStats_t before{}, after{};
  LTRY(braidMoeGetStats(moe, &before));
  for (int r = 0; r < o.rounds; ++r) {
    for (int i = 0; i < o.iters; ++i) LTRY(moe_layer(&res.moe_dispatch_us[r], &res.moe_combine_us[r]));
    for (int i = 0; i < o.iters; ++i) LTRY(a2a_layer(&res.a2a_dispatch_us[r], &res.a2a_combine_us[r]));
    res.moe_dispatch_us[r] /= o.iters;
    res.moe_combine_us[r] /= o.iters;
    res.a2a_dispatch_us[r] /= o.iters;
    res.a2a_combine_us[r] /= o.iters;
  }
  LTRY(braidMoeGetStats(moe, &after));
  ncclResult_t async = ncclSuccess;
  LTRY(braidMoeGetAsyncError(moe, &async));
  LTRY(async);
  const double layers = double(o.rounds) * o.iters;
  res.moe_wire = double(after.payloadBytesRemote + after.signalBytesRemote - before.payloadBytesRemote -
                        before.signalBytesRemote) / layers;
  res.signals_per_dest =
      double(after.signalsRemote - before.signalsRemote) / (2.0 * layers * std::max(1, o.nranks - 1));
  res.fences_per_call = double(after.fences - before.fences) / (2.0 * layers);
  return ncclSuccess;
}

// A rank's last layer, summed up and checked (-c): the routed payload (rows
// to other ranks, both ways, as sent after capacity), the baseline's bytes
// on the wire (`a2a_remote_bytes` of rows one way, plus the counts), and
// both paths' combined tokens (weights 1 and identity experts: every kept
// choice adds the token once).
inline void finish_rank(const Options& o, int rank, int capacity, const std::vector<int32_t>& topk,
                        const std::vector<char>& tokens, const std::vector<int32_t>& counts,
                        const std::vector<char>& out, const std::vector<char>& a2a_out, size_t a2a_remote_bytes,
                        RankResult& res) {
  const int n = o.nranks, L = o.experts / n, K = o.topk, H = o.hidden, eb = elem_bytes(o.dtype);
  const size_t row_bytes = size_t(H) * eb;
  std::vector<int32_t> per_expert(size_t(o.experts), 0);
  for (int32_t e : topk) per_expert[size_t(e)]++;
  double rows = 0;
  for (int e = 0; e < o.experts; ++e)
    if (e / L != rank) rows += std::min(per_expert[size_t(e)], capacity);
  for (int src = 0; src < n; ++src)
    if (src != rank)
      for (int le = 0; le < L; ++le) rows += counts[size_t(src) * L + le];
  res.routed_remote_bytes = rows * double(row_bytes);
  res.a2a_wire = 2.0 * double(a2a_remote_bytes) + double(n - 1) * L * sizeof(int32_t);
  if (!o.check) return;
  std::vector<int32_t> taken(size_t(o.experts), 0);
  for (int t = 0; t < o.tokens; ++t) {
    int kept = 0;
    for (int k = 0; k < K; ++k) kept += taken[size_t(topk[size_t(t) * K + k])]++ < capacity;
    for (int h = 0; h < H; ++h) {
      char want[4];
      float sum = 0;  // as combine adds: +0 for no kept choice, never -0
      for (int j = 0; j < kept; ++j) sum += load(o.dtype, tokens.data(), size_t(t) * H + h);
      store(o.dtype, want, 0, sum);
      if (std::memcmp(want, out.data() + (size_t(t) * H + h) * eb, size_t(eb)) != 0) ++res.wrong;
    }
  }
  if (res.dropped != 0 || o.capacity_factor != 0) return;  // the baseline drops nothing
  for (int t = 0; t < o.tokens; ++t)
    for (int h = 0; h < H; ++h) {
      char want[4];
      store(o.dtype, want, 0, float(K) * load(o.dtype, tokens.data(), size_t(t) * H + h));
      if (std::memcmp(want, a2a_out.data() + (size_t(t) * H + h) * eb, size_t(eb)) != 0) ++res.wrong;
    }
}

// A CUDA rank (moe_perf_cuda.cu): the same two paths on its device
// (rank % devices), device buffers, every phase timed to its stream's end.
void cuda_rank_main(const Options& o, const ncclUniqueId& id, int rank, RankResult& res);

}  // namespace moe_perf

// What MoE dispatch and combine must produce, computed independently of
// braid's planner: every rank derives every rank's routing and token values
// from a seed, so it knows exactly which rows it must receive and what each
// token must get back.  Values are small integers (and halves) so that every
// element type holds them and float sums are exact in any order; the
// reference converts exactly as a rank stores, so comparisons are bitwise.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "braid/moe.h"
#include "src/ops/float_formats.h"

namespace moe_test {

struct Case {
  int experts = 8, top_k = 2, hidden = 16, max_tokens = 32, tile = 4;
  float factor = 0;  // capacity factor; 0: worst case
  braidMoeLayout_t layout = braidMoeExpertMajor;
  ncclDataType_t dtype = ncclFloat32;
  int blocks = 1;
  uint64_t seed = 1;
  double skew = 0;       // probability a choice goes to the hot experts
  double masked = 0;     // probability a choice is -1
  bool cold = false;     // a quarter of the experts never get a token
  bool empty_ranks = false;  // odd ranks send no tokens at all
  // Zero-copy combine (braidMoeGetCombineBuffer): 0 off; 1 the results are
  // written into the buffer; 2 dispatch writes into the buffer and the
  // experts work in place; 3 as 1 on the ranks whose rank + layer is even,
  // the others pass their own memory.
  int zero_copy = 0;
  // Zero-copy dispatch (braidMoeGetDispatchBuffer): 0 off; 1 the tokens are
  // written into the buffer; 2 so on the ranks whose rank + layer is odd.
  int zero_copy_dispatch = 0;
  int ranks_per_host = 0;  // emulated hosts of that many ranks each (0: one host)
};

inline uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Rng {
  uint64_t s;
  uint64_t next() { return s = mix(s); }
  double unit() { return double(next() >> 11) / double(1ull << 53); }
  int below(int n) { return int(next() % uint64_t(n)); }
};

struct Routing {
  int tokens = 0;
  std::vector<int32_t> topk;  // [tokens][top_k]
};

inline Routing routing(const Case& c, int rank, int layer) {
  Rng rng{mix(c.seed * 1000003ull + uint64_t(rank) * 7919ull + uint64_t(layer) * 104729ull)};
  Routing r;
  r.tokens = (c.empty_ranks && rank % 2 == 1) ? 0 : (rng.below(4) == 0 ? c.max_tokens : rng.below(c.max_tokens + 1));
  const int allowed = c.cold && c.experts - c.experts / 4 >= c.top_k ? c.experts - c.experts / 4 : c.experts;
  const int hot = std::max(c.top_k, allowed / 8);
  r.topk.assign(size_t(r.tokens) * c.top_k, -1);
  for (int t = 0; t < r.tokens; ++t)
    for (int k = 0; k < c.top_k; ++k) {
      int e;
      bool fresh;
      do {  // distinct experts per token
        e = rng.unit() < c.skew ? rng.below(hot) : rng.below(allowed);
        fresh = true;
        for (int j = 0; j < k; ++j) fresh = fresh && r.topk[size_t(t) * c.top_k + j] != e;
      } while (!fresh);
      r.topk[size_t(t) * c.top_k + k] = e;
    }
  for (auto& e : r.topk)
    if (rng.unit() < c.masked) e = -1;
  return r;
}

inline int elem_bytes(ncclDataType_t t) {
  return t == ncclFloat32 ? 4 : (t == ncclFloat16 || t == ncclBfloat16) ? 2 : 1;
}
inline float load(ncclDataType_t t, const void* p, size_t i) {
  switch (t) {
    case ncclFloat32: return static_cast<const float*>(p)[i];
    case ncclFloat16: return braid::half_to_float(static_cast<const uint16_t*>(p)[i]);
    case ncclBfloat16: return braid::bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case ncclFloat8e4m3: return braid::e4m3_to_float(static_cast<const uint8_t*>(p)[i]);
    default: return braid::e5m2_to_float(static_cast<const uint8_t*>(p)[i]);
  }
}
inline void put(ncclDataType_t t, void* p, size_t i, float v) {
  switch (t) {
    case ncclFloat32: static_cast<float*>(p)[i] = v; break;
    case ncclFloat16: static_cast<uint16_t*>(p)[i] = braid::float_to_half(v); break;
    case ncclBfloat16: static_cast<uint16_t*>(p)[i] = braid::float_to_bf16(v); break;
    case ncclFloat8e4m3: static_cast<uint8_t*>(p)[i] = braid::float_to_e4m3(v); break;
    default: static_cast<uint8_t*>(p)[i] = braid::float_to_e5m2(v); break;
  }
}

// Token t's element h on `rank` in `layer`.
inline float token_value(int rank, int layer, int t, int h) {
  return float((rank * 131 + layer * 17 + t * 7 + h * 3) % 15 - 7);
}
// The experts' computation: a scale per expert, so a misplaced row shows.
inline float expert_scale(int e) { return float(e % 4 + 1); }
inline float weight(int k) { return 0.5f * float(k + 1); }

// Rows of block (source, expert) in arrival order: the source's tokens
// routed to the expert, in token order, the first `capacity` of them.
// Also what each (token, k) became: sent, or dropped past capacity.
struct SourcePlan {
  std::vector<std::vector<int>> rows;  // [expert] -> tokens
  std::vector<uint8_t> dropped;        // [token * top_k + k]
  int64_t routed = 0, dropped_rows = 0;
};
inline SourcePlan source_plan(const Case& c, const Routing& r, int capacity) {
  SourcePlan p;
  p.rows.resize(size_t(c.experts));
  p.dropped.assign(r.topk.size(), 0);
  for (size_t i = 0; i < r.topk.size(); ++i) {
    const int e = r.topk[i];
    if (e < 0) continue;
    ++p.routed;
    if (int(p.rows[size_t(e)].size()) < capacity) {
      p.rows[size_t(e)].push_back(int(i / size_t(c.top_k)));
    } else {
      p.dropped[i] = 1;
      ++p.dropped_rows;
    }
  }
  return p;
}

}  // namespace moe_test

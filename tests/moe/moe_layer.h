// One MoE layer on one rank, checked exactly against moe_reference.h:
// dispatch, the receive counts and every received row, the experts'
// computation, combine and every token's weighted sum; and what the layer
// must add to the handle's statistics.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "host_side.h"
#include "moe_reference.h"

namespace moe_test {

struct Expected {  // what braidMoeGetStats must say, summed over layers
  uint64_t dispatches = 0, combines = 0, routed = 0, dropped = 0, payload_remote = 0, signal_bytes_remote = 0,
           bytes_local = 0, signals_remote = 0, signals_local = 0, fences = 0;
};

inline void check_stats(braidMoe_t moe, const Expected& x, mp::Failures& f, int rank) {
  braidMoeStats_t s{};
  MP_NCCL(f, braidMoeGetStats(moe, &s));
  auto eq = [&](const char* what, uint64_t got, uint64_t want) {
    if (got != want) f.fail(fmt::format("rank {}: stats {} = {}, want {}", rank, what, got, want));
  };
  eq("dispatches", s.dispatches, x.dispatches);
  eq("combines", s.combines, x.combines);
  eq("rowsRouted", s.rowsRouted, x.routed);
  eq("rowsDropped", s.rowsDropped, x.dropped);
  eq("payloadBytesRemote", s.payloadBytesRemote, x.payload_remote);
  eq("signalBytesRemote", s.signalBytesRemote, x.signal_bytes_remote);
  eq("bytesLocal", s.bytesLocal, x.bytes_local);
  eq("signalsRemote", s.signalsRemote, x.signals_remote);
  eq("signalsLocal", s.signalsLocal, x.signals_local);
  eq("fences", s.fences, x.fences);
}

// Where block (src, le) starts in the output (moe.h's two layouts).
inline std::vector<int64_t> first_rows(const Case& c, int n, const std::vector<int32_t>& counts) {
  const int L = c.experts / n;
  std::vector<int64_t> first(counts.size());
  auto up = [&](int64_t v) { return (v + c.tile - 1) / c.tile * c.tile; };
  int64_t row = 0;
  if (c.layout == braidMoeRankMajor) {
    for (size_t i = 0; i < counts.size(); ++i) first[i] = row, row += up(counts[i]);
  } else {
    for (int le = 0; le < L; ++le) {
      const int64_t start = row;
      for (int src = 0; src < n; ++src) first[size_t(src) * L + le] = row, row += counts[size_t(src) * L + le];
      row = start + up(row - start);
    }
  }
  return first;
}

// Whether rank s loads and stores rank o's window (host_moe.h): every pair
// of one host, unless BRAID_MOE_RMA=1 sends every other rank over RMA.
inline bool maps(const Case& c, int s, int o) {
  if (s == o) return true;
  const char* rma = std::getenv("BRAID_MOE_RMA");
  if (rma && std::string(rma) == "1") return false;
  return c.ranks_per_host == 0 || s / c.ranks_per_host == o / c.ranks_per_host;
}

// Whether rank r leaves its results of layer `layer` in its combine buffer.
inline bool results_in_buffer(const Case& c, int r, int layer) {
  return c.zero_copy == 1 || c.zero_copy == 2 || (c.zero_copy == 3 && (r + layer) % 2 == 0);
}

// Whether rank r dispatches layer `layer` from its dispatch buffer.
inline bool tokens_in_buffer(const Case& c, int r, int layer) {
  return c.zero_copy_dispatch == 1 || (c.zero_copy_dispatch == 2 && (r + layer) % 2 == 1);
}

// Runs layer `layer`; returns false after the first failure (f counts it).
template <class Side = HostSide>
bool run_layer(const Case& c, int rank, int n, braidMoe_t moe, int layer, mp::Failures& f, Expected* x,
               Side& side) {
  const int L = c.experts / n, H = c.hidden, K = c.top_k, eb = elem_bytes(c.dtype);
  const size_t row_bytes = size_t(H) * eb;
  size_t max_rows = 0;
  int capacity = 0;
  MP_NCCL(f, braidMoeGetInfo(moe, &max_rows, &capacity));
  const int before = f.count;

  const Routing mine = routing(c, rank, layer);
  std::vector<char> tokens(size_t(mine.tokens) * row_bytes);
  for (int t = 0; t < mine.tokens; ++t)
    for (int h = 0; h < H; ++h) put(c.dtype, tokens.data(), size_t(t) * H + h, token_value(rank, layer, t, h));

  // The zero-copy buffers, in braid's memory (the side's copies reach them).
  char *buffer = nullptr, *token_buffer = nullptr;
  if (c.zero_copy) MP_NCCL(f, braidMoeGetCombineBuffer(moe, reinterpret_cast<void**>(&buffer)));
  if (c.zero_copy_dispatch) MP_NCCL(f, braidMoeGetDispatchBuffer(moe, reinterpret_cast<void**>(&token_buffer)));
  const bool in_buffer = results_in_buffer(c, rank, layer), in_place = c.zero_copy == 2;
  const bool from_buffer = tokens_in_buffer(c, rank, layer);
  if (f.count != before || (c.zero_copy && !buffer) || (c.zero_copy_dispatch && !token_buffer)) return false;
  if (from_buffer) side.to(token_buffer, tokens.data(), tokens.size());
  std::vector<char> recv(max_rows * row_bytes, char(0x7f));
  std::vector<int32_t> counts(size_t(n) * L, -1);
  int64_t dropped = -1;
  MP_NCCL(f, braidMoeDispatch(moe, from_buffer ? token_buffer : side.in(tokens.data(), tokens.size()),
                              static_cast<const int32_t*>(side.in(mine.topk.data(), mine.topk.size() * 4)), mine.tokens,
                              in_place ? buffer : side.out(recv.data(), recv.size()),
                              static_cast<int32_t*>(side.out(counts.data(), counts.size() * 4)),
                              static_cast<int64_t*>(side.out(&dropped, sizeof(dropped))), side.stream()));
  if (f.count != before || !side.done(f)) return false;
  if (in_place) side.from(recv.data(), buffer, recv.size());

  // What every source sent here.
  const SourcePlan my_plan = source_plan(c, mine, capacity);
  if (dropped != my_plan.dropped_rows)
    f.fail(fmt::format("rank {} layer {}: droppedRows {}, want {}", rank, layer, dropped, my_plan.dropped_rows));
  std::vector<int32_t> want_counts(counts.size());
  std::vector<SourcePlan> plans(static_cast<size_t>(n));
  for (int src = 0; src < n; ++src) {
    plans[size_t(src)] = src == rank ? my_plan : source_plan(c, routing(c, src, layer), capacity);
    for (int le = 0; le < L; ++le)
      want_counts[size_t(src) * L + le] = int32_t(plans[size_t(src)].rows[size_t(rank * L + le)].size());
  }
  if (counts != want_counts) {
    f.fail(fmt::format("rank {} layer {}: recvCounts [{}], want [{}]", rank, layer, fmt::join(counts, ","),
                       fmt::join(want_counts, ",")));
    return false;
  }
  const std::vector<int64_t> first = first_rows(c, n, counts);
  std::vector<char> expert_out(recv.size(), char(0x7f));  // padding rows stay garbage: combine must not read them
  for (int src = 0; src < n; ++src)
    for (int le = 0; le < L; ++le) {
      const auto& rows = plans[size_t(src)].rows[size_t(rank * L + le)];
      for (size_t j = 0; j < rows.size(); ++j) {
        const size_t row = size_t(first[size_t(src) * L + le]) + j;
        for (int h = 0; h < H; ++h) {
          const size_t i = row * H + h;
          std::vector<char> one(static_cast<size_t>(eb));
          put(c.dtype, one.data(), 0, token_value(src, layer, rows[j], h));
          const float want = load(c.dtype, one.data(), 0);
          const float got = load(c.dtype, recv.data(), i);
          if (std::memcmp(recv.data() + i * eb, one.data(), size_t(eb)) != 0) {
            f.fail(fmt::format("rank {} layer {}: row {} (source {} expert {} #{} = token {}) element {} is {}, want {}",
                               rank, layer, row, src, rank * L + le, j, rows[j], h, got, want));
            return false;
          }
          put(c.dtype, expert_out.data(), i, got * expert_scale(rank * L + le));
        }
      }
    }

  std::vector<float> weights(mine.topk.size());
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = weight(int(i % size_t(K)));
  std::vector<char> out(size_t(mine.tokens) * row_bytes, char(0x7f));
  if (in_buffer) side.to(buffer, expert_out.data(), expert_out.size());  // the experts write there
  MP_NCCL(f, braidMoeCombine(moe, in_buffer ? buffer : side.in(expert_out.data(), expert_out.size()),
                             static_cast<const float*>(side.in(weights.data(), weights.size() * 4)),
                             side.out(out.data(), out.size()), side.stream()));
  if (f.count != before || !side.done(f)) return false;
  std::vector<char> scaled(static_cast<size_t>(eb)), want(static_cast<size_t>(eb));
  for (int t = 0; t < mine.tokens; ++t)
    for (int h = 0; h < H; ++h) {
      float acc = 0;
      for (int k = 0; k < K; ++k) {
        const size_t i = size_t(t) * K + k;
        const int e = mine.topk[i];
        if (e < 0 || my_plan.dropped[i]) continue;
        put(c.dtype, scaled.data(), 0, load(c.dtype, tokens.data(), size_t(t) * H + h) * expert_scale(e));
        acc += weights[i] * load(c.dtype, scaled.data(), 0);
      }
      put(c.dtype, want.data(), 0, acc);
      const size_t i = size_t(t) * H + h;
      if (std::memcmp(out.data() + i * eb, want.data(), size_t(eb)) != 0) {
        f.fail(fmt::format("rank {} layer {}: combined token {} element {} is {}, want {}", rank, layer, t, h,
                           load(c.dtype, out.data(), i), acc));
        return false;
      }
    }

  // The wire: routed rows to other ranks, both ways, and L signal words per
  // destination per call; nothing else.  A result a source reads in its
  // expert's buffer counts at the source, as the put it replaces would at
  // the expert.
  x->dispatches++;
  x->combines++;
  x->routed += uint64_t(my_plan.routed);
  x->dropped += uint64_t(my_plan.dropped_rows);
  auto pulled = [&](int src, int owner) { return results_in_buffer(c, owner, layer) && maps(c, src, owner); };
  auto rows_pulled = [&](int src, int owner) { return tokens_in_buffer(c, src, layer) && maps(c, owner, src); };
  for (int e = 0; e < c.experts; ++e) {  // this rank as the source
    const uint64_t bytes = my_plan.rows[size_t(e)].size() * row_bytes;
    const int owner = e / L;
    uint64_t& where = owner == rank ? x->bytes_local : x->payload_remote;
    if (!rows_pulled(rank, owner)) where += bytes;  // dispatch: the rows put
    if (pulled(rank, owner)) where += bytes;        // combine: their results read in the owner's buffer
  }
  for (size_t i = 0; i < counts.size(); ++i) {  // this rank as the expert
    const int src = int(i) / L;
    const uint64_t bytes = uint64_t(counts[i]) * row_bytes;
    uint64_t& where = src == rank ? x->bytes_local : x->payload_remote;
    if (rows_pulled(src, rank)) where += bytes;  // dispatch: the rows read in the source's buffer
    if (!pulled(src, rank)) where += bytes;      // combine: the results put back
  }
  x->signals_remote += 2ull * uint64_t(n - 1) * uint64_t(L);
  x->signal_bytes_remote += 2ull * uint64_t(n - 1) * uint64_t(L) * 8;
  x->signals_local += 2ull * uint64_t(L);
  x->bytes_local += 2ull * uint64_t(L) * 8;
  x->fences += 2ull * uint64_t(n);
  return true;
}

inline bool run_layer(const Case& c, int rank, int n, braidMoe_t moe, int layer, mp::Failures& f, Expected* x) {
  HostSide side;
  return run_layer(c, rank, n, moe, layer, f, x, side);
}

// A case in one line, for a failed check's message.
inline std::string describe(const Case& c) {
  return fmt::format("experts={} top_k={} seed={} factor={} layout={} dtype={} blocks={} zero_copy={}/{}", c.experts,
                     c.top_k, c.seed, c.factor, int(c.layout), int(c.dtype), c.blocks, c.zero_copy,
                     c.zero_copy_dispatch);
}

inline braidMoeConfig_t config_of(const Case& c) {
  braidMoeConfig_t cfg = BRAID_MOE_CONFIG_INITIALIZER;
  cfg.numExperts = c.experts;
  cfg.topK = c.top_k;
  cfg.hidden = c.hidden;
  cfg.maxTokensPerRank = c.max_tokens;
  cfg.dtype = c.dtype;
  cfg.tileRows = c.tile;
  cfg.capacityFactor = c.factor;
  cfg.layout = c.layout;
  cfg.blocks = c.blocks;
  cfg.timeoutMs = 20000;
  cfg.zeroCopy = (c.zero_copy ? braidMoeZeroCopyCombine : 0) | (c.zero_copy_dispatch ? braidMoeZeroCopyDispatch : 0);
  return cfg;
}

// A rank body: create, `layers` layers checked, statistics checked, destroy.
// `expect_drops`: the ranks together must have dropped rows (the case is
// meant to overflow its capacity).
template <class Side = HostSide>
mp::RankBody layers_body(const Case& c, int layers, bool expect_drops = false) {
  return [=](int rank, int n, ncclComm_t comm, mp::Failures& f) {
    braidMoeConfig_t cfg = config_of(c);
    braidMoe_t moe = nullptr;
    MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
    if (!moe) return;
    Side side;
    Expected x;
    for (int layer = 0; layer < layers; ++layer)
      if (!run_layer(c, rank, n, moe, layer, f, &x, side)) break;
    if (f.count == 0) check_stats(moe, x, f, rank);
    if (expect_drops && f.count == 0) {
      double all = double(x.dropped);
      side.sum(comm, &all, f);
      if (all <= 0) f.fail(fmt::format("rank {}: the case dropped no row; it was meant to overflow", rank));
    }
    MP_NCCL(f, braidMoeDestroy(moe));
  };
}

// Random shapes: experts a multiple of n, top-k up to min(8, experts).
inline Case random_case(int n, uint64_t seed) {
  Rng rng{mix(seed + 17)};
  Case c;
  c.seed = seed;
  c.experts = n * (1 + rng.below(4));
  c.top_k = 1 + rng.below(std::min(8, c.experts));
  c.hidden = 1 + rng.below(40);
  c.max_tokens = 1 + rng.below(48);
  c.tile = 1 << rng.below(4);
  c.layout = rng.below(2) ? braidMoeRankMajor : braidMoeExpertMajor;
  static const ncclDataType_t types[] = {ncclFloat32, ncclBfloat16, ncclFloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  c.dtype = types[rng.below(5)];
  c.blocks = 1 + rng.below(3);
  c.masked = rng.below(3) == 0 ? 0.2 : 0;
  c.cold = rng.below(2) == 0;
  c.skew = rng.below(3) == 0 ? 0.8 : 0;
  return c;
}

}  // namespace moe_test

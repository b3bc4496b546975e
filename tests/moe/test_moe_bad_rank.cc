// MoE dispatch/combine when one rank alone passes a bad argument (a bad
// expert index, numTokens out of range, a NULL buffer) and its peers pass
// good ones: that call fails on every rank at once (the bad rank's
// kFailedSender words, calls.h), the bad rank with ncclInvalidArgument
// saying what was wrong, the others with ncclRemoteError, long before the
// handle's timeout; and the next layer is exact on every rank.
// Threads, processes, and processes on hosts of their own (the words then
// travel over one-sided RMA).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <string>

#include "moe_layer.h"

using namespace moe_test;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kTimeoutMs = 20000;  // a peer that waited for it would take 20 s
constexpr double kPromptS = 8;     // what "at once" allows on a loaded 2-core machine

enum class Bad { Expert, NumTokens, NullTokens, NullRecv, NullCombine };
constexpr Bad kAllBad[] = {Bad::Expert, Bad::NumTokens, Bad::NullTokens, Bad::NullRecv, Bad::NullCombine};

const char* what_is_wrong(Bad bad) {
  switch (bad) {
    case Bad::Expert: return "routes to expert";
    case Bad::NumTokens: return "numTokens";
    case Bad::NullTokens: return "tokens or topkIdx is NULL";
    case Bad::NullRecv: return "recvTokens or recvCounts is NULL";
    case Bad::NullCombine: return "expertOut, topkWeights or outTokens is NULL";
  }
  return "";
}

// One call of each rank, rank `bad_rank` (and for Bad::Expert the next)
// with argument `bad`; every rank's error checked, and the time it took.
void one_bad_call(const Case& c, int rank, int n, braidMoe_t moe, ncclComm_t comm, Bad bad, int bad_rank,
                  mp::Failures& f) {
  size_t max_rows = 0;
  MP_NCCL(f, braidMoeGetInfo(moe, &max_rows, nullptr));
  const int tokens = c.max_tokens / 2, K = c.top_k, L = c.experts / n;
  std::vector<float> rows(size_t(c.max_tokens) * c.hidden, 1.0f), recv(max_rows * size_t(c.hidden)),
      out(rows.size());
  std::vector<int32_t> topk(size_t(tokens) * K), counts(size_t(n) * L);
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < K; ++k) topk[size_t(t) * K + k] = (t + k * 3 + rank) % c.experts;
  std::vector<float> weights(topk.size(), 0.5f);
  // A bad index on the next rank too (with more than two): each of two
  // failing ranks must report its own error, not the other's.
  const bool me = rank == bad_rank || (bad == Bad::Expert && n > 2 && rank == (bad_rank + 1) % n);
  if (me && bad == Bad::Expert) topk[size_t(tokens - 1) * K] = c.experts;

  // With zero-copy, the good ranks' rows and results are in the handle's
  // buffers, which the peers read in place when the call goes on.
  void* token_rows = rows.data();
  void* expert_out = recv.data();
  if (c.zero_copy_dispatch) {
    MP_NCCL(f, braidMoeGetDispatchBuffer(moe, &token_rows));
    if (token_rows) std::memcpy(token_rows, rows.data(), rows.size() * sizeof(float));
  }
  if (c.zero_copy) MP_NCCL(f, braidMoeGetCombineBuffer(moe, &expert_out));
  if (!token_rows || !expert_out) return;

  const Clock::time_point start = Clock::now();
  ncclResult_t r = braidMoeDispatch(moe, me && bad == Bad::NullTokens ? nullptr : token_rows, topk.data(),
                                    me && bad == Bad::NumTokens ? c.max_tokens + 1 : tokens,
                                    me && bad == Bad::NullRecv ? nullptr : recv.data(), counts.data(), nullptr,
                                    nullptr);
  if (bad == Bad::NullCombine) {
    if (r != ncclSuccess)
      f.fail(fmt::format("rank {}: the good dispatch before the bad combine: {}", rank, ncclGetLastError(comm)));
    r = braidMoeCombine(moe, me ? nullptr : expert_out, weights.data(), out.data(), nullptr);
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string why = ncclGetLastError(comm);
  const ncclResult_t want = me ? ncclInvalidArgument : ncclRemoteError;
  // A peer names the first rank whose word said the call failed: the bad
  // rank, or one that saw it fail and went on to its next call.
  const std::string says = me ? what_is_wrong(bad) : "the call failed on another rank";
  if (r != want || why.find(says) == std::string::npos)
    f.fail(fmt::format("rank {}, bad rank {}: got {} ({}), want {} mentioning '{}'", rank, bad_rank, int(r), why,
                       int(want), says));
  if (took > kPromptS)
    f.fail(fmt::format("rank {}: the failed call took {:.1f} s (timeout {} s): a peer waited for it", rank, took,
                       kTimeoutMs / 1000));
}

mp::RankBody bad_rank_body(const Case& c) {
  return [=](int rank, int n, ncclComm_t comm, mp::Failures& f) {
    braidMoeConfig_t cfg = config_of(c);
    cfg.timeoutMs = kTimeoutMs;
    braidMoe_t moe = nullptr;
    MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
    if (!moe) return;
    Expected x;
    int layer = 0;
    run_layer(c, rank, n, moe, layer++, f, &x);
    for (Bad bad : kAllBad) {
      const int bad_rank = (layer * 5 + 1) % n;
      one_bad_call(c, rank, n, moe, comm, bad, bad_rank, f);
      // The handle goes on: the next layer is exact everywhere.
      if (!run_layer(c, rank, n, moe, layer++, f, &x)) break;
    }
    braidMoeStats_t s{};
    MP_NCCL(f, braidMoeGetStats(moe, &s));
    // Each layer, and the good dispatch before the bad combine; no failed call.
    if (s.dispatches != uint64_t(layer) + 1 || s.combines != uint64_t(layer))
      f.fail(fmt::format("rank {}: {} dispatches and {} combines counted after {} layers", rank, s.dispatches,
                         s.combines, layer));
    MP_NCCL(f, braidMoeDestroy(moe));
  };
}

Case small_case(int n) {
  Case c;
  c.experts = 2 * n;
  c.top_k = 2;
  c.hidden = 8;
  c.max_tokens = 12;
  c.blocks = 2;
  c.dtype = ncclFloat32;
  return c;
}

}  // namespace

TEST_CASE("moe: a bad argument on one rank fails that call on every rank at once, and the next layer is exact",
          "[moe][threads][processes]") {
  for (int n : {2, 4}) {
    INFO("threads n=" << n);
    CHECK(mp::run_ranks_as_threads(n, bad_rank_body(small_case(n))) == 0);
  }
  INFO("processes n=3");
  CHECK(mp::run_ranks_as_processes(3, bad_rank_body(small_case(3)), 240) == 0);
}

TEST_CASE("moe zero-copy: a bad argument on one rank fails that call on every rank, and the next layer is exact",
          "[moe][threads]") {
  Case c = small_case(3);
  c.zero_copy = 1;
  c.zero_copy_dispatch = 1;
  CHECK(mp::run_ranks_as_threads(3, bad_rank_body(c)) == 0);
}

TEST_CASE("moe across hosts: a bad argument on one rank fails that call on every rank at once, over RMA",
          "[moe][processes][hosts]") {
  Case c = small_case(3);
  c.ranks_per_host = 1;
  const auto own_host = [](int rank) { setenv("BRAID_HOSTID", fmt::format("moe-bad-host-{}", rank).c_str(), 1); };
  CHECK(mp::run_ranks_as_processes(3, bad_rank_body(c), 240, own_host) == 0);
}

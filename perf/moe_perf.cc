// moe_perf: MoE dispatch and combine (braid/moe.h) against the usual
// PyTorch path, in the same run, nccl-tests style.
//
// Ranks are threads of this process (-t), or with --hosts H forked
// processes on H emulated hosts (BRAID_HOSTID; ranks r*H/n share one):
// between hosts, MoE puts over one-sided RMA and the baseline's sends go
// over the same sockets.  Each rank routes `--tokens`
// tokens of `--hidden` elements to `--topk` of `--experts` experts (a
// fraction `--skew` of the choices goes to the hot eighth of the experts).
// -r rounds alternate between the two paths, -n layers of each per round
// (after -w warm-up layers of both); a phase's time is its median round of
// the slowest rank's mean per call:
//   moe dispatch / combine        braidMoeDispatch / braidMoeCombine
//                                 (--zero-copy, braid/moe.h's flags: 1, the
//                                 dispatch output is the combine buffer and
//                                 the sources read their results in place;
//                                 2, the tokens sit in the dispatch buffer
//                                 and the owners read their rows in place)
//   a2a dispatch                  permute rows by expert, count exchange
//                                 (ncclAlltoAll of per-expert counts), then
//                                 all_to_all_single with uneven splits
//                                 (ncclSend/ncclRecv per peer in a group)
//   a2a combine                   the reverse all_to_all_single, then the
//                                 weighted sum back in token order
// The experts compute nothing (the identity), so both paths move and sum
// the same rows; -c checks every combined token exactly on both.
// Columns: time, GB/s of routed payload (rows routed to other ranks, all
// ranks together, per second), bytes on the wire per layer (all ranks; the
// MoE path's from braidMoeGetStats, the baseline's from its splits and
// counts) against the routed payload, signals per destination per call.
#include <getopt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "braid/moe.h"
#include "nccl.h"
#include "perf/device.h"
#include "perf/forked_ranks.h"
#include "perf/moe_perf.h"
#include "src/ops/float_formats.h"

namespace {

using namespace moe_perf;

const char* kUsage =
    "usage: moe_perf [-t ranks] [--tokens T] [--hidden H] [--topk K] [--experts E] [-d bf16|fp8|half|float]\n"
    "                [--skew S] [--capacity-factor F] [--tile R] [--layout expert|rank] [--blocks B]\n"
    "                [-n iters] [-w warmup] [-r rounds] [-c 0|1] [--zero-copy 0-3] [--hosts H | --device]\n";

bool parse(int argc, char** argv, Options* o) {
  static const option longs[] = {{"nranks", required_argument, nullptr, 't'},
                                 {"tokens", required_argument, nullptr, 'T'},
                                 {"hidden", required_argument, nullptr, 'H'},
                                 {"topk", required_argument, nullptr, 'k'},
                                 {"experts", required_argument, nullptr, 'E'},
                                 {"dtype", required_argument, nullptr, 'd'},
                                 {"skew", required_argument, nullptr, 's'},
                                 {"capacity-factor", required_argument, nullptr, 'F'},
                                 {"tile", required_argument, nullptr, 'R'},
                                 {"layout", required_argument, nullptr, 'l'},
                                 {"blocks", required_argument, nullptr, 'B'},
                                 {"iters", required_argument, nullptr, 'n'},
                                 {"warmup_iters", required_argument, nullptr, 'w'},
                                 {"rounds", required_argument, nullptr, 'r'},
                                 {"check", required_argument, nullptr, 'c'},
                                 {"hosts", required_argument, nullptr, 'P'},
                                 {"device", no_argument, nullptr, 'g'},
                                 {"zero-copy", required_argument, nullptr, 'z'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "t:T:H:k:E:d:s:F:R:l:B:n:w:r:c:P:gz:h", longs, nullptr)) != -1) {
    switch (ch) {
      case 't': o->nranks = atoi(optarg); break;
      case 'T': o->tokens = atoi(optarg); break;
      case 'H': o->hidden = atoi(optarg); break;
      case 'k': o->topk = atoi(optarg); break;
      case 'E': o->experts = atoi(optarg); break;
      case 's': o->skew = atof(optarg); break;
      case 'F': o->capacity_factor = float(atof(optarg)); break;
      case 'R': o->tile = atoi(optarg); break;
      case 'B': o->blocks = atoi(optarg); break;
      case 'n': o->iters = atoi(optarg); break;
      case 'w': o->warmup = atoi(optarg); break;
      case 'r': o->rounds = atoi(optarg); break;
      case 'c': o->check = atoi(optarg); break;
      case 'P': o->hosts = atoi(optarg); break;
      case 'g': o->device = 1; break;
      case 'z': o->zero_copy = atoi(optarg); break;
      case 'l':
        if (!strcmp(optarg, "expert")) o->layout = braidMoeExpertMajor;
        else if (!strcmp(optarg, "rank")) o->layout = braidMoeRankMajor;
        else return false;
        break;
      case 'd':
        if (!strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16")) o->dtype = ncclBfloat16;
        else if (!strcmp(optarg, "fp8") || !strcmp(optarg, "f8e4m3")) o->dtype = ncclFloat8e4m3;
        else if (!strcmp(optarg, "half")) o->dtype = ncclFloat16;
        else if (!strcmp(optarg, "float")) o->dtype = ncclFloat32;
        else return false;
        break;
      default: return false;
    }
  }
  return o->nranks >= 1 && o->tokens >= 1 && o->hidden >= 1 && o->topk >= 1 && o->experts >= o->topk &&
         o->experts % o->nranks == 0 && o->iters >= 1 && o->warmup >= 0 && o->skew >= 0 && o->skew <= 1 &&
         o->hosts >= 0 && o->hosts <= o->nranks && o->rounds >= 1 && o->rounds <= kMaxRounds &&
         !(o->device && o->hosts) && o->zero_copy >= 0 && o->zero_copy <= 3;
}

// The baseline's weighted sum, with the type switch outside the element
// loop and AVX2 where the CPU has it (no FMA), as braid's combine has them
// (src/ops/weighted_sum.cc): a fair comparison of the data paths.
#if defined(__x86_64__)
#define BASELINE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BASELINE_CLONES
#endif
BASELINE_CLONES void add_row(ncclDataType_t t, const char* row, float w, float* acc, int n) {
  switch (t) {
    case ncclFloat32:
      for (int i = 0; i < n; ++i) acc[i] += w * reinterpret_cast<const float*>(row)[i];
      break;
    case ncclFloat16:
      for (int i = 0; i < n; ++i) acc[i] += w * braid::half_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
      break;
    case ncclBfloat16:
      for (int i = 0; i < n; ++i) acc[i] += w * braid::bf16_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
      break;
    default:
      for (int i = 0; i < n; ++i) acc[i] += w * braid::e4m3_to_float(reinterpret_cast<const uint8_t*>(row)[i]);
      break;
  }
}
BASELINE_CLONES void store_row(ncclDataType_t t, const float* acc, char* row, int n) {
  switch (t) {
    case ncclFloat32: std::memcpy(row, acc, size_t(n) * sizeof(float)); break;
    case ncclFloat16:
      for (int i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(row)[i] = braid::float_to_half(acc[i]);
      break;
    case ncclBfloat16:
      for (int i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(row)[i] = braid::float_to_bf16(acc[i]);
      break;
    default:
      for (int i = 0; i < n; ++i) reinterpret_cast<uint8_t*>(row)[i] = braid::float_to_e4m3(acc[i]);
      break;
  }
}

void rank_main(const Options& o, const ncclUniqueId& id, int rank, RankResult& res) {
  const int n = o.nranks, L = o.experts / n, K = o.topk, H = o.hidden, eb = elem_bytes(o.dtype);
  const size_t row_bytes = size_t(H) * eb;
  ncclComm_t comm = nullptr;
  TRY(ncclCommInitRank(&comm, n, id, rank));
  float one = 1, sum = 0;
  auto barrier = [&] { return ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, nullptr); };

  const std::vector<int32_t> topk = route(o, rank);
  std::vector<char> tokens(size_t(o.tokens) * row_bytes);
  for (int t = 0; t < o.tokens; ++t)
    for (int h = 0; h < H; ++h) store(o.dtype, tokens.data(), size_t(t) * H + h, float((rank + t + h) % 7 - 3));
  std::vector<float> weights(topk.size(), 1.0f);

  // ---- braid MoE.
  braidMoeConfig_t cfg = config_of(o);
  braidMoe_t moe = nullptr;
  TRY(braidMoeCreate(comm, &cfg, &moe));
  size_t max_rows = 0;
  TRY(braidMoeGetInfo(moe, &max_rows, nullptr));
  std::vector<char> recv_memory(o.zero_copy & braidMoeZeroCopyCombine ? 0 : max_rows * row_bytes), out(tokens.size());
  char* recv = recv_memory.data();  // the experts' rows, then (the identity) their results
  if (o.zero_copy & braidMoeZeroCopyCombine) TRY(braidMoeGetCombineBuffer(moe, reinterpret_cast<void**>(&recv)));
  const char* sent = tokens.data();  // the same tokens every layer
  if (o.zero_copy & braidMoeZeroCopyDispatch) {
    char* buffer = nullptr;
    TRY(braidMoeGetDispatchBuffer(moe, reinterpret_cast<void**>(&buffer)));
    std::memcpy(buffer, tokens.data(), tokens.size());
    sent = buffer;
  }
  std::vector<int32_t> counts(size_t(n) * L);
  // One MoE layer, its two calls' times added to *d and *c.
  auto moe_layer = [&](double* d, double* c) -> ncclResult_t {
    LTRY(barrier());
    auto t0 = Clock::now();
    LTRY(braidMoeDispatch(moe, sent, topk.data(), o.tokens, recv, counts.data(), &res.dropped,
                          nullptr));
    *d += us_since(t0);
    LTRY(barrier());
    t0 = Clock::now();
    LTRY(braidMoeCombine(moe, recv, weights.data(), out.data(), nullptr));  // experts: the identity
    *c += us_since(t0);
    return ncclSuccess;
  };
  // ---- The PyTorch path: permute, count exchange, all_to_all_single x 2.
  std::vector<int32_t> order(topk.size());  // (token, k) pairs sorted by expert, tokens in order
  std::vector<int32_t> send_per_expert(size_t(o.experts), 0), recv_per_expert(size_t(o.experts));
  std::vector<char> send, back, a2a_recv, a2a_out(tokens.size());
  std::vector<size_t> send_off(size_t(n) + 1), recv_off(size_t(n) + 1);
  // One layer of the PyTorch path, its two halves' times added to *d and *c.
  auto a2a_layer = [&](double* d, double* c) -> ncclResult_t {
    LTRY(barrier());
    auto t0 = Clock::now();
    std::fill(send_per_expert.begin(), send_per_expert.end(), 0);
    for (int32_t e : topk) send_per_expert[size_t(e)]++;
    std::vector<int32_t> start(size_t(o.experts) + 1, 0);
    for (int e = 0; e < o.experts; ++e) start[size_t(e) + 1] = start[size_t(e)] + send_per_expert[size_t(e)];
    {
      std::vector<int32_t> fill(start.begin(), start.end() - 1);
      for (size_t j = 0; j < topk.size(); ++j) order[size_t(fill[size_t(topk[j])]++)] = int32_t(j);
    }
    send.resize(topk.size() * row_bytes);
    for (size_t j = 0; j < order.size(); ++j)
      std::memcpy(send.data() + j * row_bytes, tokens.data() + size_t(order[j] / K) * row_bytes, row_bytes);
    LTRY(ncclAlltoAll(send_per_expert.data(), recv_per_expert.data(), size_t(L), ncclInt32, comm, nullptr));
    for (int p = 0; p < n; ++p) {
      send_off[size_t(p) + 1] = size_t(start[size_t(p + 1) * L]);
      size_t rows = 0;
      for (int le = 0; le < L; ++le) rows += size_t(recv_per_expert[size_t(p) * L + le]);
      recv_off[size_t(p) + 1] = recv_off[size_t(p)] + rows;
    }
    a2a_recv.resize(recv_off[size_t(n)] * row_bytes);
    LTRY(ncclGroupStart());
    for (int p = 0; p < n; ++p) {
      LTRY(ncclSend(send.data() + send_off[size_t(p)] * row_bytes, (send_off[size_t(p) + 1] - send_off[size_t(p)]) * H,
                   o.dtype, p, comm, nullptr));
      LTRY(ncclRecv(a2a_recv.data() + recv_off[size_t(p)] * row_bytes,
                   (recv_off[size_t(p) + 1] - recv_off[size_t(p)]) * H, o.dtype, p, comm, nullptr));
    }
    LTRY(ncclGroupEnd());
    *d += us_since(t0);
    LTRY(barrier());
    t0 = Clock::now();
    back.resize(send.size());
    LTRY(ncclGroupStart());
    for (int p = 0; p < n; ++p) {  // experts: the identity, so a2a_recv goes back as is
      LTRY(ncclSend(a2a_recv.data() + recv_off[size_t(p)] * row_bytes,
                   (recv_off[size_t(p) + 1] - recv_off[size_t(p)]) * H, o.dtype, p, comm, nullptr));
      LTRY(ncclRecv(back.data() + send_off[size_t(p)] * row_bytes, (send_off[size_t(p) + 1] - send_off[size_t(p)]) * H,
                   o.dtype, p, comm, nullptr));
    }
    LTRY(ncclGroupEnd());
    std::vector<float> acc(size_t(o.tokens) * H, 0.0f);
    for (size_t j = 0; j < order.size(); ++j) {
      const size_t t = size_t(order[j] / K);
      add_row(o.dtype, back.data() + j * row_bytes, weights[size_t(order[j])], &acc[t * H], H);
    }
    for (int t = 0; t < o.tokens; ++t)
      store_row(o.dtype, &acc[size_t(t) * H], a2a_out.data() + size_t(t) * row_bytes, H);
    *c += us_since(t0);
    return ncclSuccess;
  };

  TRY(run_rounds(o, moe, moe_layer, a2a_layer, res));
  int capacity = 0;
  TRY(braidMoeGetInfo(moe, nullptr, &capacity));
  const size_t own_rows = send_off[size_t(rank) + 1] - send_off[size_t(rank)];
  finish_rank(o, rank, capacity, topk, tokens, counts, out, a2a_out, send.size() - own_rows * row_bytes, res);
  TRY(braidMoeDestroy(moe));
  TRY(ncclCommDestroy(comm));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (o.device) perf::prepare_thread_ranks();  // before CUDA starts
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  std::vector<RankResult> results(size_t(o.nranks));
  int rc = 0;
  if (o.hosts > 0) {  // forked ranks hand their results back through shared memory
    perf::SharedArray<RankResult> shared(size_t(o.nranks));
    if (!shared.data()) return 1;
    rc = perf::run_forked_ranks(o.nranks, o.hosts, "moe-perf-host-", [&](int r) {
      rank_main(o, id, r, shared[size_t(r)]);
      return 0;
    });
    std::copy(shared.data(), shared.data() + o.nranks, results.begin());
  } else {
#if !BRAID_MOE_PERF_CUDA
    if (o.device) {
      std::fputs("moe_perf: --device needs a build with CUDA and NCCL's nccl_device headers\n", stderr);
      return 2;
    }
#endif
    std::vector<std::thread> threads;
    for (int r = 0; r < o.nranks; ++r)
      threads.emplace_back([&, r] {
#if BRAID_MOE_PERF_CUDA
        if (o.device) return cuda_rank_main(o, id, r, results[size_t(r)]);
#endif
        rank_main(o, id, r, results[size_t(r)]);
      });
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < o.nranks; ++r)
    if (results[size_t(r)].error[0]) {
      std::fprintf(stderr, "rank %d: %s\n", r, results[size_t(r)].error);
      rc = 1;
    }
  if (rc) return rc;

  // A phase's time: per round the slowest rank's mean, then the median round.
  using PerRound = double (RankResult::*)[kMaxRounds];
  auto median_round = [&](PerRound m) {
    std::vector<double> rounds;
    for (int r = 0; r < o.rounds; ++r) {
      double slowest = 0;
      for (auto& res : results) slowest = std::max(slowest, (res.*m)[r]);
      rounds.push_back(slowest);
    }
    std::sort(rounds.begin(), rounds.end());
    return rounds[rounds.size() / 2];
  };
  auto max_of = [&](double RankResult::*m) {
    double v = 0;
    for (auto& r : results) v = std::max(v, r.*m);
    return v;
  };
  auto sum_of = [&](double RankResult::*m) {
    double v = 0;
    for (auto& r : results) v += r.*m;
    return v;
  };
  int64_t wrong = 0, dropped = 0;
  for (auto& r : results) wrong += r.wrong, dropped += r.dropped;
  const char* type = o.dtype == ncclBfloat16 ? "bf16" : o.dtype == ncclFloat8e4m3 ? "fp8e4m3"
                     : o.dtype == ncclFloat16 ? "half" : "float";
  const std::string where = o.hosts > 0 ? "processes on " + std::to_string(o.hosts) + " emulated hosts"
                            : o.device ? "threads on CUDA devices" : "threads";
  std::printf("# moe_perf: %d ranks (%s), %d tokens/rank, hidden %d, top-%d, %d experts, %s, skew %.2f, "
              "capacity %s, tile %d, %s-major, %s block(s)/rank, %s, %d rounds of %d layers of each path, "
              "interleaved (+%d warmup)\n",
              o.nranks, where.c_str(), o.tokens, o.hidden, o.topk, o.experts, type, o.skew,
              o.capacity_factor > 0 ? ("factor " + std::to_string(o.capacity_factor)).c_str() : "worst case", o.tile,
              o.layout == braidMoeExpertMajor ? "expert" : "rank",
              o.blocks ? std::to_string(o.blocks).c_str() : "default",
              o.zero_copy == 3 ? "zero-copy dispatch and combine" : o.zero_copy == 2 ? "zero-copy dispatch"
              : o.zero_copy == 1 ? "zero-copy combine" : "no zero-copy", o.rounds, o.iters, o.warmup);
  std::printf("# time: the median round of the slowest rank's mean per call; GB/s: routed payload (rows to other "
              "ranks, all ranks) per second\n");
  const double payload = sum_of(&RankResult::routed_remote_bytes) / 2;  // per direction
  std::printf("# %-26s %12s %10s %16s %16s %10s\n", "phase", "time(us)", "GB/s", "wire B/layer", "payload B/layer",
              "wire/payld");
  auto row = [&](const char* name, double us, double wire) {
    std::printf("  %-26s %12.1f %10.3f %16.0f %16.0f %10.4f\n", name, us, payload / (us * 1e3), wire,
                2 * payload, wire / (2 * payload > 0 ? 2 * payload : 1));
  };
  const double moe_d = median_round(&RankResult::moe_dispatch_us), moe_c = median_round(&RankResult::moe_combine_us);
  const double a2a_d = median_round(&RankResult::a2a_dispatch_us), a2a_c = median_round(&RankResult::a2a_combine_us);
  row("moe dispatch", moe_d, sum_of(&RankResult::moe_wire));
  row("moe combine", moe_c, sum_of(&RankResult::moe_wire));
  row("a2a dispatch (counts+a2av)", a2a_d, sum_of(&RankResult::a2a_wire));
  row("a2a combine (a2av+sum)", a2a_c, sum_of(&RankResult::a2a_wire));
  std::printf("# wire and payload columns: one whole layer (dispatch + combine), on every row\n");
  std::printf("# moe: %.1f signals per destination per call (one per local expert; per-row signalling would send "
              "%.1f), %.1f fences per call (one per destination)\n",
              max_of(&RankResult::signals_per_dest),
              double(o.tokens) * o.topk / o.nranks, max_of(&RankResult::fences_per_call));
  std::printf("# dispatch+combine: moe %.1f us, all_to_all_single baseline %.1f us, speedup %.2fx\n", moe_d + moe_c,
              a2a_d + a2a_c, (a2a_d + a2a_c) / (moe_d + moe_c));
  std::printf("# rows dropped past capacity (all ranks, last call): %lld\n", (long long)dropped);
  std::printf("# #wrong: %lld%s\n", (long long)wrong, o.check ? "" : " (not checked: -c 0)");
  return wrong ? 1 : 0;
}

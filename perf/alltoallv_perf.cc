// alltoallv_perf is nccl-tests' alltoallv_perf (alltoallv_nccl.cc: its
// flags, table and NCCL_TESTS_ALLTOALLV_* variables).  With --ab it is
// braid's A/B measurement instead (this file):
// alltoallv_perf --ab: braid's AlltoAllv whose counts live in memory
// (braid/alltoallv.h) against the PyTorch path for all_to_all_single with
// uneven splits, moving the same elements, in one run, interleaved:
//   braid      braidAlltoAllv(send, sendCounts, recv, recvCounts)
//   baseline   the count exchange (ncclAlltoAll of the int64 counts), then
//              ncclSend/ncclRecv per peer in a group (what ProcessGroupNCCL
//              issues for all_to_all_single, after the counts reached the CPU)
// Ranks are forked processes (-t), rank r on emulated host r * H / t
// (--hosts H, BRAID_HOSTID; default 1: one host).  Per size S (bytes a rank
// may send one peer, -b/-e/-f), each call's counts are drawn again: every
// (sender, receiver) pair sends a uniform 0..S bytes (float32 elements).
// --rounds (or -r) rounds of -n calls alternate between the two paths (after -w warm-up
// calls of each); a round's time is the slowest rank's mean.  The table
// gives the median round of each, GB/s of the elements a rank sends other
// ranks, and braid/baseline.  Every received element and count is checked.
//   alltoallv_perf --ab [-t ranks] [--hosts H] [-b min] [-e max] [-f factor] [-n iters] [-w warmup]
//                  [--rounds rounds]
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/alltoallv.h"
#include "nccl.h"
#include "perf/forked_ranks.h"
#include "perf/options.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int nranks = 4, hosts = 1;
  perf::Sweep sweep{.min_bytes = 1 << 10, .max_bytes = 1 << 20};
};

const char* kUsage =
    "usage: alltoallv_perf --ab [-t ranks] [--hosts H] [-b min] [-e max] [-f factor] [-n iters] [-w warmup] "
    "[--rounds rounds]\n"
    "       alltoallv_perf <nccl-tests flags> (nccl-tests' alltoallv_perf)\n";

bool parse(int argc, char** argv, Options* o) {
  static const option longs[] = {
      {"hosts", required_argument, nullptr, 'H'}, {"rounds", required_argument, nullptr, 'r'}, {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "t:b:e:f:n:w:r:", longs, nullptr)) != -1) {
    switch (c) {
      case 't':
        o->nranks = std::atoi(optarg);
        break;
      case 'H':
        o->hosts = std::atoi(optarg);
        break;
      default:
        if (!perf::sweep_flag(c, optarg, &o->sweep)) return false;
    }
  }
  return o->nranks >= 2 && o->hosts >= 1 && o->hosts <= o->nranks && o->sweep.valid() && o->sweep.min_bytes >= 4;
}

struct Row {
  size_t bytes;
  double braid_us, base_us, sent_bytes;  // sent_bytes: mean per rank per call, to other ranks
  int64_t wrong;
};

using Shared = perf::SharedRows<Row>;

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
int64_t count_of(int src, int dst, uint64_t call, int64_t max_count) {
  return int64_t(mix(call * 1000003 + uint64_t(src) * 131 + uint64_t(dst)) % uint64_t(max_count + 1));
}
float value_of(int src, int dst, uint64_t call, int64_t i) { return float((src * 31 + dst * 7 + call * 3 + i) % 4093); }

#define TRY(call) PERF_RANK_TRY(out->error, rank, call)

int rank_main(const Options& o, const ncclUniqueId& id, int rank, Shared* out) {
  const int n = o.nranks;
  ncclComm_t comm = nullptr;
  TRY(ncclCommInitRank(&comm, n, id, rank));
  double mine = 0, slowest = 0;
  int row = 0;
  for (size_t bytes = o.sweep.min_bytes; bytes <= o.sweep.max_bytes && row < 64;
       bytes *= size_t(o.sweep.factor), ++row) {
    const int64_t max_count = int64_t(bytes / sizeof(float));
    braidAlltoAllv_t a2a = nullptr;
    TRY(braidAlltoAllvCreate(comm, ncclFloat32, size_t(max_count), 0, &a2a));
    std::vector<float> send(size_t(n) * max_count), recv(send.size());
    std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
    std::vector<size_t> send_at(size_t(n) + 1), recv_at(size_t(n) + 1);
    uint64_t call = 0;
    double sent = 0;
    int64_t wrong = 0;
    auto fill = [&] {  // this call's counts and elements
      ++call;
      send_at[0] = 0;
      for (int d = 0; d < n; ++d) {
        send_counts[size_t(d)] = count_of(rank, d, call, max_count);
        for (int64_t i = 0; i < send_counts[size_t(d)]; ++i)
          send[send_at[size_t(d)] + size_t(i)] = value_of(rank, d, call, i);
        send_at[size_t(d) + 1] = send_at[size_t(d)] + size_t(send_counts[size_t(d)]);
        if (d != rank) sent += double(send_counts[size_t(d)]) * sizeof(float);
      }
    };
    auto check = [&] {
      size_t at = 0;
      for (int s = 0; s < n; ++s) {
        const int64_t want = count_of(s, rank, call, max_count);
        wrong += recv_counts[size_t(s)] != want;
        for (int64_t i = 0; i < want && at + size_t(i) < recv.size(); ++i)
          wrong += recv[at + size_t(i)] != value_of(s, rank, call, i);
        at += size_t(want);
      }
    };
    auto braid_call = [&]() -> ncclResult_t {
      return braidAlltoAllv(a2a, send.data(), send_counts.data(), recv.data(), recv_counts.data(), nullptr);
    };
    auto baseline_call = [&]() -> ncclResult_t {
      ncclResult_t r = ncclAlltoAll(send_counts.data(), recv_counts.data(), 1, ncclInt64, comm, nullptr);
      if (r != ncclSuccess) return r;
      recv_at[0] = 0;  // the splits, now on the CPU
      for (int s = 0; s < n; ++s) recv_at[size_t(s) + 1] = recv_at[size_t(s)] + size_t(recv_counts[size_t(s)]);
      ncclGroupStart();
      for (int p = 0; p < n; ++p) {
        ncclSend(send.data() + send_at[size_t(p)], size_t(send_counts[size_t(p)]), ncclFloat32, p, comm, nullptr);
        ncclRecv(recv.data() + recv_at[size_t(p)], size_t(recv_counts[size_t(p)]), ncclFloat32, p, comm, nullptr);
      }
      return ncclGroupEnd();
    };
    std::vector<double> braid_rounds, base_rounds;
    for (int round = -1; round < o.sweep.rounds; ++round) {  // -1: the warm-up of both
      for (int path = 0; path < 2; ++path) {
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));  // line up
        const int iters = round < 0 ? o.sweep.warmup : o.sweep.iters;
        double busy = 0;
        for (int i = 0; i < iters; ++i) {
          fill();
          const auto t0 = Clock::now();
          TRY(path == 0 ? braid_call() : baseline_call());
          busy += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          check();
        }
        mine = busy / std::max(iters, 1);
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));
        if (round >= 0) (path == 0 ? braid_rounds : base_rounds).push_back(slowest);
      }
    }
    TRY(braidAlltoAllvDestroy(a2a));
    int64_t all_wrong = 0;
    TRY(ncclAllReduce(&wrong, &all_wrong, 1, ncclInt64, ncclSum, comm, nullptr));
    if (rank == 0)
      out->rows[row] =
          Row{bytes, perf::median(braid_rounds), perf::median(base_rounds), sent / double(call), all_wrong};
  }
  TRY(ncclCommDestroy(comm));
  return 0;
}

int ab_main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  perf::SharedArray<Shared> results(1);
  auto rank = [&](const ncclUniqueId& id, int r, Shared* out) { return rank_main(o, id, r, out); };
  const int rc = perf::run_ranks_for_rows(o.nranks, o.hosts, "a2av-perf-host-", -1, 0, results, rank);
  if (!results.data()) return 1;
  std::printf(
      "# alltoallv_perf: %d ranks (processes on %d emulated hosts), float32, each pair 0..S bytes per call; "
      "%d rounds of %d calls (+%d warmup), median round\n",
      o.nranks, o.hosts, o.sweep.rounds, o.sweep.iters, o.sweep.warmup);
  std::printf("# %12s %14s %12s %10s %12s %10s %12s %8s\n", "S(B)", "sent B/call", "braid(us)", "braid GB/s",
              "base(us)", "base GB/s", "braid/base", "#wrong");
  const int64_t wrong = perf::print_rows(*results.data(), [](const Row& row) {
    std::printf("  %12zu %14.0f %12.1f %10.3f %12.1f %10.3f %12.2f %8lld\n", row.bytes, row.sent_bytes, row.braid_us,
                row.sent_bytes / (row.braid_us * 1e3), row.base_us, row.sent_bytes / (row.base_us * 1e3),
                row.braid_us / row.base_us, (long long)row.wrong);
  });
  return rc || wrong ? 1 : 0;
}

}  // namespace

namespace perf {
int alltoallv_nccl_tests_main(int argc, char** argv);
}

int main(int argc, char** argv) {
  // --ab (anywhere): braid's A/B measurement; otherwise nccl-tests' tool.
  std::vector<char*> rest;
  bool ab = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ab") == 0) ab = true;
    else rest.push_back(argv[i]);
  }
  if (!ab) return perf::alltoallv_nccl_tests_main(argc, argv);
  rest.push_back(nullptr);
  return ab_main(int(rest.size()) - 1, rest.data());
}

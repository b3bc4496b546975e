// gin_hosts_perf: GIN of NCCL's device API between hosts, over the
// communicator's net (InfiniBand verbs or an NCCL net plugin, through
// braid's net transport: src/runtime/gin_pipes.h) against GIN's own TCP
// streams (src/devapi/gin_tcp.h), in one run, interleaved.
//
// One communicator, two devComms on it: one made with BRAID_GIN_NET=auto
// (the net: run with BRAID_TRANSPORT=ib, or =plugin and NCCL_NET_PLUGIN),
// one with BRAID_GIN_NET=socket.  A round is an AlltoAll between hosts as
// a kernel built against NCCL 2.28.9's headers posts it, the CPU in the
// kernel's place (tests/mp/gin_host_poster.h): every rank puts S bytes to
// every rank of the other hosts with a signal increment on the round's own
// signal, then waits until that signal counts every such rank.  Per size,
// -r rounds of -n iterations alternate between the two (after -w warm-up
// iterations of each); a round's time is the slowest rank's mean.  The
// table gives the median round of each, GB/s of what a rank sends, and
// net/tcp.  Every received byte is checked after each round.  --gap US
// sleeps US microseconds before each iteration, outside its time: GIN
// after a spell of compute, when the proxies and receivers have gone idle.
//
// Ranks are forked processes: -t of them on --hosts H emulated hosts of
// this machine (BRAID_HOSTID; default 2), or, with --first R --local L,
// ranks R..R+L-1 of a job of -t ranks across real hosts whose other ranks
// run elsewhere (NCCL_COMM_ID names the root; rank r on host r / L).
//   gin_hosts_perf [-t ranks] [--hosts H | --first R --local L] [--gap US] [-b min] [-e max] [-f factor]
//                  [-n iters] [-w warmup] [-r rounds]
#include <getopt.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"
#include "perf/forked_ranks.h"
#include "perf/options.h"
#include "tests/mp/gin_host_poster.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int nranks = 2, hosts = 2;
  int first = -1, local = 0;  // --first/--local: this machine's part of a job across hosts
  int gap_us = 0;
  perf::Sweep sweep{.min_bytes = 4 << 10, .max_bytes = 4 << 20, .factor = 4};
  int host_of(int rank) const { return first >= 0 ? rank / local : rank * hosts / nranks; }
};

const char* kUsage =
    "usage: gin_hosts_perf [-t ranks] [--hosts H | --first R --local L] [--gap US] [-b min] [-e max] [-f factor] "
    "[-n iters] [-w warmup] [-r rounds]\n";

bool parse(int argc, char** argv, Options* o) {
  static const option longs[] = {{"hosts", required_argument, nullptr, 'H'},
                                 {"first", required_argument, nullptr, 'F'},
                                 {"local", required_argument, nullptr, 'L'},
                                 {"gap", required_argument, nullptr, 'G'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "t:b:e:f:n:w:r:", longs, nullptr)) != -1) {
    switch (c) {
      case 't': o->nranks = std::atoi(optarg); break;
      case 'H': o->hosts = std::atoi(optarg); break;
      case 'F': o->first = std::atoi(optarg); break;
      case 'L': o->local = std::atoi(optarg); break;
      case 'G': o->gap_us = std::atoi(optarg); break;
      default:
        if (!perf::sweep_flag(c, optarg, &o->sweep)) return false;
    }
  }
  if (o->first >= 0 && (o->local < 1 || o->first % o->local || o->first + o->local > o->nranks)) return false;
  return o->nranks >= 2 && o->gap_us >= 0 && o->hosts >= 2 && o->hosts <= o->nranks && o->sweep.valid() &&
         o->host_of(o->nranks - 1) > 0;  // some rank is on another host
}

enum Path { kNet, kTcp, kPaths };
const char* const kGinNet[kPaths] = {"auto", "socket"};

struct Row {
  size_t bytes;
  double us[kPaths];
  int64_t wrong;
};
using Shared = perf::SharedRows<Row>;

#define TRY(call) PERF_RANK_TRY(out->error, rank, call)

// A byte rank `from` puts to rank `to` in a round of path `path`.
unsigned char pattern(size_t i, int from, int to, int salt) {
  return static_cast<unsigned char>(i * 31 + from * 5 + to * 3 + salt);
}

int rank_main(const Options& o, const ncclUniqueId& id, int rank, Shared* out) {
  const int n = o.nranks;
  std::vector<int> others;  // the ranks of other hosts
  for (int r = 0; r < n; ++r)
    if (o.host_of(r) != o.host_of(rank)) others.push_back(r);
  ncclComm_t comm = nullptr;
  TRY(ncclCommInitRank(&comm, n, id, rank));
  const size_t max = o.sweep.max_bytes * size_t(n);
  char *send = nullptr, *recv = nullptr;
  TRY(ncclMemAlloc(reinterpret_cast<void**>(&send), max));
  TRY(ncclMemAlloc(reinterpret_cast<void**>(&recv), max));
  ncclWindow_t send_win = nullptr, recv_win = nullptr;
  TRY(ncclCommWindowRegister(comm, send, max, &send_win, NCCL_WIN_COLL_SYMMETRIC));
  TRY(ncclCommWindowRegister(comm, recv, max, &recv_win, NCCL_WIN_COLL_SYMMETRIC));
  int sizes = 0;
  for (size_t s = o.sweep.min_bytes; s <= o.sweep.max_bytes; s *= size_t(o.sweep.factor)) ++sizes;
  ncclDevComm dev[kPaths] = {};
  for (int p = 0; p < kPaths; ++p) {
    setenv("BRAID_GIN_NET", kGinNet[p], 1);
    ncclDevCommRequirements reqs = {};
    reqs.ginSignalCount = sizes * (o.sweep.rounds + 1) * std::max(o.sweep.iters, o.sweep.warmup);
    TRY(ncclDevCommCreate(comm, &reqs, &dev[p]));
  }
  uint32_t next_signal[kPaths] = {};
  // One round on path p: S bytes to every other host's rank, then the wait
  // for theirs.
  auto gin_round = [&](int p, size_t bytes) {
    auto* ctx = static_cast<ncclGinProxyGpuCtx_t*>(dev[p].ginHandles[0]);
    const uint16_t sig = uint16_t(dev[p].ginSignalBase + next_signal[p]++);
    const int op = ncclGinProxyOpPut | ncclGinProxyOpWithSignalInc;
    for (int peer : others) {
      const auto g = gin_host::build_gfd(op, bytes, 4096ull * send_win->ginOffset4K + size_t(peer) * bytes,
                                         gin_host::handle(send_win), 4096ull * recv_win->ginOffset4K + size_t(rank) * bytes,
                                         gin_host::handle(recv_win), 0, sig, 0);
      if (!gin_host::post(ctx, peer, g)) return false;
    }
    return gin_host::wait_at_least(&ctx->signals[sig], others.size());
  };
  double slowest = 0, mine = 0;
  int row = 0;
  for (size_t bytes = o.sweep.min_bytes; bytes <= o.sweep.max_bytes && row < 64;
       bytes *= size_t(o.sweep.factor), ++row) {
    std::vector<double> rounds[kPaths];
    int64_t wrong = 0;
    for (int round = -1; round < o.sweep.rounds; ++round) {  // round -1: the warm-up of both
      for (int p = 0; p < kPaths; ++p) {
        const int salt = round * 2 + p + 7;  // a new pattern per round and path, so a stale byte shows
        for (int peer : others)
          for (size_t i = 0; i < bytes; ++i) send[size_t(peer) * bytes + i] = char(pattern(i, rank, peer, salt));
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));  // line up
        const int iters = round < 0 ? o.sweep.warmup : o.sweep.iters;
        double busy_us = 0;
        for (int i = 0; i < iters; ++i) {
          if (o.gap_us) usleep(useconds_t(o.gap_us));
          const auto t0 = Clock::now();
          if (!gin_round(p, bytes)) {
            out->error.set(rank, p == kNet ? "a GIN round over the net: no credit, or a signal that never came"
                                           : "a GIN round over TCP streams: no credit, or a signal that never came",
                           ncclInternalError);
            return 1;
          }
          busy_us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        }
        mine = busy_us / std::max(iters, 1);
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));
        for (int from : others)
          for (size_t i = 0; i < bytes && iters > 0; ++i)
            wrong += static_cast<unsigned char>(recv[size_t(from) * bytes + i]) != pattern(i, from, rank, salt);
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));  // all checked
        if (round >= 0) rounds[p].push_back(slowest);
      }
    }
    int64_t all_wrong = 0;
    TRY(ncclAllReduce(&wrong, &all_wrong, 1, ncclInt64, ncclSum, comm, nullptr));
    if (rank == 0) out->rows[row] = Row{bytes, {perf::median(rounds[kNet]), perf::median(rounds[kTcp])}, all_wrong};
  }
  ncclResult_t async = ncclSuccess;
  TRY(ncclCommGetAsyncError(comm, &async));
  TRY(async);
  for (auto& d : dev) TRY(ncclDevCommDestroy(comm, &d));
  TRY(ncclCommWindowDeregister(comm, send_win));
  TRY(ncclCommWindowDeregister(comm, recv_win));
  TRY(ncclMemFree(send));
  TRY(ncclMemFree(recv));
  TRY(ncclCommDestroy(comm));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  perf::SharedArray<Shared> results(1);
  auto rank = [&](const ncclUniqueId& id, int r, Shared* out) { return rank_main(o, id, r, out); };
  const int rc = perf::run_ranks_for_rows(o.nranks, o.hosts, "gin-hosts-perf-", o.first, o.local, results, rank);
  if (!results.data()) return 1;
  if (o.first > 0) return rc;  // rank 0's machine prints the table
  const char* transport = std::getenv("BRAID_TRANSPORT");
  std::printf(
      "# gin_hosts_perf: %d ranks on %d hosts (%s), BRAID_TRANSPORT=%s; every rank puts to every rank of the other "
      "hosts; %d rounds of %d iters (+%d warmup), %d us idle before each, median round; GB/s of what a rank sends\n",
      o.nranks, o.first >= 0 ? o.nranks / o.local : o.hosts, o.first >= 0 ? "real" : "emulated",
      transport ? transport : "auto", o.sweep.rounds, o.sweep.iters, o.sweep.warmup, o.gap_us);
  std::printf("# %12s %12s %10s %12s %10s %9s %8s\n", "size(B)", "net(us)", "net GB/s", "tcp(us)", "tcp GB/s",
              "net/tcp", "#wrong");
  int others = 0;  // rank 0's ranks of other hosts
  for (int r = 0; r < o.nranks; ++r) others += o.host_of(r) != o.host_of(0);
  const int64_t wrong = perf::print_rows(*results.data(), [&](const Row& row) {
    const double sent = double(row.bytes) * others;
    std::printf("  %12zu %12.1f %10.3f %12.1f %10.3f %9.2f %8lld\n", row.bytes, row.us[kNet],
                sent / (row.us[kNet] * 1e3), row.us[kTcp], sent / (row.us[kTcp] * 1e3), row.us[kNet] / row.us[kTcp],
                (long long)row.wrong);
  });
  return rc || wrong ? 1 : 0;
}

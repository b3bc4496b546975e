// rma_perf: one-sided puts (ncclPutSignal + ncclWaitSignal, NCCL 2.29)
// against two-sided sends (ncclSend/ncclRecv) moving the same bytes, in one
// run, interleaved.
//
// Ranks are forked processes (-t), rank r on emulated host r * H / t
// (--hosts H, BRAID_HOSTID; default: every rank a host of its own, so that
// everything crosses sockets).  In one iteration every rank moves S bytes
// to rank + 1 and gets S bytes from rank - 1:
//   put    S / p-byte puts (-p, the put size), each raising a signal, then
//          a wait for the S / p signals from rank - 1, then a barrier-free
//          next iteration (the signals order them);
//   send   one ncclSend of S bytes and one ncclRecv, in a group.
// Per size, -r rounds of -n iterations alternate between the two (after -w
// warm-up iterations of each); each round's time is the slowest rank's
// mean.  The table gives the median round of each, GB/s of S per rank, and
// put/send.  Every received byte is checked after each round.
//   rma_perf [-t ranks] [--hosts H] [-b min] [-e max] [-f factor] [-p put bytes] [-n iters] [-w warmup] [-r rounds]
#include <getopt.h>

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

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int nranks = 2, hosts = 0;  // hosts 0: one per rank
  size_t put_bytes = 64 << 10;
  perf::Sweep sweep{.min_bytes = 64 << 10, .max_bytes = 16 << 20};
};

const char* kUsage =
    "usage: rma_perf [-t ranks] [--hosts H] [-b min] [-e max] [-f factor] [-p put bytes] [-n iters] [-w warmup] "
    "[-r rounds]\n";

bool parse(int argc, char** argv, Options* o) {
  static const option longs[] = {{"hosts", required_argument, nullptr, 'H'}, {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "t:b:e:f:p:n:w:r:", longs, nullptr)) != -1) {
    switch (c) {
      case 't':
        o->nranks = std::atoi(optarg);
        break;
      case 'H':
        o->hosts = std::atoi(optarg);
        break;
      case 'p':
        if (!perf::parse_size(optarg, &o->put_bytes)) return false;
        break;
      default:
        if (!perf::sweep_flag(c, optarg, &o->sweep)) return false;
    }
  }
  if (o->hosts == 0) o->hosts = o->nranks;
  return o->nranks >= 2 && o->hosts >= 1 && o->hosts <= o->nranks && o->sweep.valid() && o->put_bytes >= 1;
}

// Rank 0's table row per size: the median round of each path, in microseconds.
struct Row {
  size_t bytes;
  double put_us, send_us;
  int64_t wrong;
};

using Shared = perf::SharedRows<Row>;

#define TRY(call) PERF_RANK_TRY(out->error, rank, call)

int rank_main(const Options& o, const ncclUniqueId& id, int rank, Shared* out) {
  const int n = o.nranks, next = (rank + 1) % n, prev = (rank + n - 1) % n;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm = nullptr;
  TRY(ncclCommInitRankConfig(&comm, n, id, rank, &config));
  void* window_memory = nullptr;
  ncclWindow_t window = nullptr;
  TRY(ncclMemAlloc(&window_memory, o.sweep.max_bytes));
  TRY(ncclCommWindowRegister(comm, window_memory, o.sweep.max_bytes, &window, NCCL_WIN_DEFAULT));
  std::vector<unsigned char> src(o.sweep.max_bytes), dst(o.sweep.max_bytes);
  auto* landed = static_cast<unsigned char*>(window_memory);
  double slowest = 0, mine = 0;
  int row = 0;
  for (size_t bytes = o.sweep.min_bytes; bytes <= o.sweep.max_bytes && row < 64;
       bytes *= size_t(o.sweep.factor), ++row) {
    const size_t piece = std::min(o.put_bytes, bytes);
    const int puts = int((bytes + piece - 1) / piece);
    auto put_iteration = [&]() -> ncclResult_t {
      for (int i = 0; i < puts; ++i) {
        const size_t at = size_t(i) * piece, len = std::min(piece, bytes - at);
        ncclResult_t r = ncclPutSignal(src.data() + at, len, ncclUint8, next, window, at, 0, 0, 0, comm, nullptr);
        if (r != ncclSuccess) return r;
      }
      ncclWaitSignalDesc_t wait{puts, prev, 0, 0};
      return ncclWaitSignal(1, &wait, comm, nullptr);
    };
    auto send_iteration = [&]() -> ncclResult_t {
      ncclGroupStart();
      ncclSend(src.data(), bytes, ncclUint8, next, comm, nullptr);
      ncclRecv(dst.data(), bytes, ncclUint8, prev, comm, nullptr);
      return ncclGroupEnd();
    };
    std::vector<double> put_rounds, send_rounds;
    int64_t wrong = 0;
    for (int round = -1; round < o.sweep.rounds; ++round) {  // round -1: the warm-up of both
      for (int path = 0; path < 2; ++path) {
        // A new pattern per round and path, so a stale byte shows.
        const unsigned char salt = static_cast<unsigned char>(round * 2 + path + 7);
        for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 31 + rank * 5 + salt);
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));  // line up
        const int iters = round < 0 ? o.sweep.warmup : o.sweep.iters;
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) TRY(path == 0 ? put_iteration() : send_iteration());
        mine = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / std::max(iters, 1);
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));
        const unsigned char* got = path == 0 ? landed : dst.data();
        for (size_t i = 0; i < bytes && iters > 0; ++i)
          wrong += got[i] != static_cast<unsigned char>(i * 31 + prev * 5 + salt);
        // Nobody puts the next round's bytes before everyone checked these.
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));
        if (round >= 0) (path == 0 ? put_rounds : send_rounds).push_back(slowest);
      }
    }
    int64_t all_wrong = 0;
    TRY(ncclAllReduce(&wrong, &all_wrong, 1, ncclInt64, ncclSum, comm, nullptr));
    if (rank == 0) out->rows[row] = Row{bytes, perf::median(put_rounds), perf::median(send_rounds), all_wrong};
  }
  TRY(ncclCommWindowDeregister(comm, window));
  TRY(ncclMemFree(window_memory));
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
  const int rc = perf::run_ranks_for_rows(o.nranks, o.hosts, "rma-perf-host-", -1, 0, results, rank);
  if (!results.data()) return 1;
  std::printf(
      "# rma_perf: %d ranks (processes on %d emulated hosts), each to rank + 1; puts of %zu bytes; "
      "%d rounds of %d iters (+%d warmup), median round\n",
      o.nranks, o.hosts, o.put_bytes, o.sweep.rounds, o.sweep.iters, o.sweep.warmup);
  std::printf("# %12s %8s %12s %10s %12s %10s %10s %8s\n", "size(B)", "puts", "put(us)", "put GB/s", "send(us)",
              "send GB/s", "put/send", "#wrong");
  const int64_t wrong = perf::print_rows(*results.data(), [&](const Row& row) {
    const size_t piece = std::min(o.put_bytes, row.bytes);
    std::printf("  %12zu %8zu %12.1f %10.3f %12.1f %10.3f %10.2f %8lld\n", row.bytes, (row.bytes + piece - 1) / piece,
                row.put_us, double(row.bytes) / (row.put_us * 1e3), row.send_us,
                double(row.bytes) / (row.send_us * 1e3), row.put_us / row.send_us, (long long)row.wrong);
  });
  return rc || wrong ? 1 : 0;
}

// gin_perf: an AlltoAll over GIN (a device communicator's GPU-initiated
// puts, served by braid's proxy on the host backend), as a client of NCCL
// 2.28.9's device headers and as one of 2.30's, against braid's
// ncclAlltoAll on the same buffers, and against this host's copy rate, in
// one run, interleaved.
//
// Ranks are threads of this process (-t).  A GIN round is what NCCL's
// example 02_gin_alltoall_pure does, with the CPU in the kernel's place
// (tests/mp/gin_host_poster.h, and devapi_v230_client.h for 2.30): every
// rank puts S bytes to every rank (itself included) with a signal
// increment, then waits for its own signal to count every rank.  Each
// round has its own signal, so no round waits on another's.  The 2.30
// client's devComm has -c contexts, and puts to rank p go on context
// p % c, so every rank's signal counts on its own context.  -a picks the
// clients: 228, 230 or both (two devComms per rank, whose proxies the
// communicator's one GIN progress thread steps).  The ncclAlltoAll round
// moves the same bytes.  Per size, -r rounds of -n iterations alternate
// among the three; each round's time is the slowest rank's mean, and the
// table gives the median round of each, the ratios, and the bandwidths
// against the copy rate C: one thread's memcpy of n x S bytes, measured in
// the same rounds (a2a/gin and gin GB/s are of the 2.28.9 client where it
// runs, else of the 2.30 one).
//   gin_perf [-t ranks] [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-r rounds] [-c contexts]
//            [-a 228|230|both]
#include <getopt.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "nccl.h"
#include "perf/options.h"
#include "tests/mp/devapi_v230_client.h"
#include "tests/mp/gin_host_poster.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int nranks = 4, contexts = 2;
  bool v228 = true, v230 = false;
  perf::Sweep sweep;
};

bool parse(int argc, char** argv, Options* o) {
  int c;
  while ((c = getopt(argc, argv, "t:b:e:f:n:w:r:c:a:")) != -1) {
    switch (c) {
      case 't':
        o->nranks = std::atoi(optarg);
        break;
      case 'c':
        o->contexts = std::atoi(optarg);
        break;
      case 'a':
        o->v228 = std::strcmp(optarg, "230") != 0;
        o->v230 = std::strcmp(optarg, "228") != 0;
        if (std::strcmp(optarg, "228") && std::strcmp(optarg, "230") && std::strcmp(optarg, "both")) return false;
        break;
      default:
        if (!perf::sweep_flag(c, optarg, &o->sweep)) return false;
    }
  }
  return o->nranks > 0 && o->sweep.valid() && o->contexts > 0 && o->contexts <= 32;
}

void die(const char* what, ncclResult_t r) {
  std::fprintf(stderr, "gin_perf: %s: %s (%s)\n", what, ncclGetErrorString(r), ncclGetLastError(nullptr));
  std::exit(1);
}
#define CHECK_NCCL(call)                   \
  do {                                     \
    ncclResult_t r_ = (call);              \
    if (r_ != ncclSuccess) die(#call, r_); \
  } while (0)

enum Path { kGin228, kGin230, kAlltoAll, kPaths };

// One rank's setup: windows over its send and receive buffers, and a
// devComm of each ABI with a signal for every round it will post.
struct Rank {
  ncclComm_t comm = nullptr;
  char *send = nullptr, *recv = nullptr;
  ncclWindow_t send_win = nullptr, recv_win = nullptr;
  ncclDevComm dev{};
  ncclGinProxyGpuCtx_t* ctx = nullptr;
  v230::DevComm230 dev230{};
  v230::ProxyCtx230* ctx230 = nullptr;
  uint32_t next_signal = 0, next_signal230 = 0;
};

struct Run {
  Options o;
  std::vector<Rank> ranks;
  std::barrier<> sync;
  std::vector<double> block_us;                              // per rank, the last timed block
  std::vector<double> path_rounds[kPaths], copy_rounds;  // rank 0's record of the current size
  std::vector<char> scratch;                                 // the copy rate's destination
  explicit Run(const Options& opt)
      : o(opt), ranks(size_t(opt.nranks)), sync(opt.nranks), block_us(size_t(opt.nranks)) {}
  int signals() const {
    int sizes = 0;
    for (size_t s = o.sweep.min_bytes; s <= o.sweep.max_bytes; s *= o.sweep.factor) ++sizes;
    return sizes * o.sweep.rounds * (o.sweep.iters + o.sweep.warmup);
  }
};

// One GIN AlltoAll of `bytes` per peer, on this round's own signal.
void gin_round(Run& run, int rank, size_t bytes) {
  Rank& r = run.ranks[size_t(rank)];
  const int n = run.o.nranks;
  const uint16_t sig = uint16_t(r.dev.ginSignalBase + r.next_signal++);
  const int op = ncclGinProxyOpPut | ncclGinProxyOpWithSignalInc;
  for (int k = 0; k < n; ++k) {
    const int peer = (rank + k) % n;
    const auto g =
        gin_host::build_gfd(op, bytes, 4096ull * r.send_win->ginOffset4K + peer * bytes, gin_host::handle(r.send_win),
                            4096ull * r.recv_win->ginOffset4K + rank * bytes, gin_host::handle(r.recv_win), 0, sig, 0);
    if (!gin_host::post(r.ctx, peer, g)) die("post: no credit from the proxy", ncclInternalError);
  }
  if (!gin_host::wait_at_least(&r.ctx->signals[sig], uint64_t(n))) die("a GIN round's signal", ncclInternalError);
}

// The same on 2.30's path: descriptors of 128 bytes, those to rank p on
// context p % contexts, where rank p then waits for them.
void gin230_round(Run& run, int rank, size_t bytes) {
  Rank& r = run.ranks[size_t(rank)];
  const int n = run.o.nranks, contexts = int(r.dev230.ginContextCount);
  const uint32_t sig = r.next_signal230++;
  for (int k = 0; k < n; ++k) {
    const int peer = (rank + k) % n;
    const auto g = v230::build_gfd2(v230::kPut | v230::kSignalInc, bytes,
                                    4096ull * v230::view(r.send_win).ginOffset4K + peer * bytes,
                                    gin_host::handle(r.send_win), 4096ull * v230::view(r.recv_win).ginOffset4K + rank * bytes,
                                    gin_host::handle(r.recv_win), 0, sig, 0);
    if (v230::post2(&r.ctx230[peer % contexts], peer, g) < 0) die("post: no credit from the proxy", ncclInternalError);
  }
  if (!v230::wait_at_least(&r.ctx230[rank % contexts].signals[sig], uint64_t(n)))
    die("a 2.30 GIN round's signal", ncclInternalError);
}

// Rank 0, while the others wait: the slowest rank's time of the block
// just run, and after the ncclAlltoAll block one thread's copy of the
// bytes a rank sends.
void record(Run& run, int path, size_t bytes) {
  const double slowest = *std::max_element(run.block_us.begin(), run.block_us.end());
  run.path_rounds[path].push_back(slowest);
  if (path != kAlltoAll) return;
  const size_t total = bytes * size_t(run.o.nranks);
  const auto t0 = Clock::now();
  for (int i = 0; i < run.o.sweep.iters; ++i) {
    std::memcpy(run.scratch.data(), run.ranks[0].send, total);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // each copy is made
  }
  run.copy_rounds.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / run.o.sweep.iters);
}

// Bandwidths are a rank's bytes sent (n x S) per second.
// A path not run shows as NaN.
double median(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

void print_row(Run& run, size_t bytes) {
  const double gin = median(run.path_rounds[kGin228]), gin230 = median(run.path_rounds[kGin230]),
               nccl = median(run.path_rounds[kAlltoAll]), copy = median(run.copy_rounds);
  const double sent = double(bytes) * run.o.nranks;
  const double first = run.o.v228 ? gin : gin230;  // the GIN path the a2a ratio and bandwidth are of
  std::printf("%12zu %10.2f %10.2f %10.2f %8.2f %7.2f %9.3f %9.3f %9.3f\n", bytes, gin, gin230, nccl, gin230 / gin,
              nccl / first, sent / first / 1e3, sent / nccl / 1e3, sent / copy / 1e3);
  std::fflush(stdout);
  for (auto& rounds : run.path_rounds) rounds.clear();
  run.copy_rounds.clear();
}

void rank_main(Run& run, int rank, ncclUniqueId id) {
  Rank& r = run.ranks[size_t(rank)];
  const int n = run.o.nranks;
  const size_t max = run.o.sweep.max_bytes * size_t(n);
  CHECK_NCCL(ncclCommInitRank(&r.comm, n, id, rank));
  CHECK_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&r.send), max));
  CHECK_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&r.recv), max));
  for (size_t i = 0; i < max; ++i) r.send[i] = char(rank + i);
  CHECK_NCCL(ncclCommWindowRegister(r.comm, r.send, max, &r.send_win, NCCL_WIN_COLL_SYMMETRIC));
  CHECK_NCCL(ncclCommWindowRegister(r.comm, r.recv, max, &r.recv_win, NCCL_WIN_COLL_SYMMETRIC));
  if (run.o.v228) {
    ncclDevCommRequirements reqs = {};
    reqs.ginSignalCount = run.signals();
    CHECK_NCCL(ncclDevCommCreate(r.comm, &reqs, &r.dev));
    r.ctx = static_cast<ncclGinProxyGpuCtx_t*>(r.dev.ginHandles[0]);
  }
  if (run.o.v230) {
    v230::Reqs230 reqs230 = v230::initializer();
    reqs230.ginConnectionType = 1;  // FULL
    reqs230.ginContextCount = run.o.contexts;
    reqs230.ginSignalCount = run.signals();
    CHECK_NCCL(v230::dev_comm_create(r.comm, &reqs230, &r.dev230));
    r.ctx230 = static_cast<v230::ProxyCtx230*>(r.dev230.ginHandles[0]);
  }
  for (size_t bytes = run.o.sweep.min_bytes; bytes <= run.o.sweep.max_bytes; bytes *= run.o.sweep.factor) {
    for (int round = 0; round < run.o.sweep.rounds; ++round) {
      for (int path = 0; path < kPaths; ++path) {
        if ((path == kGin228 && !run.o.v228) || (path == kGin230 && !run.o.v230)) continue;
        auto once = [&] {
          if (path == kGin228)
            gin_round(run, rank, bytes);
          else if (path == kGin230)
            gin230_round(run, rank, bytes);
          else
            CHECK_NCCL(ncclAlltoAll(r.send, r.recv, bytes, ncclInt8, r.comm, nullptr));
        };
        for (int w = 0; w < run.o.sweep.warmup; ++w) once();
        run.sync.arrive_and_wait();
        const auto t0 = Clock::now();
        for (int i = 0; i < run.o.sweep.iters; ++i) once();
        run.block_us[size_t(rank)] =
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / run.o.sweep.iters;
        run.sync.arrive_and_wait();  // rank 0 records the slowest rank's time, and the copy rate
        if (rank == 0) record(run, path, bytes);
        run.sync.arrive_and_wait();
      }
    }
    if (rank == 0) print_row(run, bytes);
  }
  if (run.o.v228) CHECK_NCCL(ncclDevCommDestroy(r.comm, &r.dev));
  if (run.o.v230) CHECK_NCCL(v230::dev_comm_destroy(r.comm, &r.dev230));
  CHECK_NCCL(ncclCommWindowDeregister(r.comm, r.send_win));
  CHECK_NCCL(ncclCommWindowDeregister(r.comm, r.recv_win));
  CHECK_NCCL(ncclMemFree(r.send));
  CHECK_NCCL(ncclMemFree(r.recv));
  CHECK_NCCL(ncclCommDestroy(r.comm));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: gin_perf [-t ranks] [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-r rounds] "
                 "[-c contexts] [-a 228|230|both]\n");
    return 2;
  }
  Run run(o);
  run.scratch.assign(o.sweep.max_bytes * size_t(o.nranks), 0);
  ncclUniqueId id;
  CHECK_NCCL(ncclGetUniqueId(&id));
  std::printf("# gin_perf: %d ranks (threads), %d rounds of %d iterations (+%d warm-up) per path, medians of rounds; "
              "gin230: %d contexts\n",
              o.nranks, o.sweep.rounds, o.sweep.iters, o.sweep.warmup, o.contexts);
  std::printf("# %10s %10s %10s %10s %8s %7s %9s %9s %9s\n", "size(B)", "gin(us)", "gin230(us)", "a2a(us)", "230/228",
              "a2a/gin", "gin GB/s", "a2a GB/s", "copy GB/s");
  std::vector<std::thread> threads;
  for (int r = 0; r < o.nranks; ++r) threads.emplace_back([&, r] { rank_main(run, r, id); });
  for (auto& t : threads) t.join();
  return 0;
}

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
#include <sys/mman.h>
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
#include "perf/options.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int nranks = 2, hosts = 0, iters = 20, warmup = 3, rounds = 5;
  size_t min_bytes = 64 << 10, max_bytes = 16 << 20, put_bytes = 64 << 10;
  int factor = 4;
};

const char* kUsage =
    "usage: rma_perf [-t ranks] [--hosts H] [-b min] [-e max] [-f factor] [-p put bytes] [-n iters] [-w warmup] "
    "[-r rounds]\n";

bool parse(int argc, char** argv, Options* o) {
  static const option longs[] = {{"hosts", required_argument, nullptr, 'H'}, {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "t:b:e:f:p:n:w:r:", longs, nullptr)) != -1) {
    switch (c) {
      case 't': o->nranks = std::atoi(optarg); break;
      case 'H': o->hosts = std::atoi(optarg); break;
      case 'b':
        if (!perf::parse_size(optarg, &o->min_bytes)) return false;
        break;
      case 'e':
        if (!perf::parse_size(optarg, &o->max_bytes)) return false;
        break;
      case 'f': o->factor = std::atoi(optarg); break;
      case 'p':
        if (!perf::parse_size(optarg, &o->put_bytes)) return false;
        break;
      case 'n': o->iters = std::atoi(optarg); break;
      case 'w': o->warmup = std::atoi(optarg); break;
      case 'r': o->rounds = std::atoi(optarg); break;
      default: return false;
    }
  }
  if (o->hosts == 0) o->hosts = o->nranks;
  return o->nranks >= 2 && o->hosts >= 1 && o->hosts <= o->nranks && o->min_bytes >= 1 &&
         o->max_bytes >= o->min_bytes && o->factor >= 2 && o->put_bytes >= 1 && o->iters >= 1 && o->warmup >= 0 &&
         o->rounds >= 1;
}

// Rank 0's table row per size: the median round of each path, in microseconds.
struct Row {
  size_t bytes;
  double put_us, send_us;
  int64_t wrong;
};

struct Shared {
  int failed;
  char error[512];
  Row rows[64];
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

#define TRY(call)                                                                                              \
  do {                                                                                                         \
    ncclResult_t r_ = (call);                                                                                  \
    if (r_ != ncclSuccess) {                                                                                   \
      snprintf(out->error, sizeof(out->error), "rank %d: %s: %s: %s", rank, #call, ncclGetErrorString(r_),  \
               ncclGetLastError(nullptr));                                                                     \
      out->failed = 1;                                                                                         \
      return 1;                                                                                                \
    }                                                                                                          \
  } while (0)

int rank_main(const Options& o, const ncclUniqueId& id, int rank, Shared* out) {
  const int n = o.nranks, next = (rank + 1) % n, prev = (rank + n - 1) % n;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm = nullptr;
  TRY(ncclCommInitRankConfig(&comm, n, id, rank, &config));
  void* window_memory = nullptr;
  ncclWindow_t window = nullptr;
  TRY(ncclMemAlloc(&window_memory, o.max_bytes));
  TRY(ncclCommWindowRegister(comm, window_memory, o.max_bytes, &window, NCCL_WIN_DEFAULT));
  std::vector<unsigned char> src(o.max_bytes), dst(o.max_bytes);
  auto* landed = static_cast<unsigned char*>(window_memory);
  double slowest = 0, mine = 0;
  int row = 0;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes && row < 64; bytes *= size_t(o.factor), ++row) {
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
    for (int round = -1; round < o.rounds; ++round) {  // round -1: the warm-up of both
      for (int path = 0; path < 2; ++path) {
        // A new pattern per round and path, so a stale byte shows.
        const unsigned char salt = static_cast<unsigned char>(round * 2 + path + 7);
        for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 31 + rank * 5 + salt);
        TRY(ncclAllReduce(&mine, &slowest, 1, ncclFloat64, ncclMax, comm, nullptr));  // line up
        const int iters = round < 0 ? o.warmup : o.iters;
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
    if (rank == 0) out->rows[row] = Row{bytes, median(put_rounds), median(send_rounds), all_wrong};
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
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  auto* shared = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared == MAP_FAILED) return 1;
  std::memset(shared, 0, sizeof(Shared));
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("BRAID_HOSTID", ("rma-perf-host-" + std::to_string(r * o.hosts / o.nranks)).c_str(), 1);
      _exit(rank_main(o, id, r, shared));
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  if (shared->failed) std::fprintf(stderr, "%s\n", shared->error);
  std::printf("# rma_perf: %d ranks (processes on %d emulated hosts), each to rank + 1; puts of %zu bytes; "
              "%d rounds of %d iters (+%d warmup), median round\n",
              o.nranks, o.hosts, o.put_bytes, o.rounds, o.iters, o.warmup);
  std::printf("# %12s %8s %12s %10s %12s %10s %10s %8s\n", "size(B)", "puts", "put(us)", "put GB/s", "send(us)",
              "send GB/s", "put/send", "#wrong");
  int64_t wrong = 0;
  for (const Row& row : shared->rows) {
    if (row.bytes == 0) break;
    const size_t piece = std::min(o.put_bytes, row.bytes);
    std::printf("  %12zu %8zu %12.1f %10.3f %12.1f %10.3f %10.2f %8lld\n", row.bytes, (row.bytes + piece - 1) / piece,
                row.put_us, double(row.bytes) / (row.put_us * 1e3), row.send_us,
                double(row.bytes) / (row.send_us * 1e3), row.put_us / row.send_us, (long long)row.wrong);
    wrong += row.wrong;
  }
  std::printf("# #wrong: %lld\n", (long long)wrong);
  return rc || wrong ? 1 : 0;
}

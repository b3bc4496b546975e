// The perf harness (see harness.h).  Ranks: `-t T` threads in each process,
// times the number of MPI processes when launched by mpirun.  Process rank 0
// makes the ncclUniqueId and MPI_Bcast spreads it; threads of a process meet
// at a std::barrier.  Timings are reduced over all ranks per -a.
#include "perf/harness.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "perf/options.h"
#include "perf/values.h"
#include "perf/world.h"

namespace perf {
namespace {

struct RankBuffers {
  std::vector<char> send_storage, recv_storage;
  char* send = nullptr;
  char* recv = nullptr;
};

// Everything one row needs, shared by the threads of a process.
struct Row {
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;
  int root = 0;
};

class Runner {
 public:
  Runner(const Options& o, const Benchmark& b, World& w, bool mpi_peer)
      : opt_(o), bench_(b), world_(w), mpi_peer_(mpi_peer), barrier_(o.threads) {}

  int run() {
    std::vector<std::thread> threads;
    for (int t = 1; t < opt_.threads; ++t) threads.emplace_back([this, t] { thread_main(t); });
    thread_main(0);
    for (auto& t : threads) t.join();
    return failed_.load() ? 1 : 0;
  }

 private:
  int nranks() const { return world_.procs() * opt_.threads; }

  void thread_main(int thread) {
    const int rank = world_.proc() * opt_.threads + thread;
    ncclComm_t comm = nullptr;
    if (!mpi_peer_) {
      ncclResult_t r = ncclCommInitRank(&comm, nranks(), world_.unique_id(), rank);
      if (r != ncclSuccess) return fatal(rank, "ncclCommInitRank", r, comm);
    }
    double bw_sum = 0;
    long rows = 0, wrong_total = 0;
    if (thread == 0 && world_.proc() == 0) print_table_header();
    for (ncclDataType_t type : opt_.types)
      for (ncclRedOp_t op : opt_.ops)
        for (int root : opt_.roots)
          for (size_t bytes = opt_.min_bytes; bytes <= opt_.max_bytes; bytes = opt_.next(bytes)) {
            Row row{bytes_to_count(bytes, type), type, op, root};
            RowResult res[2];
            for (int in_place = 0; in_place < 2; ++in_place)
              if (!measure(rank, thread, comm, row, in_place, &res[in_place])) return;
            if (thread == 0 && world_.proc() == 0) print_row(row, res);
            bw_sum += res[0].busbw + res[1].busbw;
            rows += 2;
            wrong_total += res[0].wrong + res[1].wrong;
            if (opt_.max_bytes == 0 || bytes >= opt_.max_bytes) break;
          }
    if (comm) ncclCommDestroy(comm);
    if (thread == 0 && world_.proc() == 0) {
      fmt::print("# Out of bounds values : {} {}\n", wrong_total, wrong_total ? "FAILED" : "OK");
      fmt::print("# Avg bus bandwidth    : {:g} \n#\n\n", rows ? bw_sum / double(rows) : 0.0);
      std::fflush(stdout);
    }
    if (wrong_total) failed_.store(true);
  }

  size_t bytes_to_count(size_t bytes, ncclDataType_t type) const {
    size_t esize = type_size(type);
    return bytes / esize / size_t(bench_.size_divisor == 1 ? 1 : nranks());
  }

  struct RowResult {
    double time_us = 0, algbw = 0, busbw = 0;
    long wrong = 0;
  };

  // Times one placement and checks its data; false on a fatal error.
  bool measure(int rank, int thread, ncclComm_t comm, const Row& row, bool in_place, RowResult* out) {
    const int n = nranks();
    const Shape shape = bench_.shape(n);
    const size_t esize = type_size(row.type);
    RankBuffers buf;
    buf.send_storage.resize(std::max<size_t>(1, shape.send_blocks * row.count * esize));
    buf.recv_storage.resize(std::max<size_t>(1, shape.recv_blocks * row.count * esize));
    buf.send = buf.send_storage.data();
    buf.recv = buf.recv_storage.data();
    if (in_place) {
      if (shape.send_inside_recv) buf.send = buf.recv + size_t(rank) * row.count * esize;
      else if (shape.recv_inside_send) buf.recv = buf.send + size_t(rank) * row.count * esize;
      else buf.send = buf.recv;
    }
    const ncclRedOp_t value_op = bench_.reduces ? row.op : ncclNumOps;  // ncclNumOps: plain copy pattern
    auto input = [&](int r, size_t i) { return input_value(row.type, value_op, r, n, i); };
    auto fill = [&] {
      std::fill(buf.recv_storage.begin(), buf.recv_storage.end(), char(0x5a));
      for (size_t i = 0; i < shape.send_blocks * row.count; ++i) store(row.type, buf.send, i, input(rank, i));
    };
    Call call{buf.send, buf.recv, row.count, row.type, row.op, row.root, rank, n, comm};
    auto run_once = [&]() -> bool {
      ncclResult_t r = bench_.run(call);
      if (r != ncclSuccess) {
        fatal(rank, bench_.name.c_str(), r, comm);
        return false;
      }
      return true;
    };

    fill();
    for (int i = 0; i < opt_.warmup; ++i)
      if (!run_once()) return false;
    sync(thread);
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < opt_.iters; ++i) {
      if (opt_.agg > 1 && comm) ncclGroupStart();
      for (int a = 0; a < opt_.agg; ++a)
        if (!run_once()) return false;
      if (opt_.agg > 1 && comm) ncclGroupEnd();
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
                double(std::max(1, opt_.iters * opt_.agg));
    out->time_us = reduce_time(thread, us);

    const double bytes = double(row.count) * double(type_size(row.type)) * (bench_.size_divisor == 1 ? 1 : n);
    out->algbw = out->time_us > 0 ? bytes / 1e3 / out->time_us : 0;
    out->busbw = out->algbw * bench_.bus_factor(n);

    out->wrong = -1;
    if (opt_.check) {
      fill();
      if (!run_once()) return false;
      long wrong = 0;
      for (size_t i = 0; i < shape.recv_blocks * row.count; ++i) {
        double want = 0;
        if (!bench_.expected(rank, n, row.root, row.count, i, row.op, input, &want)) continue;
        wrong += !equal_stored(row.type, buf.recv, i, want);
      }
      out->wrong = sum_wrong(thread, wrong);
    }
    return true;
  }

  void sync(int thread) {
    barrier_.arrive_and_wait();
    if (thread == 0) world_.barrier();
    barrier_.arrive_and_wait();
  }

  // Combines per-rank times per -a (0 rank 0, 1 average, 2 min, 3 max).
  double reduce_time(int thread, double us) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (thread_count_ == 0) {
        t_sum_ = 0;
        t_min_ = 1e300;
        t_max_ = 0;
        t_rank0_ = 0;
      }
      t_sum_ += us;
      t_min_ = std::min(t_min_, us);
      t_max_ = std::max(t_max_, us);
      if (thread == 0) t_rank0_ = us;
      ++thread_count_;
    }
    barrier_.arrive_and_wait();
    if (thread == 0) {
      thread_count_ = 0;
      double sum = world_.sum(t_sum_), mn = world_.min(t_min_), mx = world_.max(t_max_);
      double r0 = world_.broadcast_from_zero(t_rank0_);
      shared_result_ = opt_.average == 0 ? r0 : opt_.average == 2 ? mn : opt_.average == 3 ? mx : sum / nranks();
    }
    barrier_.arrive_and_wait();
    return shared_result_;
  }

  long sum_wrong(int thread, long wrong) {
    wrong_acc_.fetch_add(wrong);
    barrier_.arrive_and_wait();
    if (thread == 0) {
      shared_wrong_ = long(world_.sum(double(wrong_acc_.load())));
      wrong_acc_.store(0);
    }
    barrier_.arrive_and_wait();
    return shared_wrong_;
  }

  void fatal(int rank, const char* what, ncclResult_t r, ncclComm_t comm) {
    fmt::print(stderr, "{}: rank {}: {} failed: {} ({})\n", bench_.name, rank, what, ncclGetErrorString(r),
               ncclGetLastError(comm));
    std::fflush(stderr);
    // A rank that cannot go on would leave its peers waiting: stop the job.
    world_.abort(2);
  }

  void print_table_header() const {
    fmt::print("#\n# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:^31}  {:^31}\n", "", "", "", "", "", "out-of-place",
               "in-place");
    fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
               "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
               "#wrong");
    fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }

  void print_row(const Row& row, const RowResult res[2]) const {
    const int n = nranks();
    size_t elems = row.count * size_t(bench_.size_divisor == 1 ? 1 : n);
    std::string line = fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", elems * type_size(row.type), elems,
                                   type_name(row.type), bench_.reduces ? op_name(row.op) : "none",
                                   bench_.rooted ? row.root : -1);
    for (int p = 0; p < 2; ++p)
      line += fmt::format("  {:>7}  {:>6.2f}  {:>6.2f}  {:>6}", format_time(res[p].time_us), res[p].algbw,
                          res[p].busbw, res[p].wrong < 0 ? std::string("N/A") : std::to_string(res[p].wrong));
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }

  static std::string format_time(double us) {
    if (us >= 1e7) return fmt::format("{:.2e}", us);
    if (us >= 1e4) return fmt::format("{:.0f}", us);
    if (us >= 100) return fmt::format("{:.1f}", us);
    return fmt::format("{:.2f}", us);
  }

  const Options& opt_;
  const Benchmark& bench_;
  World& world_;
  const bool mpi_peer_;
  std::barrier<> barrier_;
  std::mutex mutex_;
  int thread_count_ = 0;
  double t_sum_ = 0, t_min_ = 0, t_max_ = 0, t_rank0_ = 0, shared_result_ = 0;
  std::atomic<long> wrong_acc_{0};
  long shared_wrong_ = 0;
  std::atomic<bool> failed_{false};
};

}  // namespace

double reduce_over_ranks(int nranks, ncclRedOp_t op, const std::function<double(int)>& input) {
  double acc = input(0);
  for (int k = 1; k < nranks; ++k) {
    double v = input(k);
    switch (op) {
      case ncclSum: case ncclAvg: acc += v; break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  return op == ncclAvg ? acc / nranks : acc;
}

int perf_main(int argc, char** argv, const Benchmark& bench, bool mpi_peer) {
  Options opt;
  std::string error;
  if (!parse_options(argc, argv, bench, mpi_peer, &opt, &error)) {
    fmt::print(stderr, "{}: {}\n", argv[0], error);
    return 2;
  }
  std::unique_ptr<World> world = make_world(&argc, &argv, mpi_peer);
  if (!world) return 2;
  const int nranks = world->procs() * opt.threads;
  if (bench.rooted) expand_roots(&opt, nranks);
  for (int root : opt.roots)
    if (bench.rooted && (root < 0 || root >= nranks)) {
      if (world->proc() == 0) fmt::print(stderr, "{}: root {} out of range for {} ranks\n", argv[0], root, nranks);
      return 2;
    }
  if (!world->setup_unique_id()) return 2;
  if (world->proc() == 0) print_header(opt, bench, *world);
  world->print_devices(opt.threads);
  Runner runner(opt, bench, *world, mpi_peer);
  int rc = runner.run();
  return world->finish(rc);
}

}  // namespace perf

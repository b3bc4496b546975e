// The perf harness (see harness.h), following nccl-tests' common.cu:
// ranks are `-t` threads in each process, times the processes of an mpirun
// job; process 0 makes the ncclUniqueId and MPI_Bcast spreads it; threads of
// a process meet at a std::barrier and their first thread speaks MPI.  Per
// size: one untimed call, a barrier, `-n` timed iterations (of `-m`
// aggregated calls), the time reduced over ranks per `-a`, then `-c` checked
// runs on freshly initialised buffers.  Output is nccl-tests' table.
#include "perf/harness.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "perf/device.h"
#include "perf/iter_times.h"
#include "perf/memory_cap.h"
#include "perf/options.h"
#include "perf/report.h"
#include "perf/values.h"
#include "perf/world.h"

namespace perf {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Exit codes, nccl-tests' testResult_t values, so that scripts tell failures
// apart the same way (usage errors stay 2, before anything ran).
constexpr int kExitNcclError = 3;  // testNcclError
constexpr int kExitTimeout = 4;    // testTimeout
constexpr int kExitWrongData = 7;  // testNumResults: what nccl-tests' run() returns on #wrong

// BRAID_PERF_TLS_KEY=<key of 32+ bytes> in every process's environment turns
// TLS on (ncclSetEncryption, NCCL 2.32) before the unique id and init, to
// measure what it costs.  Looked up at run time: a library without it (NCCL
// before 2.32) still runs every other measurement.
bool encrypt_if_asked() {
  const char* key = std::getenv("BRAID_PERF_TLS_KEY");
  if (!key || !*key) return true;
  using SetEncryption = ncclResult_t (*)(const ncclEncryptionConfig_t*);
  auto set = reinterpret_cast<SetEncryption>(dlsym(RTLD_DEFAULT, "ncclSetEncryption"));
  if (!set) {
    std::fprintf(stderr, "BRAID_PERF_TLS_KEY: this NCCL library has no ncclSetEncryption\n");
    return false;
  }
  ncclEncryptionConfig_t config = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  config.mode = NCCL_ENCRYPTION_MODE_PSK;
  config.psk = key;
  if (const ncclResult_t r = set(&config); r != ncclSuccess) {
    std::fprintf(stderr, "BRAID_PERF_TLS_KEY: ncclSetEncryption: %s (%s)\n", ncclGetErrorString(r),
                 ncclGetLastError(nullptr));
    return false;
  }
  return true;
}

// Host buffers (what the collectives use on the host backend, and the
// mirror of device buffers otherwise).  With -R on the host backend they come
// from ncclMemAlloc, as in nccl-tests, so that registration can share them.
// BRAID_PERF_HUGEPAGES=1 (every tool of the harness, braid's and its peers'
// alike) puts plain buffers on transparent huge pages, as a host whose THP
// setting is "always" does for every large allocation: the kernel copies of
// cross-memory attach run several times faster on them (perf/copy_path_probe -H).
struct AlignedBuffer {
  char* data = nullptr;
  size_t bytes = 0;
  bool nccl_mem = false;
  void allocate(size_t n, bool from_nccl) {
    const char* huge_env = std::getenv("BRAID_PERF_HUGEPAGES");
    const bool huge = !from_nccl && huge_env && std::strcmp(huge_env, "0") != 0;
    const size_t align = huge ? size_t(2) << 20 : 4096;
    bytes = (std::max<size_t>(n, 1) + align - 1) / align * align;
    nccl_mem = from_nccl;
    void* p = nullptr;
    if (!nccl_mem) p = std::aligned_alloc(align, bytes);
    else if (ncclMemAlloc(&p, bytes) != ncclSuccess) p = nullptr;
    data = static_cast<char*>(p);
    if (data && huge) madvise(data, bytes, MADV_HUGEPAGE);  // before the first touch; advice, so failure is harmless
    if (data) std::memset(data, 0, bytes);
  }
  ~AlignedBuffer() {
    if (nccl_mem) ncclMemFree(data);
    else std::free(data);
  }
};

class Runner {
 public:
  Runner(const Options& o, const Benchmark& b, World& w, bool mpi_peer, std::string tool, Report& report)
      : opt_(o), bench_(b), world_(w), mpi_peer_(mpi_peer), tool_(std::move(tool)), report_(report),
        threads_(o.threads),
        nranks_(w.group_procs() * o.threads), barrier_(o.threads), slots_(size_t(o.threads)),
        iter_slots_(size_t(o.threads)),
        comms_(size_t(o.threads), nullptr), send_(size_t(o.threads)), recv_(size_t(o.threads)),
        send_handles_(size_t(o.threads), nullptr), recv_handles_(size_t(o.threads), nullptr),
        dev_send_(size_t(o.threads), nullptr), dev_recv_(size_t(o.threads), nullptr),
        streams_(size_t(o.threads), nullptr), in_flight_(size_t(o.threads)) {}

  ~Runner() {
    if (!device_buffers()) return;
    for (void* p : dev_send_) buffer_free(p);
    for (void* p : dev_recv_) buffer_free(p);
  }

  bool main_printer() const { return world_.proc() == 0; }

  void print(const std::string& s) {
    if (!main_printer()) return;
    std::fputs(s.c_str(), stdout);
    std::fflush(stdout);
  }

  int run(const ncclUniqueId& id) {
    id_ = id;
    for (int t = 0; t < threads_; ++t) {
      const bool nccl_mem = opt_.local_register && !mpi_peer_ && !device_buffers();
      const size_t bytes = buffer_bytes();
      send_[size_t(t)].allocate(bytes, nccl_mem);
      recv_[size_t(t)].allocate(bytes, nccl_mem);
      if (!send_[size_t(t)].data || !recv_[size_t(t)].data) {
        fmt::print(stderr, "{}: cannot allocate 2 x {} bytes of host memory\n", tool_, buffer_bytes());
        world_.abort(2);
      }
      // Device buffers mirror the host ones (which lay out and check data).
      dev_send_[size_t(t)] = device_buffers() ? buffer_alloc(send_[size_t(t)].bytes) : send_[size_t(t)].data;
      dev_recv_[size_t(t)] = device_buffers() ? buffer_alloc(recv_[size_t(t)].bytes) : recv_[size_t(t)].data;
      if (!dev_send_[size_t(t)] || !dev_recv_[size_t(t)]) {
        fmt::print(stderr, "{}: cannot allocate 2 x {} bytes of {}\n", tool_, buffer_bytes(),
                   device_description());
        world_.abort(2);
      }
    }
    if (!mpi_peer_ && !opt_.parallel_init) {
      // As nccl-tests: the main thread creates every local communicator in one group.
      check(ncclGroupStart(), 0, "ncclGroupStart");
      for (int t = 0; t < threads_; ++t)
        check(ncclCommInitRank(&comms_[size_t(t)], nranks_, id_, rank_of(t)), rank_of(t), "ncclCommInitRank");
      check(ncclGroupEnd(), 0, "ncclGroupEnd (communicator init)");
    }
    print(report_.table_header());
    std::thread watchdog;
    if (opt_.timeout_s > 0) watchdog = std::thread([this] { watch(); });
    std::vector<std::thread> threads;
    for (int t = 1; t < threads_; ++t) threads.emplace_back([this, t] { thread_main(t); });
    thread_main(0);
    for (auto& t : threads) t.join();
    done_.store(true);
    if (watchdog.joinable()) watchdog.join();

    const int errors = int(world_.sum(double(errors_.load())));
    // As nccl-tests: a run below 90% of NCCL_TESTS_MIN_BW (GB/s, average bus bandwidth) fails like wrong data.
    const char* min_bw_text = std::getenv("NCCL_TESTS_MIN_BW");
    const double min_bw = min_bw_text ? std::atof(min_bw_text) : -1;
    print(report_.footer(errors, min_bw));
    if (main_printer()) report_.write_json(errors, min_bw);
    return errors || !report_.bandwidth_ok(min_bw) ? kExitWrongData : 0;
  }

 private:
  // The rank in this process's communicator (its colour's group, NCCL_TESTS_SPLIT_MASK).
  int rank_of(int thread) const { return world_.group_proc() * threads_ + thread; }
  // -e, and room for -u elements of the largest type (nccl-tests pads the same).
  size_t buffer_bytes() const { return opt_.max_bytes + 8 * size_t(opt_.unalign); }

  void check(ncclResult_t r, int rank, const char* what, ncclComm_t comm = nullptr) {
    if (r == ncclSuccess) return;
    const char* last = ncclGetLastError(comm);
    fmt::print(stderr, "{}: rank {}: {} failed: {} ({}){}{}\n", tool_, rank, what, ncclGetErrorString(r), int(r),
               last && *last ? ": " : "", last ? last : "");
    std::fflush(stderr);
    // A rank that cannot go on would leave its peers waiting: stop the job.
    world_.abort(kExitNcclError);
  }

  void thread_main(int thread) {
    const int rank = rank_of(thread);
    ncclComm_t& comm = comms_[size_t(thread)];
    streams_[size_t(thread)] = stream_create(opt_.stream_null != 0);
    if (!mpi_peer_ && opt_.parallel_init) check(ncclCommInitRank(&comm, nranks_, id_, rank), rank, "ncclCommInitRank");
    register_buffers(thread, true);
    uint64_t rep = 0;
    for (ncclDataType_t type : opt_.types)
      for (ncclRedOp_t op : opt_.ops)
        for (int root : opt_.roots) {
          sync(thread);
          warm_up(thread, type, op, root);
          for (int cycle = 0; opt_.cycles == 0 || cycle < opt_.cycles; ++cycle)
            for (size_t bytes = opt_.min_bytes; bytes <= opt_.max_bytes; bytes = opt_.next(bytes)) {
              const size_t count = bytes / type_size(type);
              const Counts c = bench_.counts(count, type_size(type), nranks_);
              const size_t row_bytes = std::max(c.send, c.recv) * type_size(type);
              Placement res[2];
              for (int in_place = 0; in_place < 2; ++in_place)
                res[in_place] = bench_time(thread, type, op, root, c, row_bytes, in_place, ++rep);
              if (thread == 0) print(report_.row(type, op, root, c, row_bytes, res));
              if (opt_.max_bytes == 0) break;
            }
        }
    sync(thread);
    register_buffers(thread, false);
    if (comm) check(ncclCommDestroy(comm), rank, "ncclCommDestroy");
    stream_destroy(streams_[size_t(thread)]);
  }

  void register_buffers(int thread, bool on) {
    ncclComm_t comm = comms_[size_t(thread)];
    if (!comm || !opt_.local_register) return;
    const int rank = rank_of(thread);
    void* bufs[2] = {dev_send_[size_t(thread)], dev_recv_[size_t(thread)]};
    void** handles[2] = {&send_handles_[size_t(thread)], &recv_handles_[size_t(thread)]};
    for (int b = 0; b < 2; ++b) {
      const size_t bytes = b == 0 ? send_[size_t(thread)].bytes : recv_[size_t(thread)].bytes;
      if (opt_.local_register == 2) {
        ncclWindow_t* win = reinterpret_cast<ncclWindow_t*>(handles[b]);
        if (on) check(ncclCommWindowRegister(comm, bufs[b], bytes, win, NCCL_WIN_COLL_SYMMETRIC), rank,
                      "ncclCommWindowRegister", comm);
        else check(ncclCommWindowDeregister(comm, *win), rank, "ncclCommWindowDeregister", comm);
      } else {
        if (on) check(ncclCommRegister(comm, bufs[b], bytes, handles[b]), rank, "ncclCommRegister", comm);
        else check(ncclCommDeregister(comm, *handles[b]), rank, "ncclCommDeregister", comm);
      }
    }
  }

  // nccl-tests warms up every size from -b to -e doubling, out of place.
  void warm_up(int thread, ncclDataType_t type, ncclRedOp_t op, int root) {
    if (opt_.warmup == 0) return;
    for (size_t bytes = opt_.min_bytes; bytes <= opt_.max_bytes; bytes = bytes ? bytes * 2 : 1) {
      const Counts c = bench_.counts(bytes / type_size(type), type_size(type), nranks_);
      Call call = make_call(thread, type, op, root, c, false);
      OpHolder holder(this, thread, type, &call);
      for (int i = 0; i < opt_.warmup; ++i) {
        // With a straggler, warm-up calls are late too (BRAID_STRAGGLER=auto learns from them).
        if (straggling()) {
          wait(call);
          sync(thread);
          delay_if_straggler(thread);
        }
        start_call(thread, shifted(call, c, type, i));
      }
      wait(call);
      if (bytes == 0 && opt_.max_bytes == 0) break;
    }
  }

  // Call number `iter` of a loop moves through the -e sized buffers, as
  // nccl-tests' startColl: shifted by whole rows (avoiding cache effects and
  // catching races between calls), back to the start when the next would not fit.
  Call shifted(const Call& call, const Counts& c, ncclDataType_t type, int iter) const {
    const size_t row = std::max(c.send, c.recv) * type_size(type);
    const size_t steps = row ? std::max<size_t>(opt_.max_bytes / row, 1) : 1;
    const size_t shift = row * (size_t(iter) % steps);
    Call out = call;
    out.send = static_cast<const char*>(call.send) + shift;
    out.recv = static_cast<char*>(call.recv) + shift;
    return out;
  }

  Call make_call(int thread, ncclDataType_t type, ncclRedOp_t op, int root, const Counts& c, bool in_place) {
    const size_t es = type_size(type);
    const int rank = rank_of(thread);
    // -u, as nccl-tests: both buffers start `unalign` elements in.
    char* send = send_[size_t(thread)].data + size_t(opt_.unalign) * es;
    char* recv = recv_[size_t(thread)].data + size_t(opt_.unalign) * es;
    if (in_place) {
      send = recv + c.send_inplace_offset * size_t(rank) * es;
      recv = recv + c.recv_inplace_offset * size_t(rank) * es;
    }
    return Call{to_device(thread, send), to_device(thread, recv), c.param, type, op, root, rank, nranks_,
                comms_[size_t(thread)], streams_[size_t(thread)]};
  }

  // The device buffer address mirroring a host buffer address, and back.
  char* to_device(int thread, const char* host) const {
    const size_t t = size_t(thread);
    if (host >= recv_[t].data && host < recv_[t].data + recv_[t].bytes)
      return static_cast<char*>(dev_recv_[t]) + (host - recv_[t].data);
    return static_cast<char*>(dev_send_[t]) + (host - send_[t].data);
  }
  char* to_host(int thread, const void* device) const {
    const size_t t = size_t(thread);
    const char* d = static_cast<const char*>(device);
    const char* dr = static_cast<const char*>(dev_recv_[t]);
    if (d >= dr && d < dr + recv_[t].bytes) return recv_[t].data + (d - dr);
    return send_[t].data + (d - static_cast<const char*>(dev_send_[t]));
  }
  void upload(int thread, const void* device, size_t bytes) {
    if (device_buffers()) copy_to_buffer(const_cast<void*>(device), to_host(thread, device), bytes);
  }

  // mulsum: a PreMulSum op with this rank's scalar for the lifetime of a call set.
  struct OpHolder {
    OpHolder(Runner* r, int thread, ncclDataType_t type, Call* call) : runner(r), call_(call) {
      if (call->op != kMulSum) return;
      Data d(type, kMulSum, r->nranks_, 0);
      uint64_t scalar = d.scalar_bits(call->rank);
      r->check(ncclRedOpCreatePreMulSum(&call->op, &scalar, type, ncclScalarHostImmediate, call->comm), call->rank,
               "ncclRedOpCreatePreMulSum", call->comm);
      created = true;
    }
    ~OpHolder() {
      if (created) runner->check(ncclRedOpDestroy(call_->op, call_->comm), call_->rank, "ncclRedOpDestroy", call_->comm);
    }
    Runner* runner;
    Call* call_;
    bool created = false;
  };

  // -T, as nccl-tests: only a call in flight counts against the timeout, from
  // its launch (host buffers: the call itself does the work) to the end of
  // the wait for it, never the harness's own work between calls (laying out
  // and checking data takes seconds at large sizes).  Nested guards: the outermost counts.
  class InFlight {
   public:
    InFlight(Runner* r, int thread) : slot_(r->in_flight_[size_t(thread)]) {
      if (slot_.load() != 0) return;
      slot_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
      owner_ = true;
    }
    ~InFlight() {
      if (owner_) slot_.store(0);
    }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    std::atomic<int64_t>& slot_;
    bool owner_ = false;
  };
  int thread_of(const Call& call) const { return call.rank - rank_of(0); }

  void launch(const Call& call) {
    InFlight in_flight(this, thread_of(call));
    check(bench_.run(call), call.rank, bench_.name.c_str(), call.comm);
  }
  // Waits for the calls launched on `call`'s stream.
  void wait(const Call& call) {
    InFlight in_flight(this, thread_of(call));
    stream_sync(call.stream);
  }
  // nccl-tests' startColl: a call, then with -z the wait for it, and with -z 1 a barrier.
  void start_call(int thread, const Call& call) {
    launch(call);
    if (opt_.blocking) wait(call);
    if (opt_.blocking == 1) sync(thread);
  }
  void group_end(const Call& call) {
    InFlight in_flight(this, thread_of(call));  // with host buffers the group's calls run here
    check(ncclGroupEnd(), call.rank, "ncclGroupEnd", call.comm);
  }

  Placement bench_time(int thread, ncclDataType_t type, ncclRedOp_t op, int root, const Counts& c, size_t row_bytes,
                       bool in_place, uint64_t rep) {
    const int rank = rank_of(thread);
    const int data_op = bench_.reduces ? int(op) : kCopy;
    Call call = make_call(thread, type, op, root, c, in_place);
    OpHolder holder(this, thread, type, &call);
    const size_t es = type_size(type);
    if (opt_.check) {
      Data(type, data_op, nranks_, 99).fill(to_host(thread, call.send), rank, 0, c.send);
      upload(thread, call.send, c.send * es);
      sync(thread);  // a rank still laying out data would hold the others' first call (and -T's clock)
    }

    start_call(thread, call);  // untimed: connections, first touch
    wait(call);
    sync(thread);
    if (straggling()) return straggler_time(thread, call, row_bytes, c, type, data_op, root, in_place, rep);
    const int iters = opt_.iters_for(row_bytes);
    double coll_only = 0;  // -z 3: the iterations' own time, without the barriers between them
    IterClock clock(opt_.per_iter ? iters : 0, opt_.blocking == 3, call.stream);
    auto iteration = [&](int i, bool timed) {
      const auto t0 = Clock::now();
      if (opt_.agg > 1 && call.comm) check(ncclGroupStart(), rank, "ncclGroupStart");
      if (timed) clock.mark(i);
      for (int a = 0; a < opt_.agg; ++a) start_call(thread, shifted(call, c, type, i * opt_.agg + a));
      if (opt_.agg > 1 && call.comm) group_end(call);
      if (opt_.blocking == 3) {
        wait(call);
        if (timed) clock.mark(i, true);
        coll_only += seconds_since(t0);
        sync(thread);
      }
    };
    // -G (as nccl-tests): the loop's calls are captured, not run; the
    // clock restarts at the graph's launches, after a barrier.  An
    // aggregated group runs once uncaptured first: what a shape needs is
    // allocated at its first call, which a capture cannot do.
    if (opt_.graph > 0 && opt_.agg > 1) {
      iteration(0, false);
      wait(call);
    }
    if (opt_.graph > 0) capture_begin(call.stream);
    auto start = Clock::now();
    coll_only = 0;
    for (int i = 0; i < iters; ++i) iteration(i, true);
    if (opt_.blocking != 3) clock.mark(iters);  // the end of the last iteration
    CapturedGraph graph;
    if (opt_.graph > 0) {
      graph = capture_end(call.stream);
      sync(thread);
      start = Clock::now();
      for (int l = 0; l < opt_.graph; ++l) graph_launch(graph, call.stream);
    }
    const double calls = double(iters) * opt_.agg;
    // -C, as nccl-tests: the time to launch the calls, before waiting for them (bandwidths stay the full time's).
    const double launched = (opt_.blocking == 3 ? coll_only : seconds_since(start)) / calls;
    wait(call);
    const double seconds = (opt_.blocking == 3 ? coll_only : seconds_since(start)) / calls / std::max(opt_.graph, 1);
    graph_destroy(&graph);
    Placement out;
    const double sec = combine(thread, seconds, opt_.average);
    fill_rates(sec, row_bytes, &out);
    if (bench_.row_note && thread == 0) print(bench_.row_note(nranks_, es, c.param, sec));
    if (opt_.cputime) out.time_us = launched * 1e6;
    sync(thread);
    check_results(thread, call, c, type, data_op, root, in_place, rep, &out);
    if (opt_.per_iter) gather_iter_times(thread, clock.seconds(opt_.agg), &out);
    return out;
  }

  void fill_rates(double sec, size_t row_bytes, Placement* out) const {
    out->time_us = sec * 1e6;
    out->algbw = sec > 0 ? double(row_bytes) / 1e9 / sec : 0;
    out->busbw = nranks_ > 0 ? out->algbw * bench_.bus_factor(nranks_) : 0;
  }

  bool straggling() const { return opt_.straggler_rank >= 0; }  // perf_main refused ranks out of range

  // Returns the straggler's arrival time (seconds on the steady clock), or
  // -inf on other ranks, so a max over ranks yields the arrival.
  double delay_if_straggler(int thread) {
    if (rank_of(thread) != opt_.straggler_rank) return -1e300;
    std::this_thread::sleep_for(std::chrono::microseconds(opt_.straggler_delay_us));
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }

  // --straggler: every iteration starts aligned (barrier), the straggler
  // sleeps, and the time counted runs from its arrival to the last rank's
  // return; the row reports the median over iterations.  The steady clock is system-wide, so this holds for ranks as
  // threads and as processes on one host (not across hosts).
  Placement straggler_time(int thread, const Call& call, size_t row_bytes, const Counts& c, ncclDataType_t type,
                           int data_op, int root, bool in_place, uint64_t rep) {
    std::vector<double> times;
    for (int i = 0; i < opt_.iters_for(row_bytes); ++i) {
      sync(thread);
      const double arrival_local = delay_if_straggler(thread);
      launch(shifted(call, c, type, i));
      wait(call);
      const double end = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
      const double arrival = combine(thread, arrival_local, 3);
      times.push_back(combine(thread, end, 3) - arrival);
    }
    // The median: one iteration descheduled on a busy host should not decide the row.
    std::sort(times.begin(), times.end());
    Placement out;
    fill_rates(times[times.size() / 2], row_bytes, &out);
    sync(thread);
    check_results(thread, call, c, type, data_op, root, in_place, rep, &out);
    return out;
  }

  void check_results(int thread, const Call& call, const Counts& c, ncclDataType_t type, int data_op, int root,
                     bool in_place, uint64_t rep, Placement* result) {
    const int rank = rank_of(thread);
    const size_t es = type_size(type);
    Placement& out = *result;
    // As nccl-tests: such an in-place call runs (and is timed), unchecked (N/A).
    if (in_place && !bench_.checks_in_place) {
      out.wrong = -1;
      return;
    }

    for (int k = 0; k < opt_.check; ++k) {
      const Data data(type, data_op, nranks_, rep * 1000003 + uint64_t(k));
      char* recv = to_host(thread, call.recv);
      // Poison what the call writes, then lay the inputs (in place they may overlap).
      std::memset(recv, 0xa5, c.recv * es);
      data.fill(to_host(thread, call.send), rank, 0, c.send);
      upload(thread, call.recv, c.recv * es);
      upload(thread, call.send, c.send * es);
      sync(thread);
      start_call(thread, call);
      wait(call);
      if (device_buffers()) copy_from_buffer(recv, call.recv, c.recv * es);
      long wrong = 0;
      uint64_t want = 0;
      for (size_t i = 0; i < c.recv; ++i)
        if (bench_.expected(rank, nranks_, root, c.param, i, data, &want) && !data.matches(load(type, recv, i), want))
          ++wrong;
      if (wrong) errors_.fetch_add(1);
      out.wrong = long(combine(thread, double(wrong), 4));
      if (out.wrong) break;
    }
    if (!opt_.check) out.wrong = -1;
  }

  // -I, as nccl-tests: each iteration's time is the max over this process's
  // ranks, then over the processes; process 0's first thread gets them (and
  // every process's row, for the JSON file).
  void gather_iter_times(int thread, std::vector<double> mine, Placement* out) {
    iter_slots_[size_t(thread)] = std::move(mine);
    barrier_.arrive_and_wait();
    if (thread == 0) {
      std::vector<double> row = iter_slots_[0];
      std::string text;
      for (size_t i = 0; i < row.size(); ++i) {
        for (const std::vector<double>& t : iter_slots_) row[i] = std::max(row[i], t[i]);
        text += fmt::format("{} ", row[i]);  // the shortest text that reads back the same double
      }
      const std::string all = world_.gather_text(text + "\n");
      if (world_.proc() == 0) {
        for (size_t pos = 0; pos < all.size();) {
          const size_t end = all.find('\n', pos);
          const std::string line = all.substr(pos, end - pos);  // strtod would read on past the newline
          std::vector<double> times;
          for (const char* p = line.c_str();;) {
            char* next = nullptr;
            const double v = std::strtod(p, &next);
            if (next == p) break;
            times.push_back(v);
            p = next;
          }
          out->process_times.push_back(std::move(times));
          pos = end + 1;
        }
        out->iter_times = out->process_times[0];
        for (const std::vector<double>& t : out->process_times)
          for (size_t i = 0; i < t.size() && i < out->iter_times.size(); ++i)
            out->iter_times[i] = std::max(out->iter_times[i], t[i]);
        if (out->process_times.size() < 2) out->process_times.clear();
      }
    }
    barrier_.arrive_and_wait();
  }

  void sync(int thread) {
    barrier_.arrive_and_wait();
    if (thread == 0) world_.barrier();
    barrier_.arrive_and_wait();
  }

  // Over all ranks: 0 rank 0's value, 1 mean, 2 min, 3 max, 4 sum.
  double combine(int thread, double v, int how) {
    slots_[size_t(thread)] = v;
    barrier_.arrive_and_wait();
    if (thread == 0) {
      double sum = 0, mn = slots_[0], mx = slots_[0];
      for (double s : slots_) {
        sum += s;
        mn = std::min(mn, s);
        mx = std::max(mx, s);
      }
      switch (how) {
        case 0: result_ = world_.broadcast_from_zero(slots_[0]); break;
        case 2: result_ = world_.min(mn); break;
        case 3: result_ = world_.max(mx); break;
        case 4: result_ = world_.sum(sum); break;
        // The mean over every rank of every group, as nccl-tests' Allreduce.
        default: result_ = world_.sum(sum) / double(world_.procs() * threads_); break;
      }
    }
    barrier_.arrive_and_wait();
    return result_;
  }

  // -T: a call in flight for more than timeout_s seconds: report and stop the job.
  void watch() {
    const auto limit = std::chrono::seconds(opt_.timeout_s);
    while (!done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const auto now = Clock::now().time_since_epoch();
      for (const std::atomic<int64_t>& since : in_flight_) {
        const int64_t start = since.load();
        if (start == 0 || now - std::chrono::nanoseconds(start) <= limit) continue;
        std::printf("%s: Test timeout (%ds)\n", hostname().c_str(), opt_.timeout_s);
        std::fflush(stdout);
        for (ncclComm_t comm : comms_)
          if (comm) ncclCommAbort(comm);
        world_.abort(kExitTimeout);
      }
    }
  }

  const Options& opt_;
  const Benchmark& bench_;
  World& world_;
  const bool mpi_peer_;
  const std::string tool_;
  Report& report_;
  const int threads_, nranks_;
  ncclUniqueId id_{};
  std::barrier<> barrier_;
  std::vector<double> slots_;
  std::vector<std::vector<double>> iter_slots_;  // -I: each thread's iteration times
  double result_ = 0;
  std::vector<ncclComm_t> comms_;
  std::vector<AlignedBuffer> send_, recv_;
  std::vector<void*> send_handles_, recv_handles_;
  std::vector<void*> dev_send_, dev_recv_;  // == the host buffers without a device
  std::vector<cudaStream_t> streams_;
  std::atomic<long> errors_{0};
  std::vector<std::atomic<int64_t>> in_flight_;  // per thread: steady-clock ns since its call's launch, 0: none
  std::atomic<bool> done_{false};
};

std::string basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

int perf_main(int argc, char** argv, const Benchmark& bench, bool mpi_peer) {
  setlinebuf(stdout);
  const std::string tool = basename_of(argv[0]);
  const std::vector<std::string> args(argv, argv + argc);  // before getopt permutes them and MPI_Init edits them

  Options opt;
  std::string error;
  bool help = false;
  if (!parse_options(argc, argv, bench, mpi_peer, &opt, &error, &help)) {
    if (help) {
      std::printf("%s", usage());
      return 0;
    }
    fmt::print(stderr, "{}: {}\n", tool, error);
    return 2;
  }
  std::unique_ptr<World> world = make_world(&argc, &argv, mpi_peer);
  if (!world) return 2;
  if (world->proc() == 0)
    for (const std::string& warning : opt.warnings) fmt::print(stderr, "{}: {}\n", tool, warning);
  if (opt.stream_null && !device_buffers()) {
    opt.notes.push_back("-y 1: host buffers have no streams; the calls run as before");
    opt.stream_null = 0;
  }
  if (opt.graph > 0 && !device_buffers()) {
    opt.notes.push_back(fmt::format("-G {}: CUDA graphs need device buffers, and this run uses host memory; timing "
                                    "plain launches", opt.graph));
    opt.graph = 0;
  }
  int color = 0;
  std::string split_error, split_warning;
  if (!split_color(world->proc(), &color, &split_error, &split_warning) || !world->split(color, &split_error)) {
    if (world->proc() == 0) fmt::print(stderr, "{}: {}\n", tool, split_error);
    return world->finish(2);
  }
  if (!split_warning.empty() && world->proc() == 0) fmt::print(stderr, "{}: warning: {}\n", tool, split_warning);
  const int nranks = world->group_procs() * opt.threads;
  if (std::string invalid; bench.validate && !bench.validate(opt.min_bytes, opt.max_bytes, nranks, &invalid)) {
    if (world->proc() == 0) fmt::print(stderr, "{}: {}\n", tool, invalid);
    return world->finish(2);
  }
  expand_roots(&opt, bench, nranks);
  for (int root : opt.roots)
    if (bench.rooted && root >= nranks) {
      if (world->proc() == 0) fmt::print(stderr, "{}: root {} out of range for {} ranks\n", tool, root, nranks);
      return world->finish(2);
    }
  if (opt.straggler_rank >= nranks) {  // else nobody would sleep, and the rows would say someone did
    if (world->proc() == 0)
      fmt::print(stderr, "{}: --straggler {}:{}: rank {} out of range for {} ranks\n", tool, opt.straggler_rank,
                 opt.straggler_delay_us, opt.straggler_rank, nranks);
    return world->finish(2);
  }

  int version = 0;
  if (!mpi_peer) ncclGetVersion(&version);
  Report report(opt, bench, tool);
  report.set_args(args);
  Runner runner(opt, bench, *world, mpi_peer, tool, report);
  std::string lines;
  const std::string host = hostname();
  for (int t = 0; t < opt.threads; ++t)
    lines += fmt::format("#  Rank {:2} Group {:2} Pid {:6} on {:>10} {}\n", world->proc() * opt.threads + t, color,
                         getpid(), host,
                         device_buffers() ? device_description() : fmt::format("device {:2} [cpu] host", t));
  const std::string all_lines = world->gather_text(lines);
  if (world->proc() == 0) {
    std::fputs((report.run_header(version) + all_lines).c_str(), stdout);
    std::fflush(stdout);
    report.set_devices(all_lines);
  }
  // As nccl-tests, after the device lines: -e (and -b) trimmed to what the buffers fit in.
  if (const size_t cap = memory_max_bytes(opt, *world); opt.max_bytes > cap) {
    opt.max_bytes = cap;
    opt.min_bytes = std::min(opt.min_bytes, cap);
    if (world->proc() == 0) std::printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", cap);
  }

  if (!encrypt_if_asked()) return world->finish(2);
  ncclUniqueId id{};
  if (!world->share_unique_id(&id)) return world->finish(2);
  int rc = runner.run(id);
  if (world->proc() == 0) {
    const char* last = mpi_peer ? nullptr : ncclGetLastError(nullptr);
    if (last && *last) std::printf("# error: %s\n", last);
    else std::printf("\n");
    std::fflush(stdout);
  }
  return world->finish(rc);
}

}  // namespace perf

// The single-copy paths (mapped and pulled): see single_copy.h for the protocol and the work split.
#include "src/exec/host/single_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "braid/chunking.h"
#include "src/base/byte_ranges.h"
#include "src/transport/cross_memory.h"
#include "src/ops/datatype.h"
#include "src/ops/host_kernels.h"
#include "src/transport/host_memory.h"
#include "src/base/log.h"
#include "src/plan/copy_path.h"

namespace braid {
namespace {

constexpr uint64_t kNoWindow = UINT64_MAX;
// A pulled reduction's chunk: every chunk costs a system call per peer each
// way, which dominated with smaller chunks; larger ones gained nothing
// (2-process AllReduce of 64 MiB on huge pages, by chunk size:
// perf/results/compare_20261125i.txt, section 3b).  One staging chunk per
// rank, and one for the result.
constexpr uint64_t kPullChunkBytes = 1 << 20;

// Where one rank's buffer is: a mapped window (by its registration order,
// the same on every rank) and the offset in that rank's part of it; and its
// address, which every rank can use when all are threads of one process.
struct BufferRef {
  uint64_t window = kNoWindow;
  uint64_t offset = 0;
  uint64_t address = 0;
};

struct Descriptor {
  uint32_t collective = 0;
  int32_t type = 0, op = 0, root = 0;
  uint64_t count = 0;
  BufferRef input, output;
  uint64_t input_bytes = 0, output_bytes = 0;  // 0: this rank passes no such buffer
  uint32_t overlapping = 0;  // input and output share bytes (in place)
  int32_t pid = 0;           // for the pull path: whose memory `address` is in
  uint8_t can_pull = 0;      // this rank could read every peer's memory at init
  uint8_t path = 0;          // rank 0's CopyPath for this call (others: unused)
  uint32_t lease = 0;        // rank 0, choosing the slots: following calls that take them unasked
  bool same_call(const Descriptor& o) const {
    return collective == o.collective && type == o.type && op == o.op && root == o.root && count == o.count;
  }
};

struct Done {
  uint64_t magic = 0x646f6e65;  // "done"
  uint32_t failed = 0;          // the sender's share failed (the pull path)
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// [p, p + bytes) on this rank: the mapped window holding it, if any.
BufferRef find_window(const SingleCopyContext& ctx, const void* p, uint64_t bytes) {
  const uint64_t addr = reinterpret_cast<uint64_t>(p);
  const HostWindow* w = ctx.windows->holding(ctx.rank, p, bytes);
  return w ? BufferRef{w->seq, addr - w->ranks[ctx.rank].base, addr} : BufferRef{kNoWindow, 0, addr};
}

class SingleCopyTask final : public Task {
 public:
  // Takes a call's arguments and rewinds (a reused task allocates nothing:
  // the vectors keep their capacity).
  void bind(SingleCopyArgs a) {
    a_ = std::move(a);
    const SingleCopyContext& ctx = *a_.ctx;
    started_ns_ = -1;
    share_status_ = Status::ok();
    me_ = ctx.rank;
    n_ = ctx.nranks;
    esize_ = datatype_size(a_.type);
    phase_ = Phase::Exchange;
    const uint64_t in_blocks = input_blocks(a_.collective, n_), out_blocks = output_blocks(a_.collective, n_);
    mine_ = Descriptor{};
    mine_.collective = uint32_t(a_.collective);
    mine_.type = a_.type;
    mine_.op = a_.op;
    mine_.root = a_.root;
    mine_.count = a_.count;
    mine_.input_bytes = a_.input ? a_.count * in_blocks * esize_ : 0;
    mine_.output_bytes = a_.output ? a_.count * out_blocks * esize_ : 0;
    if (a_.input) mine_.input = find_window(ctx, a_.input, mine_.input_bytes);
    if (a_.output) mine_.output = find_window(ctx, a_.output, mine_.output_bytes);
    mine_.overlapping = ranges_overlap(a_.input, mine_.input_bytes, a_.output, mine_.output_bytes);
    call_bytes_ = a_.count * std::max(in_blocks, out_blocks) * esize_;
    pulling_ = finish_after_fallback_ = false;
    mine_.pid = ctx.pid;
    mine_.can_pull = ctx.paths->settings().can_pull;
    if (me_ == 0 && ctx.paths->pull_admits(a_.collective, call_bytes_)) {
      started_ns_ = never_pulls(a_.collective, mine_.overlapping) ? -1 : now_ns();  // nothing to learn
      const CopyChoice choice = ctx.paths->choose_copy_path(a_.collective, call_bytes_, mine_.overlapping);
      mine_.path = uint8_t(choice.option);
      mine_.lease = choice.lease;
    }
    descriptors_.assign(n_, Descriptor{});
    dones_.assign(n_, Done{});
    descriptors_[me_] = mine_;
    inputs_.assign(n_, nullptr);
    outputs_.assign(n_, nullptr);
    sent_.assign(n_, false);
    received_.assign(n_, false);
    sent_[me_] = received_[me_] = true;
  }

  // Whether this task's pipes serve `a` (the same communicator and channel).
  bool can_serve(const SingleCopyArgs& a) const { return a.ctx == a_.ctx && a.channel == a_.channel; }

  Status connect() {
    send_pipes_.assign(n_, nullptr);
    recv_pipes_.assign(n_, nullptr);
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      BRAID_TRY(a_.ctx->transport->send_pipe(p, a_.channel, &send_pipes_[p]));
      BRAID_TRY(a_.ctx->transport->recv_pipe(p, a_.channel, &recv_pipes_[p]));
    }
    return Status::ok();
  }

  std::string describe() const override {
    if (phase_ == Phase::Fallback) return a_.fallback->describe();
    return fmt::format("{}({}) count={} {} rank {}/{}", to_string(a_.collective), pulling_ ? "pull" : "mapped",
                       a_.count, datatype_name(a_.type), me_, n_);
  }
  Doorbell* doorbell() const override { return a_.ctx->transport->doorbell(); }
  std::unique_ptr<Task> take_fallback() { return std::move(a_.fallback); }

  void abandon() override {
    if (phase_ == Phase::Fallback) return a_.fallback->abandon();
    SingleCopyGuard* guard = a_.ctx->guard;
    if (!guard || phase_ == Phase::Finished) return;
    // Peers may be inside their share, or about to start it.
    guard->abandoned.store(true);
    wait_for_shares(guard);
  }

  Status poll(bool* progressed, bool* done) override {
    // A peer that left marked the guard for good: waiting for its messages
    // would only end at BRAID_TIMEOUT.
    SingleCopyGuard* guard = a_.ctx->guard;
    if (guard && guard->abandoned.load() && (phase_ == Phase::Exchange || phase_ == Phase::Finish))
      return fail_for_departed_peer(guard);
    switch (phase_) {
      case Phase::Exchange:
        BRAID_TRY(exchange(&mine_, sizeof mine_, descriptors_.data(), progressed));
        if (!all_of(sent_) || !all_of(received_)) break;
        if (Status s = decide(); !s.is_ok()) {
          phase_ = Phase::Finished;  // every rank fails here: nobody touches a buffer
          return s;
        }
        *progressed = true;
        if (phase_ == Phase::Fallback) return poll_fallback(progressed, done);
        share_status_ = guarded_share();
        // A guard that says a peer left: nobody waits for this rank's "done".
        if (phase_ == Phase::Finished) return std::move(share_status_);
        reset_flags();
        phase_ = Phase::Finish;
        [[fallthrough]];
      case Phase::Finish: {
        Done token;
        token.failed = !share_status_.is_ok();
        BRAID_TRY(exchange(&token, sizeof token, dones_.data(), progressed));
        if (!all_of(sent_) || !all_of(received_)) break;
        phase_ = Phase::Finished;
        if (!share_status_.is_ok()) return std::move(share_status_);
        for (int p = 0; p < n_; ++p)
          if (dones_[p].failed)
            return BRAID_ERROR(ncclRemoteError, "rank {} failed its share of the call", p);
        record_path(pulling_ ? CopyPath::Pull : CopyPath::Slots);
        break;
      }
      case Phase::Fallback:
        return poll_fallback(progressed, done);
      case Phase::Finished:
        break;
    }
    *done = phase_ == Phase::Finished;
    return Status::ok();
  }

 private:
  enum class Phase { Exchange, Finish, Fallback, Finished };

  static bool all_of(const std::vector<bool>& v) { return std::all_of(v.begin(), v.end(), [](bool b) { return b; }); }

  Status poll_fallback(bool* progressed, bool* done) {
    BRAID_TRY(a_.fallback->poll(progressed, done));
    if (!*done) return Status::ok();
    if (!finish_after_fallback_) {
      record_path(CopyPath::Slots);
      return Status::ok();
    }
    // Every rank's pipes to its peers are drained of the schedule's
    // messages (each pipe is in order): the "done" tokens follow them.
    *done = false;
    single_copy_stats().slots_finished.fetch_add(1, std::memory_order_relaxed);
    share_status_ = Status::ok();
    reset_flags();
    phase_ = Phase::Finish;
    return poll(progressed, done);
  }

  // Rank 0 times the calls the copy-path chooser decided.
  void record_path(CopyPath path) {
    if (started_ns_ < 0) return;
    a_.ctx->paths->record_copy_path(a_.collective, call_bytes_, path, double(now_ns() - started_ns_) / 1e3);
    started_ns_ = -1;
  }
  void reset_flags() {
    std::fill(sent_.begin(), sent_.end(), false);
    std::fill(received_.begin(), received_.end(), false);
    sent_[me_] = received_[me_] = true;
  }

  // Sends `bytes` of `msg` to every peer and takes one message from each
  // (into received[p] when given), as far as the pipes allow now.
  template <typename Message>
  Status exchange(const Message* msg, size_t bytes, Message* received, bool* progressed) {
    for (int p = 0; p < n_; ++p) {
      if (!sent_[p]) {
        void* slot = nullptr;
        BRAID_TRY(send_pipes_[p]->try_acquire(&slot, bytes));
        if (slot) {
          std::memcpy(slot, msg, bytes);
          BRAID_TRY(send_pipes_[p]->commit(bytes));
          sent_[p] = *progressed = true;
        }
      }
      if (!received_[p]) {
        const void* data = nullptr;
        size_t got = 0;
        BRAID_TRY(recv_pipes_[p]->try_acquire(&data, &got));
        if (data) {
          if (got != bytes)
            return BRAID_ERROR(ncclInternalError, "single-copy path: rank {} sent a {}-byte message, expected {}", p, got,
                               bytes);
          if (received) std::memcpy(&received[p], data, bytes);
          BRAID_TRY(recv_pipes_[p]->release());
          received_[p] = *progressed = true;
        }
      }
    }
    return Status::ok();
  }

  // With every descriptor in hand: mapped (pointers resolved), fallback, or
  // an error every rank reports alike.
  Status decide() {
    for (int p = 0; p < n_; ++p)
      if (!descriptors_[p].same_call(mine_))
        return BRAID_ERROR(ncclInvalidUsage,
                           "ranks disagree on the call: rank {} runs {} count={} type={} op={} root={}, rank {} "
                           "count={} type={} op={} root={}",
                           me_, to_string(a_.collective), mine_.count, mine_.type, mine_.op, mine_.root, p,
                           descriptors_[p].count, descriptors_[p].type, descriptors_[p].op, descriptors_[p].root);
    // Peers store into my output only where a reduction's share lands there;
    // otherwise a rank writes its own output and only its input must be shared.
    const bool shared_outputs = a_.collective == Collective::AllReduce || a_.collective == Collective::Reduce;
    bool direct = true;
    for (int p = 0; p < n_ && direct; ++p) {
      const Descriptor& d = descriptors_[p];
      direct = resolve(p, d.input, d.input_bytes, &inputs_[p]) &&
               (!shared_outputs || resolve(p, d.output, d.output_bytes, &outputs_[p]));
      // In-place AlltoAll: my writes would land on input a peer may not have read.
      if (a_.collective == Collective::AlltoAll && d.overlapping) direct = false;
    }
    if (!shared_outputs) outputs_[me_] = static_cast<char*>(a_.output);
    const bool mapped = direct;
    if (!direct) pulling_ = direct = decide_pull();
    if (!direct) phase_ = Phase::Fallback;
    // The chooser learns only from calls that took the path it chose.
    const CopyPath taken = pulling_ ? CopyPath::Pull : CopyPath::Slots;
    if (mapped || taken != CopyPath(mine_.path)) started_ns_ = -1;
    (direct ? single_copy_stats().ran : single_copy_stats().fallback).fetch_add(1, std::memory_order_relaxed);
    if (pulling_) single_copy_stats().pulled.fetch_add(1, std::memory_order_relaxed);
    if (mapped && a_.stream_output) single_copy_stats().streamed.fetch_add(1, std::memory_order_relaxed);
    BRAID_INFO(kColl, "{}: {}", describe(),
               pulling_ ? "pulls peers' inputs (process_vm_readv)"
               : direct ? "single copy through mapped buffers"
                        : "not every rank's buffers are reachable: runs the schedule");
    return Status::ok();
  }

  // Whether this call pulls (every rank decides alike, from the
  // descriptors).  A rank that could not read its peers at init turns the
  // pull path off for the communicator's later calls, on every rank at once.
  bool decide_pull() {
    HostPaths& paths = *a_.ctx->paths;
    if (!paths.pull_admits(a_.collective, call_bytes_)) return false;
    for (const Descriptor& d : descriptors_)
      if (!d.can_pull) {
        paths.pull_unavailable();
        return false;
      }
    if (CopyPath(descriptors_[0].path) != CopyPath::Pull) {
      paths.lease_slots(a_.collective, call_bytes_, descriptors_[0].overlapping, descriptors_[0].lease);
      finish_after_fallback_ = paths.slot_calls_end_with_done(a_.collective);
      return false;
    }
    // Rank 0 chose pulling, but another rank's call may be in place.
    for (const Descriptor& d : descriptors_)
      if (never_pulls(a_.collective, d.overlapping)) return false;
    return true;
  }

  // Rank p's buffer as this process sees it; false if it is not reachable.
  bool resolve(int p, BufferRef ref, uint64_t bytes, char** out) const {
    *out = nullptr;
    if (bytes == 0) return true;  // NCCL lets this rank pass none
    if (a_.ctx->paths->settings().one_process) {
      *out = reinterpret_cast<char*>(ref.address);
      return true;
    }
    if (ref.window == kNoWindow) return false;
    const HostWindow* w = a_.ctx->windows->by_seq(ref.window);
    if (!w || ref.offset + bytes > w->ranks[p].size) return false;
    *out = w->views[p] + ref.offset;
    return true;
  }

  // [lo, hi) of `count` elements: rank r's share, cut on 64-byte lines.
  void share(uint64_t count, int r, uint64_t* lo, uint64_t* hi) const {
    const uint64_t line = std::max<uint64_t>(1, 64 / esize_);
    const uint64_t lines = (count + line - 1) / line;
    *lo = std::min(count, lines * uint64_t(r) / uint64_t(n_) * line);
    *hi = std::min(count, lines * uint64_t(r + 1) / uint64_t(n_) * line);
  }

  // The reduction of elements [lo, hi) (offset `shift` elements into each
  // input) into every destination in `dsts`, inputs folded in rank order
  // (a fixed order gives reproducible bits).
  void reduce_into(uint64_t shift, uint64_t lo, uint64_t hi, char* const* dsts, int ndsts, bool stream) {
    if (hi <= lo) return;
    src_ptrs_.clear();
    dst_ptrs_.clear();
    for (char* in : inputs_) src_ptrs_.push_back(in + (shift + lo) * esize_);
    for (int d = 0; d < ndsts; ++d) dst_ptrs_.push_back(dsts[d] + lo * esize_);
    reduce_many(dst_ptrs_.data(), int(dst_ptrs_.size()), src_ptrs_.data(), int(src_ptrs_.size()), hi - lo, a_.type,
                a_.op, a_.divide_output_by, stream);
  }

  void copy(char* dst, const char* src, uint64_t bytes, bool stream) {
    if (dst != src && bytes) copy_unfenced(dst, src, bytes, stream);
  }

  // run_share() under the communicator's guard, where it has one.
  Status guarded_share() {
    SingleCopyGuard* guard = a_.ctx->guard;
    if (pulling_) return run_pull();
    if (!guard) {
      run_share();
      return Status::ok();
    }
    // seq_cst, paired with abandon(): either it sees this share in progress
    // and waits for it, or this sees its mark and stays off the buffers.
    guard->sharing.fetch_add(1);
    if (guard->abandoned.load()) {
      guard->sharing.fetch_sub(1);
      return fail_for_departed_peer(guard);
    }
    run_share();
    guard->sharing.fetch_sub(1);
    return Status::ok();
  }

  // Peers already inside their share may be reading this rank's buffers,
  // which the caller may free once the call returns.
  static void wait_for_shares(SingleCopyGuard* guard) {
    while (guard->sharing.load() > 0) std::this_thread::yield();
  }

  Status fail_for_departed_peer(SingleCopyGuard* guard) {
    wait_for_shares(guard);
    phase_ = Phase::Finished;
    return BRAID_ERROR(ncclRemoteError, "{}: a peer left a single-copy call early (abort, timeout or failure)",
                       describe());
  }

  void run_share() {
    const uint64_t count = a_.count, bytes = count * esize_;
    const bool stream = a_.stream_output;
    uint64_t lo = 0, hi = 0;
    switch (a_.collective) {
      case Collective::AllReduce:
        share(count, me_, &lo, &hi);
        reduce_into(0, lo, hi, outputs_.data(), n_, stream);
        break;
      case Collective::Reduce:
        share(count, me_, &lo, &hi);
        reduce_into(0, lo, hi, &outputs_[a_.root], 1, stream);
        break;
      case Collective::ReduceScatter:
        reduce_into(uint64_t(me_) * count, 0, count, &outputs_[me_], 1, stream);
        break;
      case Collective::AllGather:
        for (int k = 0; k < n_; ++k) copy(outputs_[me_] + k * bytes, inputs_[k], bytes, stream);
        break;
      case Collective::AlltoAll:
        for (int k = 0; k < n_; ++k) copy(outputs_[me_] + k * bytes, inputs_[k] + me_ * bytes, bytes, stream);
        break;
      case Collective::Broadcast:
        copy(outputs_[me_], inputs_[a_.root], bytes, stream);
        break;
      default:
        break;  // single_copy_serves() admits none other
    }
    if (stream) store_fence();  // streaming stores are weakly ordered: before "done"
  }

  // The pull path's share: every block of my output that comes from a peer
  // is read out of that peer's input; my own block is a local copy.  Peers
  // in turn from the next rank on, so ranks do not all read one peer first.
  Status run_pull() {
    const uint64_t bytes = a_.count * esize_;
    char* out = static_cast<char*>(a_.output);
    const char* in = static_cast<const char*>(a_.input);
    auto pull = [&](int p, uint64_t offset, char* to) {
      return cma_read(descriptors_[p].pid, to, descriptors_[p].input.address + offset, bytes);
    };
    switch (a_.collective) {
      case Collective::AllGather:
        copy(out + me_ * bytes, in, bytes, false);
        for (int k = 1; k < n_; ++k) {
          const int p = (me_ + k) % n_;
          BRAID_TRY(pull(p, 0, out + p * bytes));
        }
        break;
      case Collective::AlltoAll:
        copy(out + me_ * bytes, in + me_ * bytes, bytes, false);
        for (int k = 1; k < n_; ++k) {
          const int p = (me_ + k) % n_;
          BRAID_TRY(pull(p, me_ * bytes, out + p * bytes));
        }
        break;
      case Collective::Broadcast:
        if (me_ == a_.root) copy(out, in, bytes, false);
        else BRAID_TRY(pull_broadcast(out, bytes));
        break;
      case Collective::AllReduce: {
        uint64_t lo = 0, hi = 0;
        share(a_.count, me_, &lo, &hi);
        return pull_reduce(0, lo, hi, -1);
      }
      case Collective::Reduce: {
        uint64_t lo = 0, hi = 0;
        share(a_.count, me_, &lo, &hi);
        return pull_reduce(0, lo, hi, a_.root);
      }
      case Collective::ReduceScatter:
        return pull_reduce(uint64_t(me_) * a_.count, 0, a_.count, me_);
      default:
        return BRAID_ERROR(ncclInternalError, "the pull path does not serve this collective");
    }
    return Status::ok();
  }

  // A Broadcast's pull: every peer reads the root's one buffer.  Readers
  // that all read it from its start, at once, were slow (4 processes on 2
  // cores; likely the kernel pinning the same pages for each), so the
  // buffer is cut into one page-aligned segment per reader and each reader
  // starts at its own, going round: they read different pages, as the
  // other copy collectives' readers read different peers (perf/results/
  // oversubscribed_pull_20261126.txt, section 5).
  Status pull_broadcast(char* out, uint64_t bytes) {
    const int readers = n_ - 1, me = (me_ - a_.root - 1 + n_) % n_;
    const uint64_t share = (bytes + uint64_t(readers) - 1) / uint64_t(readers);
    const uint64_t page = page_size(), segment = (share + page - 1) / page * page;
    const Descriptor& root = descriptors_[a_.root];
    for (int k = 0; k < readers; ++k) {
      const uint64_t lo = std::min(bytes, uint64_t((me + k) % readers) * segment);
      const uint64_t hi = std::min(bytes, lo + segment);
      if (lo < hi) BRAID_TRY(cma_read(root.pid, out + lo, root.input.address + lo, hi - lo));
    }
    return Status::ok();
  }

  // A reduction's share on the pull path: elements [lo, hi) of the result
  // (offset `shift` elements into every input), a chunk at a time: the
  // chunk of every peer's input is pulled into staging, folded with mine
  // in rank order (the mapped path's bits), and the result stored to
  // `dest`'s output, or to every rank's (dest -1), pushed with
  // process_vm_writev where the output is a peer's.  The staging is
  // (n + 1) chunks, read back while still in the caches, so each remote
  // byte crosses memory once each way, as on the mapped path.  Safe in
  // place: the part of a peer's buffer this rank writes is its share, which
  // only this rank reads, and it reads each chunk before writing it.
  Status pull_reduce(uint64_t shift, uint64_t lo, uint64_t hi, int dest) {
    const uint64_t chunk = std::max<uint64_t>(1, kPullChunkBytes / esize_);
    const bool push = dest != me_;  // some result goes to a peer's output
    stage_.resize(size_t(n_ + 1) * kPullChunkBytes + 64);
    char* stage = stage_.data() + (64 - reinterpret_cast<uintptr_t>(stage_.data()) % 64) % 64;
    char* result = stage + size_t(n_) * kPullChunkBytes;  // the folded chunk, where it is pushed
    const char* in = static_cast<const char*>(a_.input);
    char* out = static_cast<char*>(a_.output);
    const bool stream = a_.stream_output;
    src_ptrs_.resize(n_);  // every entry is set for each chunk
    for (uint64_t b = lo; b < hi; b += chunk) {
      const uint64_t m = std::min(chunk, hi - b), bytes = m * esize_, from = (shift + b) * esize_;
      for (int k = 0; k < n_; ++k) {
        const int p = (me_ + k) % n_;  // from the next rank on, as in run_pull
        if (p == me_) {
          src_ptrs_[p] = in + from;
          continue;
        }
        char* staged = stage + size_t(p) * kPullChunkBytes;
        BRAID_TRY(cma_read(descriptors_[p].pid, staged, descriptors_[p].input.address + from, bytes));
        src_ptrs_[p] = staged;
      }
      void* dst = push ? result : out + b * esize_;
      reduce_many(&dst, 1, src_ptrs_.data(), n_, m, a_.type, a_.op, a_.divide_output_by, false);
      if (!push) continue;
      for (int k = 0; k < n_; ++k) {
        const int p = (me_ + k) % n_;
        if (dest >= 0 && p != dest) continue;
        if (p == me_) copy(out + b * esize_, result, bytes, stream);
        else BRAID_TRY(cma_write(descriptors_[p].pid, descriptors_[p].output.address + b * esize_, result, bytes));
      }
    }
    if (stream) store_fence();  // before "done"
    return Status::ok();
  }

  SingleCopyArgs a_;
  int me_ = 0, n_ = 0;
  size_t esize_ = 0;
  uint64_t call_bytes_ = 0;    // its larger buffer: what the thresholds and size classes go by
  bool pulling_ = false;       // decided: the pull path
  bool finish_after_fallback_ = false;  // a slots call ends with the "done" exchange
  int64_t started_ns_ = -1;    // rank 0, a call the copy-path chooser decided: when it started
  Status share_status_;
  std::vector<Done> dones_;
  Phase phase_ = Phase::Exchange;
  Descriptor mine_;
  std::vector<Descriptor> descriptors_;
  std::vector<char*> inputs_, outputs_;  // every rank's buffers, as seen here
  std::vector<const void*> src_ptrs_;
  std::vector<char> stage_;  // the pull path's reductions: peers' chunks, and the result
  std::vector<void*> dst_ptrs_;
  std::vector<bool> sent_, received_;
  std::vector<SendPipe*> send_pipes_;
  std::vector<RecvPipe*> recv_pipes_;
};

}  // namespace

void recycle_task(std::unique_ptr<Task> done, std::unique_ptr<Task>* schedule_task,
                  std::unique_ptr<Task>* single_copy_task) {
  if (auto* direct = dynamic_cast<SingleCopyTask*>(done.get())) {
    *schedule_task = direct->take_fallback();
    *single_copy_task = std::move(done);
  } else {
    *schedule_task = std::move(done);
  }
}

std::shared_ptr<SingleCopyGuard> single_copy_guard_for(uint64_t comm_hash) {
  static std::mutex mutex;
  static auto* guards = new std::map<uint64_t, std::weak_ptr<SingleCopyGuard>>;  // never destroyed: atexit paths
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = guards->begin(); it != guards->end();) it = it->second.expired() ? guards->erase(it) : std::next(it);
  std::shared_ptr<SingleCopyGuard> guard = (*guards)[comm_hash].lock();
  if (!guard) (*guards)[comm_hash] = guard = std::make_shared<SingleCopyGuard>();
  return guard;
}

SingleCopyStats& single_copy_stats() {
  static SingleCopyStats stats;
  return stats;
}

Status make_single_copy_task(SingleCopyArgs args, std::unique_ptr<Task> reuse, std::unique_ptr<Task>* out) {
  if (!args.fallback) return BRAID_ERROR(ncclInternalError, "single-copy task without a fallback schedule");
  if (auto* reusable = dynamic_cast<SingleCopyTask*>(reuse.get()); reusable && reusable->can_serve(args)) {
    reusable->bind(std::move(args));
    *out = std::move(reuse);
    return Status::ok();
  }
  auto task = std::make_unique<SingleCopyTask>();
  task->bind(std::move(args));
  BRAID_TRY(task->connect());
  *out = std::move(task);
  return Status::ok();
}

}  // namespace braid

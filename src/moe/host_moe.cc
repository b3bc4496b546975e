#include "src/moe/host_moe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "braid/moe/calls.h"
#include "braid/moe/plan.h"
#include "braid/moe/protocol.h"
#include "braid/moe/pulls.h"
#include "src/base/deadline.h"
#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"
#include "src/ops/weighted_sum.h"
#include "src/shim/library_use.h"

namespace braid::moe {

HostMoe::HostMoe(ncclComm_t comm, int rank, const Shape& shape, const braidMoeConfig_t& config)
    : comm_(comm),
      rank_(rank),
      shape_(shape),
      window_(WindowLayout::of(shape, config.zeroCopy)),
      layout_(config.layout == braidMoeRankMajor ? OutputLayout::RankMajor : OutputLayout::ExpertMajor),
      dtype_(config.dtype),
      timeout_ms_(wait_bound_ms(config.timeoutMs)),
      pool_(config.blocks),
      dispatch_arrivals_(size_t(shape.nranks), 0),
      combine_arrivals_(size_t(shape.nranks), 0),
      wanted_(size_t(shape.experts)),
      sent_(size_t(shape.experts)),
      received_(size_t(shape.blocks())),
      first_row_(size_t(shape.blocks())),
      combine_pulled_(size_t(shape.nranks)),
      dispatch_pulled_(size_t(shape.nranks)) {}

HostMoe::~HostMoe() = default;

Status HostMoe::create(ncclComm_t comm, const braidMoeConfig_t& config, std::unique_ptr<MoeBackend>* out) {
  int rank = 0;
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  Shape shape;
  BRAID_TRY(agree_config(comm, config, -1, &shape));
  std::unique_ptr<HostMoe> moe(new HostMoe(comm, rank, shape, config));
  BRAID_TRY(OwnWindow::open(comm, moe->window_.bytes, moe->window_.dispatch_data, "MoE", &moe->own_));
  moe->agents_.assign(size_t(moe->pool_.blocks()), HostMemory(rank, &moe->own_->routes()));
  *out = std::move(moe);
  return Status::ok();
}

Status HostMoe::destroy() {
  if (!own_) return Status::ok();
  Status s = own_->close(comm_);
  own_.reset();
  return std::move(s).context("braidMoeDestroy");
}

Status HostMoe::wait_all(uint32_t epoch, bool dispatch_half, std::vector<int32_t>* counts, const char* what) {
  const auto* signals = reinterpret_cast<const uint64_t*>(
      own_->base(rank_) + (dispatch_half ? window_.dispatch_signals : window_.combine_signals));
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(timeout_ms_));
  // An abort or revoke of the communicator ends the wait too: the Abort
  // waits for this call (handle_call.h), and a revoked one takes no work.
  auto expired = [&] { return deadline.expired() || comm_stopping(comm_); };
  // Senders over RMA first: once their words' signals are in, the words
  // below are already there.  Then the one deadline bounds the rest.
  Status rma = own_->routes().wait_from_rma_sources(WindowRoutes::kWordSignal, word_batches(shape_.local_experts),
                                                    deadline, comm_);
  if (!rma.is_ok() && comm_stopping(comm_)) return stopped_error(what);
  if (!rma.is_ok())
    return BRAID_ERROR(rma.code(), "rank {}: {} epoch {}: waiting for the signals of the ranks reached over RMA "
                       "(bound {} ms): {}", rank_, what, epoch, timeout_ms_, rma.message());
  HostMemory mm(rank_, &own_->routes());
  const int32_t L = shape_.local_experts;
  int32_t failed_sender = -1;  // the first whose word said kFailedSender (it failed, or went past the call)
  for (int32_t i = 0; i < shape_.nranks; ++i) {
    const int32_t peer = (rank_ + i) % shape_.nranks;  // this rank's own blocks first
    for (int32_t le = 0; le < L; ++le) {
      uint32_t count = 0;
      const WaitResult waited = wait(mm, signals, shape_, peer, le, epoch, &count, expired);
      if (waited != WaitResult::Ok && comm_stopping(comm_)) return stopped_error(what);
      if (waited != WaitResult::Ok)
        return BRAID_ERROR(ncclTimeout,
                           "rank {}: {} epoch {}: no signal from rank {} for local expert {} within {} ms (the rank "
                           "is late, gone, or failed its call)",
                           rank_, what, epoch, peer, le, timeout_ms_);
      mm.progressed();
      if (count == kFailedSender) {
        if (failed_sender < 0) failed_sender = peer;
        count = 0;
      } else if (count > uint32_t(shape_.capacity)) {
        return BRAID_ERROR(ncclInternalError, "rank {}: {}: rank {} signalled {} rows for local expert {}, capacity {}",
                           rank_, what, peer, count, le, shape_.capacity);
      }
      (*counts)[size_t(peer) * L + le] = int32_t(count);
    }
  }
  if (failed_sender >= 0)
    return BRAID_ERROR(ncclRemoteError,
                       "rank {}: {} epoch {}: the call failed on another rank (rank {}'s word says so; the rank "
                       "with the bad argument says which), so it fails on every rank; the handle takes the next "
                       "dispatch", rank_, what, epoch, failed_sender);
  return Status::ok();
}

void HostMoe::collect_stats() {
  for (auto& a : agents_) {
    const Counters& c = a.counters();
    stats_.payloadBytesRemote += c.bytes_remote;
    stats_.signalBytesRemote += c.signal_bytes_remote;
    stats_.bytesLocal += c.bytes_local;
    stats_.signalsRemote += c.signals_remote;
    stats_.signalsLocal += c.signals_local;
    stats_.fences += c.fences;
    a.clear();
  }
}

namespace {

// The first expert a token's top-k row names twice (its rows would count
// against one (source, expert) block's capacity twice over, and overflow
// the worst-case capacity), or -1.
int32_t repeated_expert(const int32_t* row, int32_t K, std::vector<int32_t>* sorted) {
  if (K <= 32) {  // the usual top-k: no copy
    for (int32_t k = 1; k < K; ++k)
      if (row[k] >= 0 && std::find(row, row + k, row[k]) != row + k) return row[k];
    return -1;
  }
  sorted->assign(row, row + K);
  std::sort(sorted->begin(), sorted->end());
  for (size_t k = 1; k < sorted->size(); ++k)
    if ((*sorted)[k] >= 0 && (*sorted)[k] == (*sorted)[k - 1]) return (*sorted)[k];
  return -1;
}

}  // namespace

std::string HostMoe::plan_dispatch(const int32_t* topk, int32_t ntokens, PlanResult* plan_out) {
  const int32_t K = shape_.top_k;
  topk_.assign(topk, topk + int64_t(ntokens) * K);
  slots_.resize(topk_.size());
  const PlanResult plan = plan_routes(shape_, topk_.data(), ntokens, wanted_.data(), slots_.data());
  if (plan.bad_token >= 0) {
    const int32_t* row = &topk_[size_t(plan.bad_token) * K];
    int32_t bad = 0;
    for (int32_t k = 0; k < K; ++k)
      if (row[k] < -1 || row[k] >= shape_.experts) bad = row[k];
    return fmt::format("token {} routes to expert {}, not in [0, {}) or -1", plan.bad_token, bad, shape_.experts);
  }
  std::vector<int32_t> sorted;
  for (int32_t t = 0; t < ntokens; ++t)
    if (const int32_t e = repeated_expert(&topk_[size_t(t) * K], K, &sorted); e >= 0)
      return fmt::format("token {} names expert {} more than once in its top-k", t, e);
  for (int32_t e = 0; e < shape_.experts; ++e) sent_[size_t(e)] = sent_rows(shape_, wanted_.data(), e);
  tokens_ = ntokens;
  *plan_out = plan;
  return {};
}

Status HostMoe::check_intact(const char* call) const {
  if (broken_)
    return BRAID_ERROR(ncclInvalidUsage, "{}: an earlier call of this handle did not complete (a peer late or gone): "
                       "its peers may still use the windows; destroy the handle", call);
  return Status::ok();
}

Status HostMoe::settle(Status waited) {
  if (!waited.is_ok() && waited.code() != ncclRemoteError) broken_ = true;
  return waited;
}

Status HostMoe::failed_call(const char* call, const std::string& problem, Status waited) {
  if (waited.is_ok() || waited.code() == ncclRemoteError)
    return BRAID_ERROR(ncclInvalidArgument, "{}: {} (the call fails on every rank; the handle takes the next "
                       "dispatch)", call, problem);
  return BRAID_ERROR(ncclInvalidArgument, "{}: {}; then, waiting for the peers' words: {}", call, problem,
                     waited.message());
}

Status HostMoe::dispatch(const void* tokens, const int32_t* topk, int32_t ntokens, void* out, int32_t* recv_counts,
                         int64_t* dropped, cudaStream_t) {
  BRAID_TRY(check_outside_group("braidMoeDispatch"));
  BRAID_TRY(check_intact("braidMoeDispatch"));
  if (combine_due_)
    return BRAID_ERROR(ncclInvalidUsage, "braidMoeDispatch: the last dispatch's combine has not run (dispatch and "
                       "combine alternate: the windows still hold that call's rows)");
  // A bad argument fails the call on every rank (host_moe.h): this rank
  // still takes part, with no rows and kFailedSender words.
  std::string problem = dispatch_problem(shape_, tokens, topk, ntokens, out, recv_counts);
  PlanResult plan;
  if (problem.empty()) problem = plan_dispatch(topk, ntokens, &plan);
  const bool failed = !problem.empty();

  const uint64_t call = ++dispatch_calls_;
  const uint32_t epoch = dispatch_epoch_ = next_epoch(dispatch_epoch_);
  const int B = pool_.blocks();
  publish_dispatch_pulls(!failed && window_.dispatch_buffer && tokens == own_->base(rank_) + window_.dispatch_buffer);
  const CallState c{rank_, call, epoch, dispatch_arrivals_.data(), failed};
  const DispatchRows rows{static_cast<const char*>(tokens), topk_.data(), slots_.data(), sent_.data(), tokens_,
                          dispatch_pulled_.data()};
  pool_.run([&](int b) { dispatch_agent(agents_[size_t(b)], shape_, window_, c, rows, b, B); });
  collect_stats();
  BRAID_TRY(settle(std::move(own_->routes().failure()).context(fmt::format("rank {}: dispatch", rank_))));
  Status waited = settle(wait_all(epoch, true, &received_, "dispatch"));
  if (failed) return failed_call("braidMoeDispatch", problem, std::move(waited));
  BRAID_TRY(std::move(waited));
  stats_.dispatches++;
  stats_.rowsRouted += uint64_t(plan.routed);
  stats_.rowsDropped += uint64_t(plan.dropped);
  if (dropped) *dropped = plan.dropped;

  output_offsets(shape_, layout_, received_.data(), first_row_.data());
  const int32_t L = shape_.local_experts;
  // Rows read in a source's buffer count as the payload its put would have
  // (as combine's do): each block thread adds its total once.
  std::atomic<uint64_t> pulled_remote{0}, pulled_local{0};
  pool_.run([&](int b) {
    uint64_t remote = 0, local = 0;
    for (int64_t i = b; i < shape_.blocks(); i += B) {
      const int32_t src = int32_t(i / L), le = int32_t(i % L);
      (src == rank_ ? local : remote) += copy_block_out(src, le, static_cast<char*>(out));
    }
    pulled_remote.fetch_add(remote, std::memory_order_relaxed);
    pulled_local.fetch_add(local, std::memory_order_relaxed);
  });
  stats_.payloadBytesRemote += pulled_remote.load(std::memory_order_relaxed);
  stats_.bytesLocal += pulled_local.load(std::memory_order_relaxed);
  std::memcpy(recv_counts, received_.data(), received_.size() * sizeof(int32_t));
  combine_due_ = true;
  return Status::ok();
}

Status HostMoe::dispatch_buffer(void** out) {
  return zero_copy_buffer(own_->base(rank_), window_.dispatch_buffer, "braidMoeGetDispatchBuffer",
                          "braidMoeZeroCopyDispatch", out);
}

void HostMoe::publish_dispatch_pulls(bool from_buffer) {
  for (int32_t dst = 0; dst < shape_.nranks; ++dst)
    dispatch_pulled_[size_t(dst)] = from_buffer && own_->routes().reached_by(dst);
  if (!window_.dispatch_buffer) return;
  char* mine = own_->base(rank_);
  write_dispatch_pulls(mine, shape_, window_, dispatch_pulled_.data(), false, 0, 1);
  if (from_buffer)
    write_pull_list(mine, shape_, window_, topk_.data(), slots_.data(), tokens_, dispatch_pulled_.data(), 0, 1);
}

uint64_t HostMoe::copy_block_out(int32_t src, int32_t le, char* out) const {
  const size_t i = size_t(src) * shape_.local_experts + le;
  const int64_t row_bytes = shape_.row_bytes(), rows = received_[i];
  char* to = out + first_row_[i] * row_bytes;
  if (window_.dispatch_buffer && own_->routes().direct(src) && dispatch_pulled(own_->base(src), window_, rank_)) {
    for (int32_t j = 0; j < rows; ++j)
      std::memcpy(to + j * row_bytes, pulled_token_row(own_->base(src), shape_, window_, rank_, le, j),
                  size_t(row_bytes));
    return uint64_t(rows * row_bytes);
  }
  std::memcpy(to, own_->base(rank_) + window_.dispatch_data + WindowLayout::row_offset(shape_, src, le, 0),
              size_t(rows * row_bytes));
  return 0;
}

Status HostMoe::combine_buffer(void** out) {
  return zero_copy_buffer(own_->base(rank_), window_.combine_buffer, "braidMoeGetCombineBuffer",
                          "braidMoeZeroCopyCombine", out);
}

void HostMoe::publish_combine_pulls(bool in_buffer) {
  for (int32_t src = 0; src < shape_.nranks; ++src)
    combine_pulled_[size_t(src)] = in_buffer && own_->routes().reached_by(src);
  if (window_.combine_buffer)
    write_pull_index(own_->base(rank_), shape_, window_, first_row_.data(), combine_pulled_.data(), false, 0, 1);
}

const char* HostMoe::returned_row(int64_t i, bool* pulled) const {
  const int32_t e = topk_[size_t(i)], owner = shape_.owner(e), le = shape_.local(e), slot = slots_[size_t(i)];
  *pulled = false;
  if (window_.combine_buffer && own_->routes().direct(owner))
    if (const char* row = pulled_result_row(own_->base(owner), shape_, window_, rank_, le, slot)) {
      *pulled = true;
      return row;
    }
  return own_->base(rank_) + window_.combine_data + WindowLayout::row_offset(shape_, owner, le, slot);
}

Status HostMoe::combine(const void* expert_out, const float* weights, void* out, cudaStream_t) {
  BRAID_TRY(check_outside_group("braidMoeCombine"));
  BRAID_TRY(check_intact("braidMoeCombine"));
  if (!combine_due_)
    return BRAID_ERROR(ncclInvalidUsage, "braidMoeCombine: no dispatch to combine (dispatch and combine alternate)");
  // As dispatch's: a bad argument fails the call on every rank.
  const std::string problem = combine_problem(tokens_, expert_out, weights, out);
  const bool failed = !problem.empty();

  const uint64_t call = ++combine_calls_;
  const uint32_t epoch = combine_epoch_ = next_epoch(combine_epoch_);
  const int B = pool_.blocks();
  const int64_t row_bytes = shape_.row_bytes();
  publish_combine_pulls(!failed && window_.combine_buffer && expert_out == own_->base(rank_) + window_.combine_buffer);
  // Each received block goes back to its source, to the rows it came from.
  const CallState c{rank_, call, epoch, combine_arrivals_.data(), failed};
  const CombineRows rows{static_cast<const char*>(expert_out), received_.data(), first_row_.data(),
                         combine_pulled_.data()};
  pool_.run([&](int b) { combine_agent(agents_[size_t(b)], shape_, window_, c, rows, b, B); });
  collect_stats();
  BRAID_TRY(settle(std::move(own_->routes().failure()).context(fmt::format("rank {}: combine", rank_))));

  std::vector<int32_t> back(size_t(shape_.blocks()));
  Status waited = settle(wait_all(epoch, false, &back, "combine"));
  combine_due_ = false;  // the call is over: a dispatch comes next (or, if broken_, none)
  if (failed) return failed_call("braidMoeCombine", problem, std::move(waited));
  BRAID_TRY(std::move(waited));
  stats_.combines++;
  for (int32_t e = 0; e < shape_.experts; ++e)
    if (back[size_t(e)] != sent_[size_t(e)])
      return BRAID_ERROR(ncclInternalError, "rank {}: combine: expert {} returned {} rows, {} were sent", rank_, e,
                         back[size_t(e)], sent_[size_t(e)]);

  // Summed in address order, not token by token: one scan of each place
  // the rows are in, which the prefetcher follows, into a float sum for
  // every token, took the sum from 3.0 to 1.8 ms at the shape
  // (perf/results/moe_host_combine_20261202.txt).  Rows read in a peer's
  // buffer count as payload it would have put (stats), so the totals do
  // not depend on where the results were read.  Each block sums its own
  // tokens.
  const int32_t K = shape_.top_k;
  returned_.clear();
  for (int64_t i = 0; i < int64_t(tokens_) * K; ++i) {
    if (slots_[size_t(i)] == kNoSlot) continue;
    bool pulled = false;
    returned_.emplace_back(reinterpret_cast<uintptr_t>(returned_row(i, &pulled)), i);
    if (!pulled) continue;
    if (shape_.owner(topk_[size_t(i)]) == rank_) stats_.bytesLocal += uint64_t(row_bytes);
    else stats_.payloadBytesRemote += uint64_t(row_bytes);
  }
  std::sort(returned_.begin(), returned_.end());
  const size_t H = size_t(shape_.hidden);
  sums_.resize(size_t(tokens_) * H);
  pool_.run([&](int b) {
    const int64_t lo = int64_t(tokens_) * b / B, hi = int64_t(tokens_) * (b + 1) / B;
    std::fill(sums_.begin() + lo * int64_t(H), sums_.begin() + hi * int64_t(H), 0.0f);
    for (const auto& [row, i] : returned_) {
      const int64_t t = i / K;
      if (t >= lo && t < hi)
        add_scaled_row(&sums_[size_t(t) * H], reinterpret_cast<const char*>(row), weights[i], H, dtype_);
    }
    for (int64_t t = lo; t < hi; ++t)
      store_row(static_cast<char*>(out) + t * row_bytes, &sums_[size_t(t) * H], H, dtype_);
  });
  return Status::ok();
}

Status HostMoe::stats(braidMoeStats_t* out) {
  *out = stats_;
  return Status::ok();
}

}  // namespace braid::moe

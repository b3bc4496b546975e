#include "src/moe/host_moe.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "braid/moe/calls.h"
#include "braid/moe/plan.h"
#include "braid/moe/protocol.h"
#include "src/base/deadline.h"
#include "src/base/env.h"
#include "src/moe/elements.h"
#include "src/moe/nccl_call.h"

namespace braid::moe {

namespace {

// What a rank's config fails, or "" (the rank count, the backend).
std::string check_config(const braidMoeConfig_t& c, int nranks, int device) {
  if (c.size != sizeof(braidMoeConfig_t))
    return fmt::format("config.size is {}, not sizeof(braidMoeConfig_t) = {} (use BRAID_MOE_CONFIG_INITIALIZER)",
                       c.size, sizeof(braidMoeConfig_t));
  if (device >= 0)
    return "the communicator is on a CUDA device; MoE dispatch/combine runs on the host backend only (the device "
           "library is issue 40's GPU part)";
  if (c.numExperts <= 0 || c.numExperts % nranks != 0)
    return fmt::format("numExperts {} is not a positive multiple of the {} ranks", c.numExperts, nranks);
  if (c.topK <= 0 || c.topK > c.numExperts)
    return fmt::format("topK {} is not in [1, numExperts = {}]", c.topK, c.numExperts);
  if (c.hidden <= 0) return fmt::format("hidden {} is not positive", c.hidden);
  if (c.maxTokensPerRank <= 0) return fmt::format("maxTokensPerRank {} is not positive", c.maxTokensPerRank);
  if (element_bytes(c.dtype) == 0)
    return fmt::format("dtype {} is not a MoE row type (float32, float16, bfloat16, fp8 e4m3, fp8 e5m2)",
                       int(c.dtype));
  if (c.tileRows < 0 || c.tileRows > 4096) return fmt::format("tileRows {} is not in [0, 4096]", c.tileRows);
  if (!(c.capacityFactor >= 0.0f) || c.capacityFactor > 1e6f)
    return fmt::format("capacityFactor {} is not 0 (worst case) or positive", c.capacityFactor);
  if (c.layout != braidMoeExpertMajor && c.layout != braidMoeRankMajor)
    return fmt::format("layout {} is neither braidMoeExpertMajor nor braidMoeRankMajor", int(c.layout));
  if (c.blocks < 0 || c.blocks > 64) return fmt::format("blocks {} is not in [0, 64]", c.blocks);
  if (c.timeoutMs < 0) return fmt::format("timeoutMs {} is negative", c.timeoutMs);
  // The window: two halves of every block full.
  const double bytes = 2.0 * double(nranks) * (c.numExperts / nranks) * double(c.maxTokensPerRank + c.tileRows) *
                       double(c.hidden) * element_bytes(c.dtype);
  if (bytes > double(int64_t(1) << 46)) return fmt::format("the window would take {:.3g} bytes", bytes);
  return "";
}

Shape shape_of(const braidMoeConfig_t& c, int nranks) {
  Shape s;
  s.nranks = nranks;
  s.experts = c.numExperts;
  s.local_experts = c.numExperts / nranks;
  s.top_k = c.topK;
  s.hidden = c.hidden;
  s.elem_bytes = element_bytes(c.dtype);
  s.max_tokens = c.maxTokensPerRank;
  s.tile_rows = c.tileRows > 0 ? c.tileRows : 1;
  s.capacity = c.capacityFactor > 0
                   ? factor_capacity(s.max_tokens, s.top_k, s.experts, double(c.capacityFactor), s.tile_rows)
                   : worst_case_capacity(s.max_tokens, s.tile_rows);
  return s;
}

// What every rank must have alike, then whether this rank's config passed.
constexpr int kAgreed = 9;
void agreement(const Shape& s, const braidMoeConfig_t& c, bool ok, int64_t* v) {
  v[0] = ok;
  v[1] = s.experts;
  v[2] = s.top_k;
  v[3] = s.hidden;
  v[4] = s.max_tokens;
  v[5] = int64_t(c.dtype);
  v[6] = s.tile_rows;
  v[7] = s.capacity;
  v[8] = int64_t(c.layout);
}
const char* const kAgreedNames[kAgreed] = {"ok",  "numExperts", "topK",     "hidden", "maxTokensPerRank",
                                           "dtype", "tileRows", "capacity", "layout"};

int timeout_of(const braidMoeConfig_t& c) {
  return c.timeoutMs > 0 ? c.timeoutMs : int(std::min<int64_t>(env_int("BRAID_TIMEOUT") * 1000, INT32_MAX));
}

}  // namespace

HostMoe::HostMoe(ncclComm_t comm, int rank, const Shape& shape, const braidMoeConfig_t& config)
    : comm_(comm),
      rank_(rank),
      shape_(shape),
      window_(WindowLayout::of(shape)),
      layout_(config.layout == braidMoeRankMajor ? OutputLayout::RankMajor : OutputLayout::ExpertMajor),
      dtype_(config.dtype),
      timeout_ms_(timeout_of(config)),
      pool_(config.blocks),
      dispatch_arrivals_(size_t(shape.nranks), 0),
      combine_arrivals_(size_t(shape.nranks), 0),
      wanted_(size_t(shape.experts)),
      sent_(size_t(shape.experts)),
      received_(size_t(shape.blocks())),
      first_row_(size_t(shape.blocks())) {}

HostMoe::~HostMoe() = default;

Status HostMoe::create(ncclComm_t comm, const braidMoeConfig_t& config, std::unique_ptr<HostMoe>* out) {
  int nranks = 0, rank = 0, device = -1;
  BRAID_TRY(nccl_status(comm, ncclCommCount(comm, &nranks), "ncclCommCount"));
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  BRAID_TRY(nccl_status(comm, ncclCommCuDevice(comm, &device), "ncclCommCuDevice"));

  // Every rank takes part in the agreement even with a bad config, so that
  // all fail alike instead of some waiting for the others in the window's
  // registration.
  const std::string problem = check_config(config, nranks, device);
  const Shape shape = problem.empty() ? shape_of(config, nranks) : Shape{};
  std::vector<int64_t> mine(kAgreed), all(size_t(kAgreed) * nranks);
  agreement(shape, config, problem.empty(), mine.data());
  BRAID_TRY(nccl_status(comm, ncclAllGather(mine.data(), all.data(), kAgreed, ncclInt64, comm, nullptr),
                        "the config agreement (ncclAllGather)"));
  if (!problem.empty()) return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: {}", problem);
  for (int r = 0; r < nranks; ++r) {
    const int64_t* theirs = &all[size_t(r) * kAgreed];
    if (!theirs[0])
      return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: rank {}'s config is invalid (its error says why)", r);
    for (int i = 1; i < kAgreed; ++i)
      if (theirs[i] != mine[i])
        return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: rank {} has {} = {}, rank {} has {}", r,
                           kAgreedNames[i], theirs[i], rank, mine[i]);
  }

  std::unique_ptr<HostMoe> moe(new HostMoe(comm, rank, shape, config));
  BRAID_TRY(OwnWindow::open(comm, moe->window_.bytes, "MoE", &moe->own_));
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
  auto expired = [&] { return deadline.expired(); };
  // Senders over RMA first: once their words' signals are in, the words
  // below are already there.  Then the one deadline bounds the rest.
  Status rma =
      own_->routes().wait_from_rma_sources(WindowRoutes::kWordSignal, word_batches(shape_.local_experts), deadline);
  if (!rma.is_ok())
    return BRAID_ERROR(rma.code(), "rank {}: {} epoch {}: waiting for the signals of the ranks reached over RMA "
                       "(bound {} ms): {}", rank_, what, epoch, timeout_ms_, rma.message());
  HostMemory mm(rank_, &own_->routes());
  const int32_t L = shape_.local_experts;
  for (int32_t i = 0; i < shape_.nranks; ++i) {
    const int32_t peer = (rank_ + i) % shape_.nranks;  // this rank's own blocks first
    for (int32_t le = 0; le < L; ++le) {
      uint32_t count = 0;
      if (wait(mm, signals, shape_, peer, le, epoch, &count, expired) != WaitResult::Ok)
        return BRAID_ERROR(ncclTimeout,
                           "rank {}: {} epoch {}: no signal from rank {} for local expert {} within {} ms (the rank "
                           "is late, gone, or failed its call)",
                           rank_, what, epoch, peer, le, timeout_ms_);
      mm.progressed();
      if (count > uint32_t(shape_.capacity))
        return BRAID_ERROR(ncclInternalError, "rank {}: {}: rank {} signalled {} rows for local expert {}, capacity {}",
                           rank_, what, peer, count, le, shape_.capacity);
      (*counts)[size_t(peer) * L + le] = int32_t(count);
    }
  }
  return Status::ok();
}

void HostMoe::collect_stats() {
  for (auto& a : agents_) {
    const HostCounters& c = a.counters();
    stats_.payloadBytesRemote += c.bytes_remote;
    stats_.signalBytesRemote += c.signal_bytes_remote;
    stats_.bytesLocal += c.bytes_local;
    stats_.signalsRemote += c.signals_remote;
    stats_.signalsLocal += c.signals_local;
    stats_.fences += c.fences;
    a.clear();
  }
}

Status HostMoe::dispatch(const void* tokens, const int32_t* topk, int32_t ntokens, void* out, int32_t* recv_counts,
                         int64_t* dropped) {
  if (combine_due_)
    return BRAID_ERROR(ncclInvalidUsage, "braidMoeDispatch: the last dispatch's combine has not run (dispatch and "
                       "combine alternate: the windows still hold that call's rows)");
  if (ntokens < 0 || ntokens > shape_.max_tokens)
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeDispatch: numTokens {} is not in [0, maxTokensPerRank = {}]",
                       ntokens, shape_.max_tokens);
  if (ntokens > 0 && (!tokens || !topk))
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeDispatch: tokens or topkIdx is NULL");
  if (!out || !recv_counts) return BRAID_ERROR(ncclInvalidArgument, "braidMoeDispatch: recvTokens or recvCounts is NULL");

  // Plan first: a bad index fails the call before any byte moves.
  const int32_t K = shape_.top_k, L = shape_.local_experts;
  topk_.assign(topk, topk + int64_t(ntokens) * K);
  slots_.resize(topk_.size());
  const PlanResult plan = plan_routes(shape_, topk_.data(), ntokens, wanted_.data(), slots_.data());
  if (plan.bad_token >= 0) {
    const int32_t* row = &topk_[size_t(plan.bad_token) * K];
    int32_t bad = 0;
    for (int32_t k = 0; k < K; ++k)
      if (row[k] < -1 || row[k] >= shape_.experts) bad = row[k];
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeDispatch: token {} routes to expert {}, not in [0, {}) or -1",
                       plan.bad_token, bad, shape_.experts);
  }
  for (int32_t e = 0; e < shape_.experts; ++e) sent_[size_t(e)] = sent_rows(shape_, wanted_.data(), e);
  tokens_ = ntokens;

  const uint64_t call = ++dispatch_calls_;
  const uint32_t epoch = dispatch_epoch_ = next_epoch(dispatch_epoch_);
  const int B = pool_.blocks();
  const int64_t row_bytes = shape_.row_bytes();
  const CallState c{rank_, call, epoch, dispatch_arrivals_.data()};
  const DispatchRows rows{static_cast<const char*>(tokens), topk_.data(), slots_.data(), sent_.data(), ntokens};
  pool_.run([&](int b) { dispatch_agent(agents_[size_t(b)], shape_, window_, c, rows, b, B); });
  collect_stats();
  BRAID_TRY(std::move(own_->routes().failure()).context(fmt::format("rank {}: dispatch", rank_)));
  stats_.dispatches++;
  stats_.rowsRouted += uint64_t(plan.routed);
  stats_.rowsDropped += uint64_t(plan.dropped);
  if (dropped) *dropped = plan.dropped;

  BRAID_TRY(wait_all(epoch, true, &received_, "dispatch"));
  output_offsets(shape_, layout_, received_.data(), first_row_.data());
  const char* half = own_->base(rank_) + window_.dispatch_data;
  pool_.run([&](int b) {
    for (int64_t i = b; i < shape_.blocks(); i += B) {
      const int32_t src = int32_t(i / L), le = int32_t(i % L);
      std::memcpy(static_cast<char*>(out) + first_row_[size_t(i)] * row_bytes,
                  half + WindowLayout::row_offset(shape_, src, le, 0), size_t(received_[size_t(i)] * row_bytes));
    }
  });
  std::memcpy(recv_counts, received_.data(), received_.size() * sizeof(int32_t));
  combine_due_ = true;
  return Status::ok();
}

Status HostMoe::combine(const void* expert_out, const float* weights, void* out) {
  if (!combine_due_)
    return BRAID_ERROR(ncclInvalidUsage, "braidMoeCombine: no dispatch to combine (dispatch and combine alternate)");
  if ((tokens_ > 0 && (!weights || !out)) || !expert_out)
    return BRAID_ERROR(ncclInvalidArgument, "braidMoeCombine: expertOut, topkWeights or outTokens is NULL");

  const int32_t K = shape_.top_k;
  const uint64_t call = ++combine_calls_;
  const uint32_t epoch = combine_epoch_ = next_epoch(combine_epoch_);
  const int B = pool_.blocks();
  const int64_t row_bytes = shape_.row_bytes();
  // Each received block goes back to its source, to the rows it came from.
  const CallState c{rank_, call, epoch, combine_arrivals_.data()};
  const CombineRows rows{static_cast<const char*>(expert_out), received_.data(), first_row_.data()};
  pool_.run([&](int b) { combine_agent(agents_[size_t(b)], shape_, window_, c, rows, b, B); });
  collect_stats();
  BRAID_TRY(std::move(own_->routes().failure()).context(fmt::format("rank {}: combine", rank_)));
  stats_.combines++;

  std::vector<int32_t> back(size_t(shape_.blocks()));
  BRAID_TRY(wait_all(epoch, false, &back, "combine"));
  combine_due_ = false;
  for (int32_t e = 0; e < shape_.experts; ++e)
    if (back[size_t(e)] != sent_[size_t(e)])
      return BRAID_ERROR(ncclInternalError, "rank {}: combine: expert {} returned {} rows, {} were sent", rank_, e,
                         back[size_t(e)], sent_[size_t(e)]);

  const char* half = own_->base(rank_) + window_.combine_data;
  const int64_t H = shape_.hidden;
  pool_.run([&](int b) {
    std::vector<float> acc(static_cast<size_t>(H));
    const int64_t lo = int64_t(tokens_) * b / B, hi = int64_t(tokens_) * (b + 1) / B;
    for (int64_t t = lo; t < hi; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int32_t k = 0; k < K; ++k) {
        const int32_t slot = slots_[size_t(t * K + k)];
        if (slot == kNoSlot) continue;
        const int32_t e = topk_[size_t(t * K + k)];
        accumulate(dtype_, half + WindowLayout::row_offset(shape_, shape_.owner(e), shape_.local(e), slot),
                   weights[t * K + k], acc.data(), H);
      }
      store(dtype_, acc.data(), static_cast<char*>(out) + t * row_bytes, H);
    }
  });
  return Status::ok();
}

braidMoeStats_t HostMoe::stats() const { return stats_; }

}  // namespace braid::moe

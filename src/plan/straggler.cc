#include "src/plan/straggler.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <fmt/ranges.h>

#include "braid/stragglar.h"
#include "src/base/env.h"
#include "src/base/log.h"
#include "src/plan/arrival_board.h"
#include "src/plan/duration_board.h"
#include "src/plan/planner.h"

namespace braid {
namespace {

// AllReduces at or below this size are latency-bound: no straggler logic.
constexpr uint64_t kSmallAllReduceBytes = 32 * 1024;

bool one_host(const TransportContext& comm) {
  for (const PeerInfo& p : comm.peers)
    if (p.host_hash != comm.peers[0].host_hash) return false;
  return true;
}

// A straggler board of the communicator (`kind`: its shm name's part).
BoardSetup straggler_board(const TransportContext& comm, const std::atomic<bool>* stop, const char* kind,
                           const char* what) {
  return board_setup(comm, fmt::format("/braid-{}-{:016x}", kind, comm.comm_hash), what, stop);
}

// The break-even delay on a link: StragglAR after arrival costs
// max(0, phase0 - delay) + phase1, ring costs the ring, and the two meet
// at this delay.  The floor keeps timing noise from looking like a straggler.
int64_t threshold_ns(int n, uint64_t bytes, AlphaBeta link, int64_t floor_ns) {
  if (n < 2) return INT64_MAX;
  const int rounds = stragglar_round_lower_bound(n);
  const double phase0 = (n - 2) * (link.alpha + link.beta * double(bytes) / (n - 1));
  const double phase1 = stragglar_post_arrival_model(n, rounds, double(bytes), link);
  const double ring = ring_allreduce_model(n, double(bytes), link);
  const double delay = std::max(0.0, phase0 + phase1 - ring);
  return std::max<int64_t>(floor_ns, int64_t(delay * 1e9));
}

}  // namespace

StragglerSetting straggler_setting(int nranks) {
  std::string v = env_string("BRAID_STRAGGLER");
  if (v.empty() || v == "off") return {};
  if (v == "auto") return {StragglerMode::Auto, -1};
  if (v == "eager") {
    if (nranks <= 64) return {StragglerMode::Eager, -1};
    BRAID_WARN("BRAID_STRAGGLER=eager supports up to 64 ranks, not {}; StragglAR stays off", nranks);
    return {};
  }
  char* end = nullptr;
  long rank = std::strtol(v.c_str(), &end, 10);
  if (end != v.c_str() && *end == '\0' && rank >= 0 && rank < nranks) return {StragglerMode::Fixed, int(rank)};
  BRAID_WARN("BRAID_STRAGGLER={} is not off, auto, eager or a rank below {}; StragglAR stays off", v, nranks);
  return {};
}

int32_t straggler_code(const StragglerSetting& setting) {
  switch (setting.mode) {
    case StragglerMode::Off: return -1;
    case StragglerMode::Auto: return -2;
    case StragglerMode::Eager: return -3;
    case StragglerMode::Fixed: return setting.rank;
  }
  return -1;
}

StragglerSetting straggler_of_code(int32_t code) {
  if (code >= 0) return {StragglerMode::Fixed, code};
  if (code == -2) return {StragglerMode::Auto, -1};
  if (code == -3) return {StragglerMode::Eager, -1};
  return {};
}

void StragglerDetector::observe(const std::vector<int64_t>& d, int64_t threshold_ns) {
  last_ = -1;
  if (d.size() < 2 || std::any_of(d.begin(), d.end(), [](int64_t x) { return x < 0; })) return;
  // The shortest stay is the last arrival; the gap to the next shortest is
  // how long everyone else had to wait for it alone.
  int first = -1, second = -1;
  for (int r = 0; r < int(d.size()); ++r) {
    if (first < 0 || d[r] < d[first]) {
      second = first;
      first = r;
    } else if (second < 0 || d[r] < d[second]) {
      second = r;
    }
  }
  // Late means apart from the pack, not just first by a hair: the gap must
  // also be at least half the distance to the median stay, which timing
  // noise on busy hosts rarely gives one rank several calls in a row.
  std::vector<int64_t> sorted = d;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  const int64_t median = sorted[sorted.size() / 2], gap = d[second] - d[first];
  if (gap > threshold_ns && 2 * gap >= median - d[first]) last_ = first;

  streak_ = last_ < 0 ? 0 : last_ == candidate_ ? streak_ + 1 : 1;
  candidate_ = last_;
  if (current_ >= 0) misses_ = last_ == current_ ? 0 : misses_ + 1;
  if (streak_ >= options_.persist_calls && candidate_ != current_) {
    current_ = candidate_;  // a new persistent straggler, or a different one
    misses_ = 0;
  } else if (current_ >= 0 && misses_ >= options_.release_calls) {
    current_ = -1;
    misses_ = 0;
  }
}

int64_t straggler_threshold_ns(int n, uint64_t bytes) {
  // Shared-memory copies at a few GB/s per rank, microseconds per step;
  // host ranks are descheduled for hundreds of microseconds.
  return threshold_ns(n, bytes, AlphaBeta{5e-6, 1.0 / 4e9}, 200'000);
}

int64_t device_straggler_threshold_ns(int n, uint64_t bytes) {
  // The model's device link (AlphaBeta's defaults, not measured per GPU).
  // Ranks' kernels start tens of microseconds apart with no one late (the
  // host threads that launch them); the floor stays above that skew, so a
  // rank that is merely launched last every time is not a straggler.
  return threshold_ns(n, bytes, AlphaBeta{}, 100'000);
}

StragglerTracker::StragglerTracker(int nranks, int rank, StragglerSetting setting)
    : nranks_(nranks), rank_(rank), setting_(setting), recv_(size_t(nranks), -1) {}

StragglerTracker::~StragglerTracker() = default;

Status StragglerTracker::plan_call(const TransportContext& comm, const std::atomic<bool>* stop, uint64_t bytes,
                                   int* straggler) {
  settle_eager(comm);
  *straggler = straggler_for(bytes);
  if (!eager_decides(bytes)) return Status::ok();
  if (!eager_waiting_) {
    BRAID_TRY(open_arrival_board(comm, stop));
    return board_->straggler_of_call(eager_calls_++, straggler);
  }
  eager_waiting_ = false;  // arrive_ahead arrived already
  return board_->wait(eager_calls_ - 1, straggler);
}

Status StragglerTracker::arrive_ahead(const TransportContext& comm, const std::atomic<bool>* stop, uint64_t bytes) {
  settle_eager(comm);
  if (!eager_decides(bytes) || eager_waiting_) return Status::ok();
  BRAID_TRY(open_arrival_board(comm, stop));
  board_->arrive(eager_calls_++);
  eager_waiting_ = true;
  return Status::ok();
}

bool StragglerTracker::eager_decides(uint64_t bytes) const {
  // Only where StragglAR would replace ring.
  return setting_.mode == StragglerMode::Eager && nranks_ >= 2 && bytes > kSmallAllReduceBytes;
}

void StragglerTracker::settle_eager(const TransportContext& comm) {
  if (setting_.mode != StragglerMode::Eager || one_host(comm)) return;  // the same answer on every rank
  BRAID_WARN("BRAID_STRAGGLER=eager needs every rank on one host (shared memory); StragglAR stays off");
  setting_ = {};
}

Status StragglerTracker::open_arrival_board(const TransportContext& comm, const std::atomic<bool>* stop) {
  if (board_) return Status::ok();
  return ArrivalBoard::open(straggler_board(comm, stop, "arrivals", "BRAID_STRAGGLER=eager"), &board_);
}

bool StragglerTracker::decides_at_start(const TransportContext& comm, uint64_t bytes) {
  settle_eager(comm);
  // Two host ranks: phase 0 has nothing to do while the late rank is away,
  // and phase 1 moves more bytes (10 buffer passes to ring's 8, `braid
  // stragglar --host-work`): StragglAR lost to ring by 0.78x with a rank
  // 20 ms late, from 3 ranks on it won (perf/results/stragglar_host_small_n_20261204.txt).
  if (nranks_ < 3) return false;
  return tracks(bytes) || eager_decides(bytes);
}

Status StragglerTracker::start_call(const TransportContext& comm, const std::atomic<bool>* stop, uint64_t bytes) {
  if (tracks(bytes)) call_started(bytes);
  return arrive_ahead(comm, stop, bytes);
}

Status StragglerTracker::poll_decision(int* straggler, bool* decided) {
  if (!eager_waiting_) {  // auto: known now
    *straggler = detector_.current();
    *decided = true;
    return Status::ok();
  }
  BRAID_TRY(board_->poll(eager_calls_ - 1, straggler, decided));
  eager_waiting_ = !*decided;
  return Status::ok();
}

int StragglerTracker::straggler_for(uint64_t bytes) const {
  switch (setting_.mode) {
    case StragglerMode::Off: return -1;
    case StragglerMode::Fixed: return setting_.rank;
    case StragglerMode::Auto: return tracks(bytes) ? detector_.current() : -1;  // small calls: their fast path
    case StragglerMode::Eager: return -1;  // decided per call, in plan_call
  }
  return -1;
}

bool StragglerTracker::tracks(uint64_t bytes) const {
  return setting_.mode == StragglerMode::Auto && nranks_ >= 2 && bytes > kSmallAllReduceBytes;
}

void StragglerTracker::call_started(uint64_t bytes) {
  bytes_ = bytes;
  started_ = std::chrono::steady_clock::now();
}

void StragglerTracker::call_finished() {
  auto now = std::chrono::steady_clock::now();
  // What was gathered during this call are the durations of the previous one.
  observe(straggler_threshold_ns(nranks_, prev_bytes_));
  send_ = std::chrono::duration_cast<std::chrono::nanoseconds>(now - started_).count();
  prev_bytes_ = bytes_;
}

void StragglerTracker::observe(int64_t threshold_ns) {
  const int before = detector_.current();
  BRAID_TRACE(kTuning, "rank {}: durations of a tracked call (ns): {}", rank_, fmt::join(recv_, " "));
  detector_.observe(recv_, threshold_ns);
  if (detector_.current() != before)
    BRAID_INFO(kTuning, "rank {}: StragglAR {} (straggler {})", rank_, detector_.current() >= 0 ? "on" : "off",
               detector_.current() >= 0 ? detector_.current() : before);
}

Status StragglerTracker::open_duration_board(const TransportContext& comm, const std::atomic<bool>* stop) {
  if (setting_.mode != StragglerMode::Auto || nranks_ < 2 || durations_) return Status::ok();
  if (!one_host(comm))
    return BRAID_ERROR(ncclInvalidUsage, "BRAID_STRAGGLER=auto on a device backend needs every rank on one host");
  device_bytes_.assign(DurationBoard::kSlots, 0);
  return DurationBoard::open(straggler_board(comm, stop, "durations", "BRAID_STRAGGLER=auto"), &durations_);
}

Status StragglerTracker::plan_device_call(uint64_t bytes, int* straggler, uint64_t* call) {
  static_assert(kDeviceLag < DurationBoard::kSlots);
  if (!durations_) return BRAID_ERROR(ncclInternalError, "BRAID_STRAGGLER=auto: the duration board is not open");
  const uint64_t t = device_calls_;
  if (t >= kDeviceLag) {
    const uint64_t seen = t - kDeviceLag;
    BRAID_TRY(durations_->gather(seen, &recv_));
    observe(device_straggler_threshold_ns(nranks_, device_bytes_[seen % DurationBoard::kSlots]));
  }
  device_bytes_[t % DurationBoard::kSlots] = bytes;
  ++device_calls_;
  *straggler = detector_.current();
  *call = t;
  return Status::ok();
}

}  // namespace braid

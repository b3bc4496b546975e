#include "src/plan/straggler.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <string>

#include "braid/stragglar.h"
#include "src/core/comm.h"
#include "src/core/deadline.h"
#include "src/core/env.h"
#include "src/core/log.h"

#include <fmt/ranges.h>
#include "src/plan/planner.h"

namespace braid {

// AllReduces at or below this size are latency-bound: no straggler logic.
constexpr uint64_t kSmallAllReduceBytes = 32 * 1024;


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
  // Host model: shared-memory copies at a few GB/s per rank, microseconds of
  // per-step latency.  StragglAR after arrival costs max(0, phase0 - delay)
  // + phase1; ring costs the ring; the break-even delay is where they meet.
  // A floor keeps scheduling noise from looking like a straggler.
  constexpr int64_t kFloorNs = 200'000;
  if (n < 2) return INT64_MAX;
  AlphaBeta host{5e-6, 1.0 / 4e9};
  const int rounds = stragglar_round_lower_bound(n);
  const double phase0 = (n - 2) * (host.alpha + host.beta * double(bytes) / (n - 1));
  const double phase1 = stragglar_post_arrival_model(n, rounds, double(bytes), host);
  const double ring = ring_allreduce_model(n, double(bytes), host);
  const double delay = std::max(0.0, phase0 + phase1 - ring);
  return std::max<int64_t>(kFloorNs, int64_t(delay * 1e9));
}

// Eager mode's shared words: a few call slots, reused round robin (a rank is
// never more than one call ahead of the slowest, since every call needs all).
class ArrivalBoard {
 public:
  static constexpr int kSlots = 4;
  struct Slot {
    std::atomic<uint64_t> arrived;   // bit r: rank r is in this call
    std::atomic<int32_t> straggler;  // -1 until n-1 ranks arrived
    std::atomic<uint32_t> seen;      // ranks that read straggler; the n-th resets the slot
  };
  struct Layout {
    std::atomic<uint32_t> ready;
    std::atomic<uint32_t> attached;
    Slot slots[kSlots];
  };

  ~ArrivalBoard() {
    if (board_) ::munmap(board_, sizeof(Layout));
    if (!unlinked_) ::shm_unlink(name_.c_str());
  }

  // Rank 0 creates and initialises the segment; the others attach once it is ready.
  static Status open(ncclComm* comm, std::unique_ptr<ArrivalBoard>* out) {
    auto b = std::make_unique<ArrivalBoard>();
    b->name_ = fmt::format("/braid-arrivals-{:016x}", comm->comm_hash);
    b->nranks_ = comm->nranks;
    Deadline deadline = Deadline::after(std::chrono::milliseconds(env_int("BRAID_TIMEOUT") * 1000));
    Waiter waiter;
    int fd = -1;
    if (comm->rank == 0) {
      fd = ::shm_open(b->name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
      if (fd >= 0 && ::ftruncate(fd, sizeof(Layout)) != 0) {
        ::close(fd);
        fd = -1;
      }
    } else {
      while ((fd = ::shm_open(b->name_.c_str(), O_RDWR, 0600)) < 0 && errno == ENOENT) {
        if (deadline.expired() || comm->aborting.load())
          return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: rank 0 never created {}", b->name_);
        waiter.pause();
      }
    }
    if (fd < 0) return BRAID_ERROR(ncclSystemError, "shm {}: {}", b->name_, std::strerror(errno));
    void* map = ::mmap(nullptr, sizeof(Layout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) return BRAID_ERROR(ncclSystemError, "mmap {}: {}", b->name_, std::strerror(errno));
    b->board_ = static_cast<Layout*>(map);
    if (comm->rank == 0) {
      for (Slot& s : b->board_->slots) {
        s.arrived.store(0);
        s.straggler.store(-1);
        s.seen.store(0);
      }
      b->board_->ready.store(1, std::memory_order_release);
    }
    while (b->board_->ready.load(std::memory_order_acquire) != 1) {
      if (deadline.expired() || comm->aborting.load())
        return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: {} never became ready", b->name_);
      waiter.pause();
    }
    // The last to attach removes the name; the mappings stay valid.
    if (b->board_->attached.fetch_add(1) + 1 == uint32_t(b->nranks_)) {
      ::shm_unlink(b->name_.c_str());
      b->unlinked_ = true;
    }
    *out = std::move(b);
    return Status::ok();
  }

  Status straggler_of_call(ncclComm* comm, uint64_t call, int* out) {
    Slot& s = board_->slots[call % kSlots];
    const uint64_t all = nranks_ == 64 ? ~uint64_t(0) : (uint64_t(1) << nranks_) - 1;
    const uint64_t now = s.arrived.fetch_or(uint64_t(1) << comm->rank) | (uint64_t(1) << comm->rank);
    if (__builtin_popcountll(now) == nranks_ - 1) s.straggler.store(__builtin_ctzll(all & ~now), std::memory_order_release);
    Deadline deadline = Deadline::after(std::chrono::milliseconds(env_int("BRAID_TIMEOUT") * 1000));
    Waiter waiter;
    int32_t straggler;
    while ((straggler = s.straggler.load(std::memory_order_acquire)) < 0) {
      if (deadline.expired() || comm->aborting.load())
        return BRAID_ERROR(ncclRemoteError, "BRAID_STRAGGLER=eager: fewer than {} ranks reached the call", nranks_ - 1);
      waiter.pause();
    }
    if (s.seen.fetch_add(1) + 1 == uint32_t(nranks_)) {
      s.arrived.store(0);
      s.straggler.store(-1);
      s.seen.store(0, std::memory_order_release);
    }
    *out = straggler;
    return Status::ok();
  }

 private:
  std::string name_;
  int nranks_ = 0;
  Layout* board_ = nullptr;
  bool unlinked_ = false;
};

StragglerTracker::StragglerTracker(int nranks, int rank)
    : nranks_(nranks), rank_(rank), setting_(straggler_setting(nranks)), recv_(size_t(nranks), -1) {}

StragglerTracker::~StragglerTracker() = default;

Status StragglerTracker::plan_call(ncclComm* comm, uint64_t bytes, int* straggler) {
  *straggler = straggler_for(bytes);
  // Eager: only where StragglAR would replace ring, and only on one host.
  if (setting_.mode != StragglerMode::Eager || nranks_ < 2 || bytes <= kSmallAllReduceBytes) return Status::ok();
  if (!board_) {
    bool one_host = true;
    for (const PeerInfo& p : comm->peers) one_host &= p.host_hash == comm->peers[0].host_hash;
    if (!one_host) {
      BRAID_WARN("BRAID_STRAGGLER=eager needs every rank on one host (shared memory); StragglAR stays off");
      setting_ = {};
      return Status::ok();
    }
    BRAID_TRY(ArrivalBoard::open(comm, &board_));
  }
  return board_->straggler_of_call(comm, eager_calls_++, straggler);
}

int StragglerTracker::straggler_for(uint64_t bytes) const {
  switch (setting_.mode) {
    case StragglerMode::Off: return -1;
    case StragglerMode::Fixed: return setting_.rank;
    case StragglerMode::Auto: return detector_.current();
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
  int before = detector_.current();
  BRAID_TRACE(kTuning, "rank {}: durations of the previous call (ns): {}", rank_, fmt::join(recv_, " "));
  detector_.observe(recv_, straggler_threshold_ns(nranks_, prev_bytes_));
  if (detector_.current() != before)
    BRAID_INFO(kTuning, "rank {}: StragglAR {} (straggler {})", rank_, detector_.current() >= 0 ? "on" : "off",
               detector_.current() >= 0 ? detector_.current() : before);
  send_ = std::chrono::duration_cast<std::chrono::nanoseconds>(now - started_).count();
  prev_bytes_ = bytes_;
}

}  // namespace braid

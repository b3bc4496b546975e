// Who is the straggler: BRAID_STRAGGLER=off|auto|<rank>.
//
// A fixed rank makes every large AllReduce run StragglAR with that rank late.
// `auto` detects a persistent straggler online.  Each rank times how long it
// spends inside each tracked AllReduce (entry to completion, its own clock:
// no clock sync needed).  The last rank to arrive spends the least, and the
// gap to the next shortest is how late it was.  These durations travel on the
// next tracked call: a tiny allgather of one int64 per rank runs on its own
// channel concurrently with that call's AllReduce, so it adds no round trip to
// the critical path.  Every rank then feeds the same gathered vector to the
// same deterministic StragglerDetector, so all ranks take the same decision
// for the same call by construction: a decision made after call k applies
// from call k+1 on, and uses durations of call k-1.
//
// `eager` (beyond the paper, which proposed it): no history at all.  Each
// call, the first n-1 ranks to arrive are the fast ones and start phase 0;
// whoever comes last is the straggler.  Ranks agree through a word in shared
// memory per call (ranks on one host, n <= 64; src/plan/arrival_board.h):
// each sets its arrival bit with one atomic fetch_or, the rank whose bit
// completes n-1 arrivals names the missing one, and everyone plans StragglAR
// for that rank.  A fast rank
// waits only for the other fast ranks, which phase 0 needs anyway.
//
// `auto` on the CUDA backend (duration_board.h): a rank's arrival is its
// device starting the call, not its host calling, and a host must not wait
// for its device after every call.  Two tiny kernels around each tracked
// call stamp its duration on a shared board, and the host decides tracked
// call t from the durations of calls up to t - kDeviceLag, waiting for
// those only if its device is that far behind.  Every rank reads the same
// board entries in the same order, so all decide alike.  A call captured
// into a CUDA graph is not tracked (a replay would stamp the captured call
// again); it runs what was decided when it was captured.
//
// Tracked calls: every AllReduce large enough that the default would be
// ring, alone or in a group, whatever else the group holds; every rank
// agrees on this since NCCL requires the same calls with the same counts
// (and lets ranks group them differently).  On the host backend a call
// starts when its rank reaches it: a communicator's calls run one after
// another, so call k+1 starts after call k is done on this rank, durations
// and decisions included, however the calls were grouped.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/base/status.h"
#include "src/transport/transport.h"

namespace braid {

enum class StragglerMode : uint8_t { Off, Auto, Fixed, Eager };

struct StragglerSetting {
  StragglerMode mode = StragglerMode::Off;
  int rank = -1;  // Fixed: the straggler
};

// Parses BRAID_STRAGGLER for a communicator of `nranks`; a malformed value or
// an out-of-range rank is off (with a warning).
StragglerSetting straggler_setting(int nranks);
// The setting as one number, which the ranks of a communicator agree on at
// init (ranks planning StragglAR for different late ranks, or only some of
// them waiting on a board, would wait for each other until BRAID_TIMEOUT):
// -1 off, -2 auto, -3 eager, else the late rank.  And back.
int32_t straggler_code(const StragglerSetting& setting);
StragglerSetting straggler_of_code(int32_t code);

// The auto-mode decision, a pure function of the gathered durations.
class StragglerDetector {
 public:
  struct Options {
    int persist_calls = 3;  // same rank last this many tracked calls in a row: switch to it
    int release_calls = 3;  // it is not last this many in a row: switch back
  };
  StragglerDetector() = default;
  explicit StragglerDetector(Options o) : options_(o) {}

  // durations_ns[r]: time rank r spent in one call.  A call has a straggler
  // when one rank's time is shortest by more than threshold_ns.
  void observe(const std::vector<int64_t>& durations_ns, int64_t threshold_ns);
  int current() const { return current_; }   // -1: none
  int last_call_straggler() const { return last_; }

 private:
  Options options_;
  int current_ = -1;
  int candidate_ = -1;
  int streak_ = 0;  // calls in a row with candidate_ last
  int misses_ = 0;  // calls in a row without current_ last
  int last_ = -1;
};

// Break-even arrival gap for an AllReduce of `bytes` on `nranks` host ranks:
// below it, phase 0 is not hidden enough for StragglAR to beat ring.
int64_t straggler_threshold_ns(int nranks, uint64_t bytes);
// The same for ranks on GPUs (the AlphaBeta model's device link).
int64_t device_straggler_threshold_ns(int nranks, uint64_t bytes);

class ArrivalBoard;
class DurationBoard;

// One communicator's straggler state (owned by its PlanCache).
class StragglerTracker {
 public:
  // A communicator's tracker takes the setting its ranks agreed on; tests
  // take this process's BRAID_STRAGGLER.
  StragglerTracker(int nranks, int rank, StragglerSetting setting);
  StragglerTracker(int nranks, int rank) : StragglerTracker(nranks, rank, straggler_setting(nranks)) {}
  ~StragglerTracker();

  // Everything before an AllReduce of `bytes` runs on a device backend: the
  // straggler to plan for (-1: none).  Eager mode waits here for n-1
  // arrivals (`stop` ends the wait: abort, revoke).
  Status plan_call(const TransportContext& comm, const std::atomic<bool>* stop, uint64_t bytes, int* straggler);
  // Eager mode: this rank's arrival at its next AllReduce of `bytes`, made
  // before plan_call waits.  A thread driving several ranks of a group
  // arrives for all of them first: a blocking wait of its first rank would
  // otherwise wait for arrivals only its later ranks can make.
  Status arrive_ahead(const TransportContext& comm, const std::atomic<bool>* stop, uint64_t bytes);

  // On the host backend, an AllReduce of `bytes` whose straggler is decided
  // as it starts (auto and eager, large calls), in whatever group it is:
  // start_call when this rank reaches it (eager: its arrival on the board;
  // auto: its timing starts), then poll_decision until *decided.  Calls of
  // a communicator start one after another, in the same order on every rank.
  // Never on 2 ranks (see straggler.cc).
  bool decides_at_start(const TransportContext& comm, uint64_t bytes);
  Status start_call(const TransportContext& comm, const std::atomic<bool>* stop, uint64_t bytes);
  Status poll_decision(int* straggler, bool* decided);

  // For an AllReduce of `bytes`: the straggler auto or fixed mode plans for
  // now (-1: none), and whether the call exchanges durations (auto).
  int straggler_for(uint64_t bytes) const;
  bool tracks(uint64_t bytes) const;
  // BRAID_STRAGGLER=<rank>: that rank, for every AllReduce, whatever else
  // its group holds (a pure function of the call: ranks that group it
  // differently plan alike); -1 in the other modes.
  int fixed_straggler() const { return setting_.mode == StragglerMode::Fixed ? setting_.rank : -1; }

  // Auto mode, around a tracked call: call_started before it runs; the
  // exchange allgathers stamp_send() (1 x int64) into stamp_recv() (n x
  // int64); call_finished after it completed.
  void call_started(uint64_t bytes);
  int64_t* stamp_send() { return &send_; }
  int64_t* stamp_recv() { return recv_.data(); }
  void call_finished();

  // Auto mode on a device backend (see above).  The board is opened by
  // every rank of the communicator, at init; its kernels stamp entry(call).
  // The lag: a host enqueues up to 4 tracked calls ahead of its device
  // before it waits, and a persistent straggler's third late call counts
  // 4 calls later.
  static constexpr uint64_t kDeviceLag = 4;
  Status open_duration_board(const TransportContext& comm, const std::atomic<bool>* stop);
  const DurationBoard* duration_board() const { return durations_.get(); }
  // A tracked call there: observes the durations of tracked call number
  // kDeviceLag before this one (waiting for them, bounded), then gives
  // this call's straggler (-1: none) and number.
  Status plan_device_call(uint64_t bytes, int* straggler, uint64_t* call);

  const StragglerDetector& detector() const { return detector_; }

 private:
  void observe(int64_t threshold_ns);  // recv_, logging a switch
  bool eager_decides(uint64_t bytes) const;
  // Eager mode needs every rank on one host; elsewhere it turns off (with a
  // warning) before the first call is planned, on every rank alike.
  void settle_eager(const TransportContext& comm);
  Status open_arrival_board(const TransportContext& comm, const std::atomic<bool>* stop);  // eager, on first use

  int nranks_, rank_;
  StragglerSetting setting_;
  StragglerDetector detector_;
  std::unique_ptr<ArrivalBoard> board_;  // eager mode
  uint64_t eager_calls_ = 0;
  bool eager_waiting_ = false;  // arrived on board_ as call eager_calls_ - 1, not yet named
  std::unique_ptr<DurationBoard> durations_;  // auto mode on a device backend
  uint64_t device_calls_ = 0;
  std::vector<uint64_t> device_bytes_;  // per board slot: the size of the call there
  std::chrono::steady_clock::time_point started_{};
  uint64_t bytes_ = 0;
  uint64_t prev_bytes_ = 0;  // size of the call send_ timed
  int64_t send_ = -1;  // this rank's duration in the previous tracked call (-1: none yet)
  std::vector<int64_t> recv_;
};

}  // namespace braid

// An AllReduce whose straggler is decided as it starts (BRAID_STRAGGLER=auto
// and =eager, src/plan/straggler.h), run by the executor (task.h) beside a
// group's other calls.
//
// Which schedule such a call runs (StragglAR for a late rank, or the usual
// one) is decided by the ranks together: eager waits on the arrival board
// for n-1 ranks, auto reads the detector after the previous tracked call's
// durations came in.  So the plan cannot be made when the group is: ranks
// may group the call differently (one with the call before it, one alone),
// and would plan it at different points of the communicator's call order.
// Here it is planned when this rank reaches the call, after every earlier
// call of the communicator is done on it, so every rank plans it at the
// same point of that order.  Waiting for the decision is a poll, not a
// block: the rank must still move the group's other work meanwhile.  Auto
// mode's duration exchange (an allgather of one int64 per rank on its own
// channel) runs here beside the AllReduce.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "src/exec/host/task.h"
#include "src/plan/straggler.h"

namespace braid {

class StragglerAllReduceTask final : public Task {
 public:
  // Plans the AllReduce for a straggler (-1: none) into a task.
  using Plan = std::function<Status(int straggler, std::unique_ptr<Task>* out)>;

  struct Args {
    StragglerTracker* tracker = nullptr;
    const TransportContext* comm = nullptr;
    const std::atomic<bool>* stop = nullptr;
    uint64_t bytes = 0;
    Plan plan;
    std::unique_ptr<Task> stamps;  // auto mode's duration exchange (else null)
    std::string label;             // the call, for messages before it is planned
  };
  explicit StragglerAllReduceTask(Args a) : a_(std::move(a)) {}

  Status poll(bool* progressed, bool* done) override;
  std::string describe() const override;
  Doorbell* doorbell() const override { return allreduce_ && !allreduce_done_ ? allreduce_->doorbell() : nullptr; }
  void abandon() override;

  // The AllReduce's task once the call is done (for reuse), or null.
  std::unique_ptr<Task> take_allreduce() { return std::move(allreduce_); }

 private:
  Args a_;
  bool started_ = false;
  std::unique_ptr<Task> allreduce_;
  bool allreduce_done_ = false, stamps_done_ = false;
};

}  // namespace braid

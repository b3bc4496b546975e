// The order in which a device backend enqueues a group's collectives.
//
// One thread may drive several ranks of a communicator in a group
// (ncclCommInitAll, nccl-tests -g), and an enqueue may wait for its peers'
// enqueues (BRAID_STRAGGLER: eager waits for n-1 ranks' arrivals, auto for
// the stamps of the call 4 tracked calls earlier).  Enqueued communicator
// by communicator, a rank could wait for a call this thread has yet to
// reach for another rank.  So the communicators' k-th collectives go
// together, k = 0, 1, ..., each round's arrivals made before any of its
// enqueues.  Each communicator's own calls keep their order.
#pragma once

#include <algorithm>
#include <span>

#include "src/exec/backend.h"

namespace braid {

// arrive(i, call), then enqueue(i, call), round by round over work[i].collectives.
template <class Arrive, class Enqueue>
Status enqueue_in_rounds(std::span<CommWork> work, Arrive&& arrive, Enqueue&& enqueue) {
  size_t rounds = 0;
  for (const CommWork& w : work) rounds = std::max(rounds, w.collectives.size());
  for (size_t k = 0; k < rounds; ++k) {
    for (size_t i = 0; i < work.size(); ++i)
      if (k < work[i].collectives.size()) BRAID_TRY(arrive(i, work[i].collectives[k]));
    for (size_t i = 0; i < work.size(); ++i)
      if (k < work[i].collectives.size()) BRAID_TRY(enqueue(i, work[i].collectives[k]));
  }
  return Status::ok();
}

}  // namespace braid

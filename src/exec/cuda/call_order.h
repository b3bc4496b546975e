// A communicator's calls in issue order whatever streams they are enqueued
// on, as NCCL's are: they share the FIFO counters, the LL call counter and
// the scratch buffers, so two of them running at once corrupt data or wait
// forever.
//
// Each call records an event behind its work; a call on another stream than
// the last one's waits for it first.  Streams are told apart by their id,
// not their handle (one cudaStreamPerThread handle is a stream per thread; a
// freed handle may come back).  That is this rank's own work only, so no
// launch waits for a peer's.  Not while the stream is being captured: the
// graph's own edges order what it holds, and an event recorded outside the
// capture cannot join it (eager calls on other streams are not ordered
// against graph replays).
//
// A group whose calls are on several streams follows NCCL's rule: its work
// starts after every one of them has run what came before, and what comes
// after on any of them waits for its work.  The calls run in issue order, so
// the first launch's stream waits for the others, and they wait for the last
// call's event.  A captured group stays on one stream: ordering its calls
// across streams would need events inside the capture.
#pragma once

#include <cuda_runtime.h>

#include <optional>
#include <vector>

#include "src/base/status.h"

namespace braid::cuda {

// Whether `stream` is being captured.  The legacy default stream cannot be
// asked while another thread captures a blocking stream (nor used): an
// error that is cleared and said plainly.
Status capture_status(cudaStream_t stream, bool* capturing);

// Waits on the host for `done`, recorded outside any capture, from a thread
// that may be capturing: a captured call cannot wait for such an event on
// the device (above), and the wait is safe (that work cannot depend on what
// is being captured), so it runs in relaxed capture mode, which allows it.
Status wait_outside_capture(cudaEvent_t done);

class CallOrder {
 public:
  Status init();   // on the communicator's device
  void release();  // after the device is idle
  // Around every call's enqueued work on `stream`.
  Status begin(cudaStream_t stream, bool* capturing);
  Status end(cudaStream_t stream, bool capturing);
  // Whether the last call's work has ended (and with it every earlier
  // call's; graph replays are not counted).  Any thread, also while another
  // captures a stream.
  bool idle() const;
  // A group's streams (the first launch's first): refused if any is being
  // captured while there are several; then the joins before and after.
  static Status check_group(const std::vector<cudaStream_t>& streams);
  Status join_before(const std::vector<cudaStream_t>& streams);
  Status join_after(const std::vector<cudaStream_t>& streams);

 private:
  cudaEvent_t last_done_ = nullptr;                // behind the last call's work
  std::optional<unsigned long long> last_stream_;  // its stream's id, once there was a call
  cudaEvent_t join_ = nullptr;                     // join_before's, recorded and waited on in turn
};

}  // namespace braid::cuda

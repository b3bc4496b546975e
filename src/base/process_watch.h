// A watch over other processes of this host: one thread sleeps in poll() on
// their pidfds and reports each that exits, as an error that names its rank.  A pidfd turns readable at the exit
// itself, zombie or not, and costs nothing while its process lives, where kill(pid, 0) must be asked again and again
// and answers "alive" for a zombie its parent has not reaped.
//
// Users: the device communicators' abort flag (src/runtime/device_liveness.h)
// and the CUDA backend, whose kernels would otherwise wait for a dead peer
// until BRAID_TIMEOUT.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/base/status.h"

namespace braid {

struct WatchedProcess {
  int rank = -1;
  int pid = 0;     // for messages; opened as a pidfd where none is given
  int pidfd = -1;  // borrowed (the watch keeps a duplicate): right in any pid namespace
};

class ProcessWatch {
 public:
  // Called once for each watched process that exits, with its rank and
  // ncclRemoteError "rank R (process P) exited": from the watch's thread, or
  // from start for one already gone.
  using OnExit = std::function<void(int rank, const Status& why)>;

  // Watches `processes`; one that cannot be watched for another reason is
  // logged as `what`'s and skipped, as are all after a failure of the watch
  // itself (a warning).  No thread when none is left.
  static Status start(const std::vector<WatchedProcess>& processes, const std::string& what, OnExit on_exit,
                      std::unique_ptr<ProcessWatch>* out);
  ~ProcessWatch();  // ends the watch (never calls on_exit after it returns)
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  size_t watched() const { return watched_.size(); }

 private:
  ProcessWatch(OnExit on_exit, std::string what) : on_exit_(std::move(on_exit)), what_(std::move(what)) {}
  void watch();

  OnExit on_exit_;
  std::string what_;
  struct Watched {
    int rank, pid, pidfd;
  };
  std::vector<Watched> watched_;
  int stop_fd_ = -1;  // an eventfd that ends the watch
  std::thread thread_;
};

}  // namespace braid

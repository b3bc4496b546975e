#include "src/base/process_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "src/base/log.h"
#include "src/base/thread_name.h"

namespace braid {

namespace {

Status exited(int rank, int pid) {
  return Status::error(ncclRemoteError, fmt::format("rank {} (process {}) exited", rank, pid));
}

}  // namespace

Status ProcessWatch::start(const std::vector<WatchedProcess>& processes, const std::string& what, OnExit on_exit,
                           std::unique_ptr<ProcessWatch>* out) {
  std::unique_ptr<ProcessWatch> w(new ProcessWatch(std::move(on_exit), what));
  for (const WatchedProcess& p : processes) {
    const int fd = p.pidfd >= 0 ? ::fcntl(p.pidfd, F_DUPFD_CLOEXEC, 0) : int(::syscall(SYS_pidfd_open, p.pid, 0));
    if (fd < 0 && errno == ESRCH) {
      w->on_exit_(p.rank, exited(p.rank, p.pid));
    } else if (fd < 0) {
      BRAID_INFO(kInit, "{}: rank {} (process {}) cannot be watched: {}", what, p.rank, p.pid, std::strerror(errno));
    } else {
      w->watched_.push_back({p.rank, p.pid, fd});
    }
  }
  if (!w->watched_.empty()) {
    w->stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (w->stop_fd_ < 0) return BRAID_ERROR(ncclSystemError, "{}: eventfd: {}", what, std::strerror(errno));
    w->thread_ = named_thread("braid watch", [p = w.get()] {
      try {
        p->watch();
      } catch (const std::exception& e) {  // allocation failures in messages: never std::terminate
        BRAID_WARN("{}: the watch of peer processes stopped: {}", p->what_, e.what());
      }
    });
  }
  *out = std::move(w);
  return Status::ok();
}

ProcessWatch::~ProcessWatch() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
  for (const Watched& w : watched_) ::close(w.pidfd);
}

// A pidfd is readable once its process has exited (then left out of later
// polls: a negative fd is ignored); the eventfd once the watch should end.
void ProcessWatch::watch() {
  std::vector<pollfd> fds;
  for (const Watched& w : watched_) fds.push_back({w.pidfd, POLLIN, 0});
  fds.push_back({stop_fd_, POLLIN, 0});
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      BRAID_WARN("{}: the watch of peer processes stopped: poll: {}", what_, std::strerror(errno));
      return;
    }
    if (fds.back().revents) return;
    for (size_t i = 0; i < watched_.size(); ++i)
      if (fds[i].fd >= 0 && fds[i].revents) {
        fds[i].fd = -1;
        on_exit_(watched_[i].rank, exited(watched_[i].rank, watched_[i].pid));
      }
  }
}

}  // namespace braid

#include "src/base/process_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "src/base/log.h"

namespace braid {

Status ProcessWatch::start(const std::vector<WatchedProcess>& processes, const std::string& what, OnEnd on_end,
                           std::unique_ptr<ProcessWatch>* out) {
  std::unique_ptr<ProcessWatch> w(new ProcessWatch(std::move(on_end)));
  for (const WatchedProcess& p : processes) {
    const int fd = int(::syscall(SYS_pidfd_open, p.pid, 0));
    if (fd < 0) {
      BRAID_INFO(kInit, "{}: rank {} (process {}) cannot be watched: {}", what, p.rank, p.pid, std::strerror(errno));
      continue;
    }
    w->watched_.push_back({p.rank, p.pid, fd});
  }
  if (!w->watched_.empty()) {
    w->stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (w->stop_fd_ < 0) return BRAID_ERROR(ncclSystemError, "{}: eventfd: {}", what, std::strerror(errno));
    w->thread_ = std::thread([p = w.get()] {
      Status end;
      try {
        end = p->watch();
      } catch (const std::exception& e) {  // allocation failures in messages: never std::terminate
        end = Status::error(ncclInternalError, e.what());
      }
      if (!end.is_ok()) p->on_end_(end);
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

// A pidfd is readable once its process has exited; the eventfd once the
// watch should end (then ok: nothing to report).
Status ProcessWatch::watch() {
  std::vector<pollfd> fds;
  for (const Watched& w : watched_) fds.push_back({w.pidfd, POLLIN, 0});
  fds.push_back({stop_fd_, POLLIN, 0});
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return BRAID_ERROR(ncclSystemError, "watching peer processes: poll: {}", std::strerror(errno));
    }
    if (fds.back().revents) return Status::ok();
    for (size_t i = 0; i < watched_.size(); ++i)
      if (fds[i].revents)
        return Status::error(ncclRemoteError,
                             fmt::format("rank {} (process {}) exited", watched_[i].rank, watched_[i].pid));
  }
}

}  // namespace braid

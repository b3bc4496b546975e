#include "src/runtime/device_liveness.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "src/base/log.h"

namespace braid {

Status DeviceLiveness::create(DeviceApiMemory& memory, const std::vector<WatchedProcess>& peers,
                              std::unique_ptr<DeviceLiveness>* out) {
  std::unique_ptr<DeviceLiveness> l(new DeviceLiveness(memory));
  constexpr size_t kPage = 4096;  // registered with a device: a page of its own
  l->word_ = static_cast<uint32_t*>(std::aligned_alloc(kPage, kPage));
  if (!l->word_) return BRAID_ERROR(ncclSystemError, "out of memory for the device communicators' abort flag");
  std::memset(l->word_, 0, kPage);
  void* device = nullptr;
  BRAID_TRY(memory.host_register(l->word_, kPage, &device));
  l->registered_ = true;
  l->device_word_ = static_cast<uint32_t*>(device);
  for (const WatchedProcess& p : peers) {
    const int fd = int(::syscall(SYS_pidfd_open, p.pid, 0));
    if (fd < 0) {
      BRAID_INFO(kInit, "device API: rank {} (process {}) cannot be watched: {}", p.rank, p.pid, std::strerror(errno));
      continue;
    }
    l->watched_.push_back({p.rank, p.pid, fd});
  }
  if (!l->watched_.empty()) {
    l->stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (l->stop_fd_ < 0) return BRAID_ERROR(ncclSystemError, "eventfd: {}", std::strerror(errno));
    l->thread_ = std::thread([p = l.get()] {
      try {
        p->watch();
      } catch (const std::exception& e) {  // allocation failures in messages: never std::terminate
        p->raise(Status::error(ncclInternalError, e.what()));
      }
    });
  }
  *out = std::move(l);
  return Status::ok();
}

DeviceLiveness::~DeviceLiveness() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
  for (const Watched& w : watched_) ::close(w.pidfd);
  if (registered_) memory_.host_unregister(word_);
  std::free(word_);
}

void DeviceLiveness::raise(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (raised_.load(std::memory_order_relaxed)) return;
    first_ = why;
    raised_.store(true, std::memory_order_release);
  }
  __atomic_store_n(word_, uint32_t(1), __ATOMIC_RELEASE);
}

Status DeviceLiveness::reason() const {
  if (!raised_.load(std::memory_order_acquire)) return Status::ok();
  std::lock_guard<std::mutex> lock(mu_);
  return first_;
}

// A pidfd is readable once its process has exited; the eventfd once the
// watch should end.
void DeviceLiveness::watch() {
  std::vector<pollfd> fds;
  for (const Watched& w : watched_) fds.push_back({w.pidfd, POLLIN, 0});
  fds.push_back({stop_fd_, POLLIN, 0});
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      raise(BRAID_ERROR(ncclSystemError, "device API: watching the LSA peers' processes: poll: {}",
                        std::strerror(errno)));
      return;
    }
    if (fds.back().revents) return;
    for (size_t i = 0; i < watched_.size(); ++i)
      if (fds[i].revents) {
        raise(BRAID_ERROR(ncclRemoteError, "rank {} (process {}) exited while a device communicator with it was live",
                          watched_[i].rank, watched_[i].pid));
        return;
      }
  }
}

}  // namespace braid

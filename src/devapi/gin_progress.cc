#include "src/devapi/gin_progress.h"

#include <algorithm>

#include "src/base/deadline.h"
#include "src/base/thread_name.h"

namespace braid::devapi {

GinProgress::~GinProgress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  some_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GinProgress::add(GinProxy* proxy) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    proxies_.push_back(proxy);
    if (!thread_.joinable()) thread_ = named_thread("braid gin", [this] { run(); });
  }
  some_.notify_all();
}

void GinProgress::remove(GinProxy* proxy) {
  std::lock_guard<std::mutex> lock(mu_);  // waits for the turn in progress
  proxies_.erase(std::remove(proxies_.begin(), proxies_.end(), proxy), proxies_.end());
}

size_t GinProgress::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return proxies_.size();
}

void GinProgress::run() {
  Waiter waiter(idle_spins_);
  while (!stop_.load(std::memory_order_acquire)) {
    bool progressed = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (proxies_.empty()) {
        some_.wait(lock, [&] { return !proxies_.empty() || stop_.load(std::memory_order_acquire); });
        waiter.reset();
        continue;
      }
      for (GinProxy* p : proxies_) progressed |= p->step();
    }
    if (progressed)
      waiter.reset();
    else
      waiter.pause();
  }
}

}  // namespace braid::devapi

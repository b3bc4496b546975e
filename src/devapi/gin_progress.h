// One thread that drives the GIN proxies of every device communicator of
// a communicator (src/devapi/gin_proxy.h), as NCCL runs one GIN progress
// thread per communicator: each turn steps every proxy once, and the
// thread idles (spins, yields, then naps; base/deadline.h's Waiter) only
// when none of them moved, and sleeps while there are none.  With a thread per devComm instead, a rank
// with two devComms had two proxies spinning for the same cores.
//
// Proxies come and go with their devComms, on the user's threads: the
// list is locked, and a turn holds the lock, so remove() returns only
// once the thread is done with that proxy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "src/devapi/gin_proxy.h"

namespace braid::devapi {

class GinProgress {
 public:
  // idle_spins: as GinProxyOptions::idle_spins (0 where the host's cores
  // are fewer than the threads that post and progress).
  explicit GinProgress(uint32_t idle_spins) : idle_spins_(idle_spins) {}
  ~GinProgress();  // joins the thread (every proxy must be removed first)
  GinProgress(const GinProgress&) = delete;
  GinProgress& operator=(const GinProgress&) = delete;

  // Steps `proxy` from the next turn on; the thread starts with the first.
  void add(GinProxy* proxy);
  // After this, the thread no longer touches `proxy`.
  void remove(GinProxy* proxy);
  size_t size() const;

 private:
  void run();

  uint32_t idle_spins_;
  mutable std::mutex mu_;
  std::vector<GinProxy*> proxies_;  // under mu_
  std::condition_variable some_;    // proxies_ became non-empty, or stop_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace braid::devapi

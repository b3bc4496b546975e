#include "src/runtime/device_liveness.h"

#include <cstdlib>
#include <cstring>

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
  BRAID_TRY(ProcessWatch::start(
      peers, "device API",
      [p = l.get()](int, const Status& why) {
        p->raise(Status::error(why.code(), "device API, an LSA peer of a live device communicator: " + why.message()));
      },
      &l->watch_));
  *out = std::move(l);
  return Status::ok();
}

DeviceLiveness::~DeviceLiveness() {
  watch_.reset();  // no raise after this
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

}  // namespace braid

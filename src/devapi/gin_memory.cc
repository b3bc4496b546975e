// Window tokens, signal words and the first-error holder of a GIN proxy.
#include "src/devapi/gin_memory.h"

#include <cstring>

namespace braid::devapi {

Status GinWindowTable::add(uint64_t token, char* base, uint64_t bytes) {
  if (token == 0 || token >> 63) return BRAID_ERROR(ncclInvalidArgument, "GIN window token {:#x} is not in [1, 2^63)", token);
  if (!base || bytes == 0) return BRAID_ERROR(ncclInvalidArgument, "GIN window {:#x} has no memory", token);
  std::unique_lock lock(mu_);
  if (!windows_.emplace(token, Memory{base, bytes}).second)
    return BRAID_ERROR(ncclInvalidUsage, "GIN window token {:#x} is registered twice", token);
  return Status::ok();
}

Status GinWindowTable::remove(uint64_t token) {
  std::unique_lock lock(mu_);
  if (!windows_.erase(token)) return BRAID_ERROR(ncclInvalidArgument, "GIN window token {:#x} is not registered", token);
  return Status::ok();
}

Status GinWindowTable::resolve(uint64_t token, uint64_t offset, uint64_t bytes, char** out) const {
  std::shared_lock lock(mu_);
  auto it = windows_.find(token);
  if (it == windows_.end()) return BRAID_ERROR(ncclInvalidArgument, "GIN window handle {:#x} names no window", token);
  const Memory& m = it->second;
  if (offset > m.bytes || bytes > m.bytes - offset)
    return BRAID_ERROR(ncclInvalidArgument, "GIN access [{}, +{}) outside window {:#x} of {} bytes", offset, bytes,
                       token, m.bytes);
  *out = m.base + offset;
  return Status::ok();
}

namespace {

class HostGinMemory final : public GinMemoryOps {
 public:
  bool host_direct() const override { return true; }
  bool adds_in_windows() const override { return true; }
  Status copy(void* dst, const void* src, uint64_t bytes) const override {
    std::memmove(dst, src, bytes);
    return Status::ok();
  }
  Status add(uint64_t* word, uint64_t value) const override {
    __atomic_fetch_add(word, value, __ATOMIC_RELEASE);
    return Status::ok();
  }
};

class HostAsDeviceGinMemory final : public GinMemoryOps {
 public:
  bool host_direct() const override { return false; }
  bool adds_in_windows() const override { return false; }
  Status copy(void* dst, const void* src, uint64_t bytes) const override {
    return host_gin_memory().copy(dst, src, bytes);
  }
  Status add(uint64_t* word, uint64_t value) const override { return host_gin_memory().add(word, value); }
};

}  // namespace

const GinMemoryOps& host_gin_memory() {
  static const HostGinMemory ops;
  return ops;
}

const GinMemoryOps& host_gin_memory_as_device() {
  static const HostAsDeviceGinMemory ops;
  return ops;
}

Status GinSignals::add(uint32_t id, uint64_t value) const {
  if (id >= count) return BRAID_ERROR(ncclInvalidArgument, "GIN signal {} out of range [0, {})", id, count);
  return ops->add(&words[id], value);
}

Status add_to_word(const GinMemoryOps& ops, char* word, uint64_t value) {
  if (!ops.adds_in_windows())
    return BRAID_ERROR(ncclInvalidUsage, "GIN VA signal: this backend cannot add to a word of window memory from "
                       "the proxy (ginVaSignalsRequired = false is what it serves)");
  if (reinterpret_cast<uintptr_t>(word) % alignof(uint64_t))
    return BRAID_ERROR(ncclInvalidArgument, "GIN VA signal word at {} is not 8-byte aligned", static_cast<void*>(word));
  return ops.add(reinterpret_cast<uint64_t*>(word), value);
}

void GinFault::set(const Status& s) {
  if (s.is_ok()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_.load(std::memory_order_relaxed)) return;
  first_ = s;
  if (on_first_) on_first_(s);  // before failed(): whoever sees the fault sees what it set off
  failed_.store(true, std::memory_order_release);
}

Status GinFault::get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_;
}

Status wait_signal(const GinSignals& signals, uint32_t id, uint64_t at_least, Deadline deadline,
                   const GinFault* fault) {
  if (id >= signals.count)
    return BRAID_ERROR(ncclInvalidArgument, "GIN signal {} out of range [0, {})", id, signals.count);
  Waiter waiter;
  for (;;) {
    const uint64_t v = __atomic_load_n(&signals.words[id], __ATOMIC_ACQUIRE);
    if (int64_t(v - at_least) >= 0) return Status::ok();
    if (fault && fault->failed())
      return std::move(fault->get()).context(fmt::format("waiting for GIN signal {} to reach {}", id, at_least));
    if (deadline.expired())
      return BRAID_ERROR(ncclSystemError, "timed out waiting for GIN signal {} to reach {} (it is {})", id, at_least, v);
    waiter.pause();
  }
}

}  // namespace braid::devapi

#include "src/transport/ibverbs/ib_mr_cache.h"

#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace braid {

IbMrCache::~IbMrCache() {
  for (auto& [begin, e] : by_begin_) ibv_dereg_mr(e->mr);
  for (auto& e : retired_) ibv_dereg_mr(e->mr);
}

Status IbMrCache::acquire(void* data, size_t bytes, Entry** out) {
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + std::max<size_t>(bytes, 1) + page - 1) & ~(page - 1);
  std::lock_guard<std::mutex> lock(mutex_);
  // Entries may overlap; any that starts at or before `begin` may cover it.
  for (auto it = by_begin_.upper_bound(begin); it != by_begin_.begin();) {
    --it;
    if (it->second->end >= end) {
      ++it->second->users;
      *out = it->second.get();
      return Status::ok();
    }
  }
  constexpr int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  void* const at = reinterpret_cast<void*>(begin);
  ibv_mr* mr = relaxed_ordering_ ? ibv_reg_mr_iova2(pd_, at, end - begin, begin, access | IBV_ACCESS_RELAXED_ORDERING)
                                 : ibv_reg_mr(pd_, at, end - begin, access);
  if (!mr)
    return BRAID_ERROR(ncclSystemError, "ibv_reg_mr of {} bytes: {}{}", end - begin, std::strerror(errno),
                       errno == ENOMEM || errno == EPERM ? " (locked-memory limit: ulimit -l)" : "");
  auto e = std::make_unique<Entry>(Entry{begin, end, mr, 1});
  *out = e.get();
  // Several entries may start at one page; keep each (the key makes it unique).
  auto [it, inserted] = by_begin_.emplace(begin, nullptr);
  if (!inserted) {
    // An older, smaller one starts here: the new one replaces it in the index
    // and the old one lives on until its users let go (release finds it by pointer).
    retired_.push_back(std::move(it->second));
  }
  it->second = std::move(e);
  return Status::ok();
}

void IbMrCache::release(Entry* e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--e->users > 0) return;
  auto it = by_begin_.find(e->begin);
  if (it != by_begin_.end() && it->second.get() == e) {
    ibv_dereg_mr(e->mr);
    by_begin_.erase(it);
    return;
  }
  for (auto r = retired_.begin(); r != retired_.end(); ++r)
    if (r->get() == e) {
      ibv_dereg_mr(e->mr);
      retired_.erase(r);
      return;
    }
}

size_t IbMrCache::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_begin_.size() + retired_.size();
}

}  // namespace braid

// The registration cache of one protection domain.
//
// Registering memory (ibv_reg_mr) pins its pages and costs a system call
// that grows with the size, so a buffer registered again while a
// registration covering it is alive reuses that one: entries are page-
// aligned ranges with a reference count, found by address.  An entry is
// deregistered when its last user lets go, never kept beyond: memory freed
// and allocated again at the same address may be other pages, and a stale
// registration would let the NIC write the old ones (the classic hazard of
// registration caches that keep entries; avoiding it needs hooks on free).
// With `relaxed_ordering` every registration carries
// IBV_ACCESS_RELAXED_ORDERING (ib_select.h's relaxed_ordering_setting).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "src/base/status.h"

struct ibv_pd;
struct ibv_mr;

namespace braid {

class IbMrCache {
 public:
  IbMrCache(ibv_pd* pd, bool relaxed_ordering) : pd_(pd), relaxed_ordering_(relaxed_ordering) {}
  ~IbMrCache();
  struct Entry {
    uintptr_t begin, end;
    ibv_mr* mr;
    int users;
  };
  // A registration covering [data, data + bytes); the handle is an Entry*.
  Status acquire(void* data, size_t bytes, Entry** out);
  void release(Entry* e);
  size_t entries() const;

 private:
  ibv_pd* pd_;
  bool relaxed_ordering_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, std::unique_ptr<Entry>> by_begin_;
  std::vector<std::unique_ptr<Entry>> retired_;  // replaced in the index, still in use
};

}  // namespace braid

// Peers' memory opened in this process, each allocation once: the
// registration cache behind one-sided schedules between processes.
//
// Opening a peer's allocation (mapping its memfd on the host; opening a CUDA
// IPC handle on a device) costs system calls and page-table work, far more
// than a small collective call, so it is done the first time a peer names
// the allocation in a call, and kept for the calls after it.  An allocation
// is known by its owner (pid and process token: this_process()), its serial
// (never reused in the owner's process) and its base address.
//
// What is kept is dropped
//  - when the owner names a new allocation at the same base: two live
//    allocations cannot start at one address, so the old one was freed;
//  - when more than `capacity` allocations are held, the least recently
//    used first (its owner most likely freed it);
//  - with the cache (its communicator's end).
// Until then an opening keeps the peer's freed memory alive, which costs
// memory but never correctness: a new allocation is a new serial.
//
// A failed opening is remembered as well, so that memory this process
// cannot open costs one try, not one per call; the caller then takes its
// other path (for the host, CMA).
//
// Not thread-safe: each rank's executor has its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "src/base/status.h"

namespace braid {

struct PeerAllocationKey {
  uint64_t pid = 0;
  uint64_t process = 0;  // this_process() of the owner
  uint64_t serial = 0;   // unique in the owner's process
  uint64_t base = 0;     // where it starts in the owner's address space
  bool same_owner(const PeerAllocationKey& o) const { return pid == o.pid && process == o.process; }
};

template <typename Opening>
class PeerMemoryCache {
 public:
  explicit PeerMemoryCache(size_t capacity = 64) : capacity_(std::max<size_t>(1, capacity)) {}

  // The opening of `key`'s allocation: made by open(key, &opening), a
  // Status-returning callable, the first time.  nullptr if that failed (now
  // or before); *failure, if given, then says why.  A hit is one hash
  // lookup; the scans below run on misses only.
  template <typename Open>
  const Opening* find_or_open(const PeerAllocationKey& key, Open&& open, Status* failure = nullptr) {
    ++tick_;
    if (auto it = entries_.find(id_of(key)); it != entries_.end()) {
      it->second.used = tick_;
      if (failure && !it->second.opening) *failure = it->second.failure;
      return it->second.opening.get();
    }
    // The owner freed whatever it had at this base.
    std::erase_if(entries_,
                  [&](const auto& e) { return e.second.key.same_owner(key) && e.second.key.base == key.base; });
    if (entries_.size() >= capacity_)
      entries_.erase(std::min_element(entries_.begin(), entries_.end(),
                                      [](const auto& a, const auto& b) { return a.second.used < b.second.used; }));
    Entry e{key, nullptr, Status::ok(), tick_};
    e.failure = open(key, &e.opening);
    ++opens_;
    if (!e.failure.is_ok()) e.opening.reset();
    if (failure && !e.opening) *failure = e.failure;
    return entries_.insert_or_assign(id_of(key), std::move(e)).first->second.opening.get();
  }

  size_t size() const { return entries_.size(); }  // openings held, failed ones included
  uint64_t opens() const { return opens_; }        // attempts made, ever

 private:
  struct Entry {
    PeerAllocationKey key;
    std::unique_ptr<Opening> opening;  // null: the attempt failed
    Status failure;
    uint64_t used = 0;
  };
  using Id = std::tuple<uint64_t, uint64_t, uint64_t>;  // pid, process, serial: one allocation
  struct IdHash {
    size_t operator()(const Id& id) const {
      const auto [pid, process, serial] = id;
      return std::hash<uint64_t>()(process ^ (pid * 0x9e3779b97f4a7c15ull) ^ (serial * 0xc2b2ae3d27d4eb4full));
    }
  };
  static Id id_of(const PeerAllocationKey& k) { return {k.pid, k.process, k.serial}; }

  size_t capacity_;
  std::unordered_map<Id, Entry, IdHash> entries_;
  uint64_t tick_ = 0, opens_ = 0;
};

}  // namespace braid

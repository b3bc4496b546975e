// The live communicators, looked up by every API call without a lock.
//
// Every entry point finds its handle here before it touches the
// communicator, so a destroyed or garbage handle is an error rather than a
// read of freed memory; and ncclCommDestroy/Abort must not free one under a
// call that found it.  A global mutex did both, and cost every collective
// two atomic read-modify-writes on one shared line (thread-ranks queued on
// it: a count-0 AllGather on 4 thread-ranks took 0.11-0.14 us with it,
// 0.07-0.10 us with this table; perf/results/compare_20261125b.txt).
//
// Lookups here only load: an open-addressing table (linear probing) of
// slots, each holding a communicator (or nothing, or a tombstone where one
// was removed) and a count of the readers inside the slot, one slot per
// cache line so that ranks' threads do not share counters.  A reader that
// found its communicator enters the slot (count + 1), checks that the slot
// still holds it, runs its few instructions (taking a use of the
// communicator) and leaves.  Removal puts a tombstone in the slot and then
// waits until no reader is inside: the two sides are sequentially
// consistent, so either the reader sees the tombstone, or the remover sees
// the reader and waits for it.  Insertions and removals take a mutex
// among themselves; communicators beyond the table's capacity go to a set
// under that mutex, which lookups consult only while it is not empty.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>

struct ncclComm;

namespace braid {

class LiveComms {
 public:
  static constexpr size_t kSlots = 1024;  // a power of two

  void insert(const ncclComm* comm);
  // False if `comm` was not live.  Once it returns, no `if_live` of comm
  // runs or can start.
  bool erase(const ncclComm* comm);
  bool contains(const ncclComm* comm) const;

  // Runs fn() if `comm` is live, before any erase(comm) can return; fn
  // should be short (erase waits for it) and must not insert or erase.
  template <class F>
  bool if_live(const ncclComm* comm, F&& fn) {
    if (const size_t i = find(comm); i != kNotFound) {
      Slot& s = slots_[i];
      s.readers.fetch_add(1);
      const bool live = s.comm.load() == comm;
      if (live) fn();
      s.readers.fetch_sub(1);
      if (live) return true;
    }
    if (overflowed_.load() == 0) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    if (overflow_.count(comm) == 0) return false;
    fn();
    return true;
  }

 private:
  static constexpr size_t kNotFound = SIZE_MAX;
  struct alignas(64) Slot {
    std::atomic<const ncclComm*> comm{nullptr};
    std::atomic<uint32_t> readers{0};
  };
  static const ncclComm* tombstone() { return reinterpret_cast<const ncclComm*>(uintptr_t(1)); }
  static size_t home(const ncclComm* comm);
  size_t find(const ncclComm* comm) const;

  Slot slots_[kSlots];
  mutable std::mutex mutex_;  // insert and erase; the overflow set
  std::set<const ncclComm*> overflow_;
  std::atomic<size_t> overflowed_{0};
};

// The process's registry (never destroyed: atexit paths use it).
LiveComms& live_comms();

}  // namespace braid

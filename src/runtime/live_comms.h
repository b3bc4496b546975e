// The live communicators, looked up by every API call without a lock.
//
// Every entry point finds its handle here before it touches the
// communicator, so a destroyed or garbage handle is an error rather than a
// read of freed memory; and ncclCommDestroy/Abort must not free one under a
// call that found it.  A global mutex did both, and cost every collective
// two atomic read-modify-writes on one shared line (thread-ranks queued on
// it: a count-0 AllGather on 4 thread-ranks was measurably slower with it
// than with this table; perf/results/compare_20261125b.txt section 3).
//
// Lookups here only load: an open-addressing table (linear probing) of
// slots, each holding a communicator (or nothing, or a tombstone where one
// was removed), one slot per cache line.  A thread that found its
// communicator publishes it in its own hazard record ("this thread uses
// it"), checks that the slot still holds it, and uses it until it clears
// the record.  Removal puts a tombstone in the slot and then runs a
// process-wide memory barrier (membarrier(2), private expedited): when it
// returns, every thread either sees the tombstone or has its hazard
// visible, so `in_use` sees every use that started, and the code that frees
// a communicator waits for it to say none is left.  The barrier on the rare
// side lets the common side publish with plain stores: otherwise its
// store-then-load needs a full fence, and the reader count and use count
// this replaced cost a count-0 call four atomic read-modify-writes, most
// of its time (perf/results/compare_20261125d.txt section 5).  Where
// membarrier is refused, readers publish with a fenced store instead.
//
// Insertions and removals take a mutex among themselves; communicators
// beyond the table's capacity go to a set under that mutex, which lookups
// consult only while it is not empty (their uses are counted under it).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>

struct ncclComm;

namespace braid {

class LiveComms {
 public:
  static constexpr size_t kSlots = 1024;  // a power of two

  // use_membarrier false: readers fence their own stores (tests of that fallback).
  explicit LiveComms(bool use_membarrier = true);
  void insert(const ncclComm* comm);
  // False if `comm` was not live.  Once it returns, no use of comm can
  // start; uses that started before are seen by in_use(comm).
  bool erase(const ncclComm* comm);
  bool contains(const ncclComm* comm) const;
  // Whether some thread uses `comm` (a Use, or inside if_live).
  bool in_use(const ncclComm* comm) const;

  // A use of a communicator by this thread, if it was live when the Use
  // was made: until the Use is destroyed, in_use(comm) is true.  Uses on
  // one thread end in the reverse order they were made (scopes).
  class Use {
   public:
    Use(LiveComms& table, const ncclComm* comm);
    ~Use();
    bool live() const { return live_; }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    LiveComms& table_;
    const ncclComm* comm_;
    bool live_ = false;
    bool counted_ = false;  // beyond this thread's hazards: counted in overflow_uses_
  };

  // Runs fn() if `comm` is live, as a Use; fn must not erase comm.
  template <class F>
  bool if_live(const ncclComm* comm, F&& fn) {
    Use use(*this, comm);
    if (use.live()) fn();
    return use.live();
  }

  static constexpr int kHazardsPerThread = 4;  // nested Uses on one thread (2 in practice)

 private:
  static constexpr size_t kNotFound = SIZE_MAX;
  struct alignas(64) Slot {
    std::atomic<const ncclComm*> comm{nullptr};
  };
  static const ncclComm* tombstone() { return reinterpret_cast<const ncclComm*>(uintptr_t(1)); }
  static size_t home(const ncclComm* comm);
  size_t find(const ncclComm* comm) const;
  // After a tombstone: every thread sees it, or has its hazard visible.
  void barrier_all_threads();

  Slot slots_[kSlots];
  bool asymmetric_ = false;  // membarrier works: hazards are published without a fence
  mutable std::mutex mutex_;  // insert and erase; the overflow set and its uses
  std::set<const ncclComm*> overflow_;
  std::atomic<size_t> overflowed_{0};
  std::map<const ncclComm*, int> overflow_uses_;  // uses of overflow communicators, and uses beyond the hazards
};

// The process's registry (never destroyed: atexit paths use it).
LiveComms& live_comms();

}  // namespace braid

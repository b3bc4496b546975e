// The live-communicator table: see live_comms.h for the protocol.
#include "src/runtime/live_comms.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace braid {
namespace {

// One thread's hazards: the communicators it uses, innermost last.
// Records are never freed; a thread's record returns to the pool when the
// thread exits.
struct alignas(64) HazardRecord {
  std::atomic<const ncclComm*> held[LiveComms::kHazardsPerThread] = {};
  std::atomic<bool> taken{true};
  HazardRecord* next = nullptr;
};
std::atomic<HazardRecord*> records{nullptr};

// This thread's record and how many of its hazards are in use.  Not
// initial-exec, though __tls_get_addr costs a count-0 call a few ns: a
// library with initial-exec thread-locals needs glibc's small static TLS
// reserve and fails to load late, with dlopen, as Python, PyTorch, CuPy and
// JAX load NCCL (tests/abi/late_dlopen_test.c; perf/results/
// late_dlopen_20261128.txt).
struct ThreadHazards {
  HazardRecord* record = nullptr;
  int depth = 0;
  bool exiting = false;
};
thread_local ThreadHazards mine;

struct RecordReturner {
  ~RecordReturner() {
    if (mine.record) mine.record->taken.store(false, std::memory_order_release);
    mine.record = nullptr;
    mine.exiting = true;
  }
};

HazardRecord* claim_record() {
  HazardRecord* r = nullptr;
  for (HazardRecord* p = records.load(std::memory_order_acquire); p && !r; p = p->next) {
    bool free = false;
    if (!p->taken.load(std::memory_order_relaxed) && p->taken.compare_exchange_strong(free, true)) r = p;
  }
  if (!r) {
    r = new HazardRecord;
    r->next = records.load();
    while (!records.compare_exchange_weak(r->next, r)) {
    }
  }
  // Returned at thread exit; a use during the thread's own teardown keeps
  // its record for good (no thread_local may be created then).
  if (!mine.exiting) {
    thread_local RecordReturner returner;
    (void)returner;
  }
  return r;
}

long membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

}  // namespace

LiveComms::LiveComms(bool use_membarrier) {
  asymmetric_ = use_membarrier && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

size_t LiveComms::home(const ncclComm* comm) {
  // Allocations are 16-byte aligned: mix the bits above that.
  uint64_t h = reinterpret_cast<uintptr_t>(comm) >> 4;
  h *= 0x9e3779b97f4a7c15ull;
  return size_t(h >> 54) & (kSlots - 1);
}

size_t LiveComms::find(const ncclComm* comm) const {
  if (!comm || comm == tombstone()) return kNotFound;
  for (size_t probe = 0, i = home(comm); probe < kSlots; ++probe, i = (i + 1) & (kSlots - 1)) {
    const ncclComm* held = slots_[i].comm.load();
    if (held == comm) return i;
    if (!held) return kNotFound;  // the end of comm's probe run
  }
  return kNotFound;
}

void LiveComms::insert(const ncclComm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (find(comm) != kNotFound || overflow_.count(comm)) return;
  // The first empty or tombstone slot of comm's probe run.
  for (size_t probe = 0, i = home(comm); probe < kSlots; ++probe, i = (i + 1) & (kSlots - 1)) {
    const ncclComm* held = slots_[i].comm.load();
    if (!held || held == tombstone()) {
      slots_[i].comm.store(comm);
      return;
    }
  }
  overflow_.insert(comm);
  overflowed_.store(overflow_.size());
}

void LiveComms::barrier_all_threads() {
  if (!asymmetric_) return;  // readers fenced their own stores
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // Registration is per process and survives fork; should it have been
  // lost, register again.  Failing that (it worked at startup, so this is
  // not expected), the global command needs no registration (slower: it
  // waits for every CPU to pass through the scheduler).
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return;
  if (membarrier(MEMBARRIER_CMD_GLOBAL) == 0) return;
  // Nothing left that orders other threads' stores: give every store
  // buffer far longer than it needs to drain.
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

bool LiveComms::erase(const ncclComm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const size_t i = find(comm); i != kNotFound) {
    slots_[i].comm.store(tombstone());
    barrier_all_threads();
    return true;
  }
  const bool erased = overflow_.erase(comm) == 1;
  overflowed_.store(overflow_.size());
  return erased;
}

bool LiveComms::contains(const ncclComm* comm) const {
  if (find(comm) != kNotFound) return true;
  if (overflowed_.load() == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return overflow_.count(comm) == 1;
}

bool LiveComms::in_use(const ncclComm* comm) const {
  for (const HazardRecord* r = records.load(std::memory_order_acquire); r; r = r->next)
    for (const auto& h : r->held)
      if (h.load(std::memory_order_acquire) == comm) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  return overflow_uses_.count(comm) == 1;
}

LiveComms::Use::Use(LiveComms& table, const ncclComm* comm) : table_(table), comm_(comm) {
  const size_t i = table.find(comm);
  if (i != kNotFound && mine.depth < kHazardsPerThread) {
    if (!mine.record) mine.record = claim_record();
    std::atomic<const ncclComm*>& hazard = mine.record->held[mine.depth];
    if (table.asymmetric_) {
      // Ordered for this compiler only: erase's membarrier orders it for the CPU.
      hazard.store(comm, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      live_ = table.slots_[i].comm.load(std::memory_order_acquire) == comm;
    } else {
      hazard.store(comm);
      live_ = table.slots_[i].comm.load() == comm;
    }
    if (live_) ++mine.depth;
    else hazard.store(nullptr, std::memory_order_relaxed);  // erased meanwhile
    return;
  }
  if (i == kNotFound && table.overflowed_.load() == 0) return;
  // An overflow communicator, or a use beyond this thread's hazards.
  std::lock_guard<std::mutex> lock(table.mutex_);
  if (table.find(comm) == kNotFound && table.overflow_.count(comm) == 0) return;
  ++table.overflow_uses_[comm];
  live_ = counted_ = true;
}

LiveComms::Use::~Use() {
  if (!live_) return;
  if (counted_) {
    std::lock_guard<std::mutex> lock(table_.mutex_);
    if (--table_.overflow_uses_[comm_] == 0) table_.overflow_uses_.erase(comm_);
    return;
  }
  mine.record->held[--mine.depth].store(nullptr, std::memory_order_release);
}

LiveComms& live_comms() {
  static auto* comms = new LiveComms;
  return *comms;
}

}  // namespace braid

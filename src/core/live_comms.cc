// The live-communicator table: see live_comms.h for the protocol.
#include "src/core/live_comms.h"

#include <thread>

namespace braid {

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

bool LiveComms::erase(const ncclComm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const size_t i = find(comm); i != kNotFound) {
    Slot& s = slots_[i];
    s.comm.store(tombstone());
    while (s.readers.load() != 0) std::this_thread::yield();
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

LiveComms& live_comms() {
  static auto* comms = new LiveComms;
  return *comms;
}

}  // namespace braid

// How many blocks one rank's collective launch may use when ranks share GPUs.
//
// Ranks spin inside their kernels waiting for each other, so each launch
// must be able to run at the same time as the launches of the peers on its
// device: a kernel that fills the device could otherwise wait forever for a
// peer whose blocks find no room.  Every rank reports its device (host and
// device identity) and how many of the collective kernel's blocks that
// device runs at once; a rank's share is that number over the ranks on its
// device, and the communicator takes the least share, so every rank plans
// the same number of slices.  Plain C++ (no CUDA), so it is unit-tested.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace braid {

struct DeviceShare {
  uint64_t machine_hash = 0;  // machine_hash(): a GPU is shared by the ranks of its machine, whatever /dev/shm
  uint8_t device_id[16] = {};  // the physical device (ordinals differ between processes)
  int32_t resident_blocks = 0;  // of the collective kernel, on that device
};

inline bool same_device(const DeviceShare& a, const DeviceShare& b) {
  return a.machine_hash == b.machine_hash && std::memcmp(a.device_id, b.device_id, sizeof a.device_id) == 0;
}

inline int32_t launch_block_budget(const std::vector<DeviceShare>& ranks) {
  int32_t budget = INT32_MAX;
  for (const DeviceShare& a : ranks) {
    const auto sharers =
        std::count_if(ranks.begin(), ranks.end(), [&](const DeviceShare& b) { return same_device(a, b); });
    budget = std::min(budget, int32_t(a.resident_blocks / sharers));
  }
  return ranks.empty() ? 0 : budget;
}

// How many slices of a schedule one launch runs (each slice a copy of the
// schedule's `widest` lanes on channels of its own, the launch's blocks
// slices x widest): as many as the connection channels hold (`channels`
// over the `used` the schedule itself takes), within the block budget and
// the caller's cap on blocks (maxCTAs), and at least one, whose blocks a
// schedule cannot do without.
inline uint32_t launch_slices(uint32_t channels, uint32_t used, uint32_t widest, int32_t block_budget,
                              int32_t max_ctas) {
  const int64_t blocks = std::min<int64_t>(std::max(block_budget, 0), std::max(max_ctas, 0));
  const int64_t slices = std::min<int64_t>(channels / std::max(used, 1u), blocks / std::max(widest, 1u));
  return uint32_t(std::max<int64_t>(1, slices));
}

}  // namespace braid

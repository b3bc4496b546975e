// The CUDA backend's block budget (src/exec/device_share.h): ranks that share
// a device split the blocks it keeps resident, and the communicator plans
// with the least share.
#include <catch2/catch.hpp>
#include <vector>

#include "src/exec/device_share.h"

using braid::DeviceShare;
using braid::launch_block_budget;

namespace {

DeviceShare on(uint64_t host, uint8_t device, int32_t resident) {
  DeviceShare s;
  s.machine_hash = host;
  s.device_id[0] = device;
  s.resident_blocks = resident;
  return s;
}

}  // namespace

TEST_CASE("device share: ranks on one GPU split its resident blocks", "[device_share]") {
  // One H200 (132 SMs x 2 blocks of the collective kernel), as measured.
  CHECK(launch_block_budget({on(1, 0, 264)}) == 264);
  CHECK(launch_block_budget({on(1, 0, 264), on(1, 0, 264)}) == 132);
  CHECK(launch_block_budget(std::vector<DeviceShare>(4, on(1, 0, 264))) == 66);
  CHECK(launch_block_budget(std::vector<DeviceShare>(8, on(1, 0, 264))) == 33);
}

TEST_CASE("device share: one rank per GPU keeps the whole GPU, and the least share wins", "[device_share]") {
  CHECK(launch_block_budget({on(1, 0, 264), on(1, 1, 264), on(1, 2, 264), on(1, 3, 264)}) == 264);
  // Two ranks on a smaller device 0, one on device 1: every rank gets 66.
  CHECK(launch_block_budget({on(1, 0, 132), on(1, 0, 132), on(1, 1, 264)}) == 66);
  // The same device id on two hosts is two devices.
  CHECK(launch_block_budget({on(1, 0, 264), on(2, 0, 264)}) == 264);
}

TEST_CASE("device share: more ranks than resident blocks leaves no budget", "[device_share]") {
  CHECK(launch_block_budget(std::vector<DeviceShare>(300, on(1, 0, 264))) == 0);
  CHECK(launch_block_budget({}) == 0);
}

TEST_CASE("device share: a launch's slices fit the channels, the block budget and maxCTAs", "[device_share]") {
  using braid::launch_slices;
  constexpr int32_t kNoCap = INT32_MAX;
  // 32 connection channels, a schedule on 2 of them with 2 lanes a rank: 16 slices, 32 blocks.
  CHECK(launch_slices(32, 2, 2, 264, kNoCap) == 16);
  CHECK(launch_slices(32, 2, 2, 20, kNoCap) == 10);  // the budget: 10 slices of 2 blocks
  CHECK(launch_slices(32, 2, 2, 264, 8) == 4);       // maxCTAs 8: 4 slices of 2 blocks
  CHECK(launch_slices(32, 2, 2, 6, 8) == 3);         // the lower of the two
  // A schedule wider than the cap still runs once, on its lanes.
  CHECK(launch_slices(32, 2, 4, 264, 2) == 1);
  CHECK(launch_slices(32, 2, 4, 0, kNoCap) == 1);
  CHECK(launch_slices(1, 1, 1, 264, kNoCap) == 1);
}

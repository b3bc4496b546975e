// A DevicePlan's upload image (src/exec/cuda_plan_image.h): lanes, ops, deps
// and FIFOs one after another, each 16-byte aligned and byte for byte what
// was given, and a plan pointed at an uploaded copy reads the same records.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "src/exec/cuda_plan_image.h"

using namespace braid;
using namespace braid::cuda;

TEST_CASE("a plan's image lays its records out 16-byte aligned, and a plan pointed at it reads them back",
          "[plan_image]") {
  // Sizes that leave each array off a 16-byte boundary (3 lanes of 12 bytes,
  // 5 deps of 8) and an empty one.
  for (size_t nops : {size_t(0), size_t(1), size_t(7)}) {
    std::vector<LaneRecord> lanes(3);
    for (uint32_t i = 0; i < lanes.size(); ++i) lanes[i] = LaneRecord{i * 10, i + 1, i % 2};
    std::vector<OpRecord> ops(nops);
    for (size_t i = 0; i < nops; ++i) {
      ops[i].type = uint8_t(i % 5);
      ops[i].src_index = uint32_t(100 + i);
      ops[i].send_conn = int32_t(i) - 1;
    }
    std::vector<DepRecord> deps(5);
    for (uint32_t i = 0; i < deps.size(); ++i) deps[i] = DepRecord{i, 2 * i};
    std::vector<DevFifo> fifos(2);
    fifos[1].peer = 7;
    fifos[1].slots = reinterpret_cast<char*>(0x1000);

    const PlanImage image = plan_image(lanes, ops, deps, fifos);
    CHECK(image.ops_at % 16 == 0);
    CHECK(image.deps_at % 16 == 0);
    CHECK(image.fifos_at % 16 == 0);
    CHECK(image.ops_at >= lanes.size() * sizeof(LaneRecord));
    CHECK(image.deps_at >= image.ops_at + ops.size() * sizeof(OpRecord));
    CHECK(image.fifos_at >= image.deps_at + deps.size() * sizeof(DepRecord));
    CHECK(image.bytes.size() >= image.fifos_at + fifos.size() * sizeof(DevFifo));

    // "Uploaded": a 16-byte aligned copy, as the device block is.
    std::vector<char> storage(image.bytes.size() + 16);
    char* block = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) % 16) % 16;
    std::memcpy(block, image.bytes.data(), image.bytes.size());
    DevicePlan plan;
    point_plan_at(image, block, &plan);
    CHECK(plan.block == block);
    CHECK(plan.bytes == image.bytes.size());
    for (size_t i = 0; i < lanes.size(); ++i) {
      CHECK(plan.lanes[i].op_begin == lanes[i].op_begin);
      CHECK(plan.lanes[i].op_count == lanes[i].op_count);
      CHECK(plan.lanes[i].channel == lanes[i].channel);
    }
    for (size_t i = 0; i < nops; ++i) {
      CHECK(std::memcmp(&plan.ops[i], &ops[i], sizeof(OpRecord)) == 0);
      CHECK(reinterpret_cast<uintptr_t>(&plan.ops[i]) % alignof(OpRecord) == 0);
    }
    for (size_t i = 0; i < deps.size(); ++i) {
      CHECK(plan.deps[i].lane == deps[i].lane);
      CHECK(plan.deps[i].op == deps[i].op);
    }
    CHECK(plan.fifos[1].peer == 7);
    CHECK(plan.fifos[1].slots == reinterpret_cast<char*>(0x1000));
    CHECK(plan.fifos[0].peer == -1);
  }
}

// A DevicePlan's records as one block of bytes (src/exec/cuda/device_plan.h):
// lanes, ops, deps and the per-slice FIFO table one after another, each
// starting 16-byte aligned, so that the CUDA backend allocates and uploads a
// schedule's plan in one piece, and the plan's arrays then point into it.
// Plain C++ (no CUDA calls), so the CPU tests check the layout.
#pragma once

#include <cstddef>
#include <vector>

#include "src/exec/cuda/device_plan.h"

namespace braid::cuda {

struct PlanImage {
  std::vector<char> bytes;
  size_t ops_at = 0, deps_at = 0, fifos_at = 0;  // the lanes start at 0
};

PlanImage plan_image(const std::vector<LaneRecord>& lanes, const std::vector<OpRecord>& ops,
                     const std::vector<DepRecord>& deps, const std::vector<DevFifo>& fifos);

// Points plan's arrays (and its byte count) at `block`, where `image` was
// uploaded.
void point_plan_at(const PlanImage& image, void* block, DevicePlan* plan);

}  // namespace braid::cuda

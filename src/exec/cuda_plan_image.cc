#include "src/exec/cuda_plan_image.h"

#include <cstring>

namespace braid::cuda {

namespace {

size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

template <typename T>
size_t bytes_of(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

}  // namespace

PlanImage plan_image(const std::vector<LaneRecord>& lanes, const std::vector<OpRecord>& ops,
                     const std::vector<DepRecord>& deps, const std::vector<DevFifo>& fifos) {
  PlanImage image;
  image.ops_at = align16(bytes_of(lanes));
  image.deps_at = image.ops_at + align16(bytes_of(ops));
  image.fifos_at = image.deps_at + align16(bytes_of(deps));
  image.bytes.assign(image.fifos_at + align16(bytes_of(fifos)) + 16, 0);  // never empty
  char* at = image.bytes.data();
  if (!lanes.empty()) std::memcpy(at, lanes.data(), bytes_of(lanes));
  if (!ops.empty()) std::memcpy(at + image.ops_at, ops.data(), bytes_of(ops));
  if (!deps.empty()) std::memcpy(at + image.deps_at, deps.data(), bytes_of(deps));
  if (!fifos.empty()) std::memcpy(at + image.fifos_at, fifos.data(), bytes_of(fifos));
  return image;
}

void point_plan_at(const PlanImage& image, void* block, DevicePlan* plan) {
  char* base = static_cast<char*>(block);
  plan->block = block;
  plan->bytes = image.bytes.size();
  plan->lanes = reinterpret_cast<LaneRecord*>(base);
  plan->ops = reinterpret_cast<OpRecord*>(base + image.ops_at);
  plan->deps = reinterpret_cast<DepRecord*>(base + image.deps_at);
  plan->fifos = reinterpret_cast<DevFifo*>(base + image.fifos_at);
}

}  // namespace braid::cuda

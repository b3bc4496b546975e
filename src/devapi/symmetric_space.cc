// First-fit over an ordered free list: deterministic by construction (no
// addresses, no hashing), so identical request sequences give identical
// offsets on every rank.
#include "src/devapi/symmetric_space.h"

#include <algorithm>
#include <bit>

namespace braid::devapi {

namespace {

// Rounds up, or returns false on overflow.
bool round_up(uint64_t x, uint64_t unit, uint64_t* out) {
  if (x > UINT64_MAX - (unit - 1)) return false;
  *out = (x + unit - 1) / unit * unit;
  return true;
}

}  // namespace

Status flat_stride(uint64_t footprint, uint64_t* stride) {
  if (footprint == 0) return BRAID_ERROR(ncclInvalidArgument, "symmetric footprint is 0 bytes");
  // The device adds peer * stride4G to a pointer's upper word as 32 bits.
  if (footprint > (uint64_t(UINT32_MAX) << 32))
    return BRAID_ERROR(ncclInvalidArgument, "symmetric footprint of {} bytes exceeds what stride4G can express",
                       footprint);
  (void)round_up(footprint, k4GiB, stride);
  return Status::ok();
}

Status agreed_request(const std::vector<SymmetricRequest>& per_rank, SymmetricRequest* out) {
  if (per_rank.empty()) return BRAID_ERROR(ncclInvalidArgument, "no ranks' requests to agree on");
  SymmetricRequest merged;
  int empty_rank = -1, full_rank = -1;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const SymmetricRequest& q = per_rank[r];
    if (q.align != 0 && !std::has_single_bit(q.align))
      return BRAID_ERROR(ncclInvalidArgument, "rank {} asks for alignment {}, not a power of two", r, q.align);
    (q.bytes == 0 ? empty_rank : full_rank) = int(r);
    merged.bytes = std::max(merged.bytes, q.bytes);
    merged.align = std::max(merged.align, q.align);
  }
  if (empty_rank >= 0 && full_rank >= 0)
    return BRAID_ERROR(ncclInvalidUsage, "mismatched symmetric allocation: rank {} asks for 0 bytes, rank {} for {}",
                       empty_rank, full_rank, per_rank[full_rank].bytes);
  if (full_rank < 0) return BRAID_ERROR(ncclInvalidArgument, "symmetric allocation of 0 bytes");
  *out = merged;
  return Status::ok();
}

Status SymmetricSpace::create(uint64_t capacity, uint64_t granularity, SymmetricSpace* out) {
  if (!std::has_single_bit(granularity))
    return BRAID_ERROR(ncclInvalidArgument, "symmetric space granularity {} is not a power of two", granularity);
  if (capacity == 0 || capacity % granularity != 0)
    return BRAID_ERROR(ncclInvalidArgument, "symmetric space of {} bytes is not a positive multiple of {}", capacity,
                       granularity);
  SymmetricSpace s;
  s.capacity_ = capacity;
  s.granularity_ = granularity;
  s.free_[0] = capacity;
  *out = std::move(s);
  return Status::ok();
}

Status SymmetricSpace::alloc(const SymmetricRequest& r, uint64_t* offset) {
  if (granularity_ == 0) return BRAID_ERROR(ncclInvalidUsage, "symmetric space was never created");
  if (r.bytes == 0) return BRAID_ERROR(ncclInvalidArgument, "symmetric allocation of 0 bytes");
  if (r.align != 0 && !std::has_single_bit(r.align))
    return BRAID_ERROR(ncclInvalidArgument, "symmetric allocation alignment {} is not a power of two", r.align);
  const uint64_t align = std::max(r.align, granularity_);
  uint64_t bytes = 0;
  if (!round_up(r.bytes, granularity_, &bytes) || bytes > capacity_)
    return BRAID_ERROR(ncclInvalidArgument, "symmetric allocation of {} bytes exceeds the space ({} bytes)", r.bytes,
                       capacity_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first, size = it->second;
    uint64_t at = 0;
    if (!round_up(start, align, &at) || at - start >= size || size - (at - start) < bytes) continue;
    free_.erase(it);
    if (at > start) free_[start] = at - start;
    if (at + bytes < start + size) free_[at + bytes] = start + size - (at + bytes);
    live_[at] = bytes;
    used_ += bytes;
    *offset = at;
    return Status::ok();
  }
  return BRAID_ERROR(ncclSystemError,
                     "symmetric space exhausted: no free {} bytes aligned to {} ({} of {} bytes in use in {} "
                     "allocations)",
                     bytes, align, used_, capacity_, live_.size());
}

Status SymmetricSpace::free(uint64_t offset) {
  auto it = live_.find(offset);
  if (it == live_.end())
    return BRAID_ERROR(ncclInvalidArgument, "offset {:#x} is not a live symmetric allocation", offset);
  uint64_t start = offset, size = it->second;
  live_.erase(it);
  used_ -= size;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
  return Status::ok();
}

}  // namespace braid::devapi

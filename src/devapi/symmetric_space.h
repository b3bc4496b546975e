// The symmetric offset space: where each symmetric allocation sits inside a
// rank's slot of the flat LSA range.
//
// NCCL's device code reaches LSA peer p's copy of a window at
// lsaFlatBase + p * stride + offset, so an allocation's offset inside the
// slot must be the same on every rank (research doc 1.6).  Every rank runs
// the same deterministic first-fit over the same sequence of collective
// allocations and frees and so gets the same offsets, with nothing to
// exchange but the requests themselves: agreed_request() merges the ranks'
// requests first, so a rank asking for less still gets the offset the
// others get.  The space is pure bookkeeping; mapping memory at the offsets
// is the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "src/base/status.h"

namespace braid::devapi {

constexpr uint64_t k4GiB = uint64_t(1) << 32;

// The distance between consecutive LSA ranks' slots: the symmetric
// footprint rounded up to 4 GiB (the device adds the stride to a pointer's
// upper 32 bits), at least 4 GiB.
Status flat_stride(uint64_t footprint, uint64_t* stride);

struct SymmetricRequest {
  uint64_t bytes = 0;
  uint64_t align = 0;  // a power of two; 0 means the space's granularity
};

// One request every rank can use: the largest size and alignment any rank
// asked for.  A rank asking for nothing while another asks for bytes is a
// mismatched collective, refused.
Status agreed_request(const std::vector<SymmetricRequest>& per_rank, SymmetricRequest* out);

class SymmetricSpace {
 public:
  // `capacity` bytes in units of `granularity` (a power of two dividing it).
  static Status create(uint64_t capacity, uint64_t granularity, SymmetricSpace* out);
  SymmetricSpace() = default;

  // Lowest offset where `r` fits, aligned to max(align, granularity), size
  // rounded up to the granularity.
  Status alloc(const SymmetricRequest& r, uint64_t* offset);
  // Frees the allocation starting at `offset`.
  Status free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  size_t allocations() const { return live_.size(); }

 private:
  uint64_t capacity_ = 0;
  uint64_t granularity_ = 0;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes, coalesced
  std::map<uint64_t, uint64_t> live_;  // offset -> bytes
};

}  // namespace braid::devapi

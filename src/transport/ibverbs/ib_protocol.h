// The credit protocol of braid's InfiniBand connections, without verbs.
//
// A connection is one-way, over Q reliable-connected queue pairs.  The
// receiver gives credit: each receive it posts sends the sender a clear-to-
// send message (a SEND on queue pair 0) saying where the data may go
// {address, rkey, size, sequence number}.  The sender's n-th message takes
// the n-th credit and is written there with RDMA WRITE WITH IMMEDIATE, split
// into Q parts, part j on queue pair j, each part's immediate its length.
// Every message has all Q parts (empty ones too), so the receiver needs no
// header: queue pair j's k-th incoming write is part j of message k, because
// one queue pair delivers in order.  Message k is complete when its Q parts
// are, its length the sum of theirs.
//
// Why these choices: the sender never writes where the receiver has not
// said it may (no copy, no overrun); the credit is a SEND, not an RDMA write
// into a mailbox, so the sender learns of it through a completion, never by
// reading memory a NIC may be halfway through writing; several queue pairs
// share a large message's bytes between NIC engines (NCCL does the same,
// NCCL_IB_QPS_PER_CONNECTION).
//
// The bookkeeping here is pure and tested against an in-memory wire that
// delivers the queue pairs' parts in every interleaving
// (tests/unit/test_ib_protocol.cc); ib_net.cc does the verbs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "src/base/status.h"

namespace braid {

constexpr int kIbMaxRequests = 32;  // outstanding receives (and credits) per connection: NCCL_NET_MAX_REQUESTS
constexpr int kIbMaxQps = 8;

// What a credit says; sent as the payload of a SEND.
struct IbCredit {
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
  uint64_t seq;
};

// Part j of a message of `bytes` over `nqps` queue pairs: [offset, offset + length).
// Small messages go whole in part 0 (the others are empty): a split is worth
// its work requests only where there is bandwidth to share.
struct IbPart {
  uint64_t offset, length;
};
constexpr uint64_t kIbSplitMinBytes = 64 * 1024;
inline IbPart ib_part(uint64_t bytes, int nqps, int j) {
  if (bytes < kIbSplitMinBytes || nqps <= 1) return j == 0 ? IbPart{0, bytes} : IbPart{bytes, 0};
  const uint64_t chunk = (bytes / uint64_t(nqps) + 4095) & ~uint64_t(4095);  // page-aligned parts
  const uint64_t offset = std::min(bytes, chunk * uint64_t(j));
  return {offset, std::min(chunk, bytes - offset)};
}

// The sender's credits, in the order the receiver gave them.
class IbCredits {
 public:
  // A credit arrived; its sequence number must be the next one.
  Status add(const IbCredit& c) {
    if (c.seq != next_in_)
      return BRAID_ERROR(ncclInternalError, "InfiniBand credit {} arrived, {} was expected", c.seq, next_in_);
    ++next_in_;
    credits_.push_back(c);
    return Status::ok();
  }
  bool empty() const { return credits_.empty(); }
  // After a port failover (ib_failover.h): the credits given on the failed
  // port are void, and the receiver gives them again from `next` on.
  void restart(uint64_t next) {
    credits_.clear();
    next_in_ = next;
  }
  // The oldest credit, for the next message of `bytes`.
  Status take(uint64_t bytes, IbCredit* out) {
    *out = credits_.front();
    credits_.pop_front();
    if (bytes > out->size)
      return BRAID_ERROR(ncclInternalError, "a message of {} bytes for a receive of {} (sequence {})", bytes, out->size,
                         out->seq);
    return Status::ok();
  }

 private:
  std::deque<IbCredit> credits_;
  uint64_t next_in_ = 0;
};

// The receiver's outstanding receives and the parts that arrive for them.
class IbReceives {
 public:
  explicit IbReceives(int nqps) : nqps_(nqps), slots_(kIbMaxRequests), parts_seen_(size_t(nqps), 0) {}
  int nqps() const { return nqps_; }
  // Starts the next receive; false when kIbMaxRequests are outstanding.
  bool start(uint64_t* seq) {
    Slot& s = slots_[next_ % kIbMaxRequests];
    if (s.busy) return false;
    s = Slot{true, next_, uint32_t(nqps_), 0};
    *seq = next_++;
    return true;
  }
  // Queue pair `qp`'s next write arrived, carrying `bytes`.
  Status part_arrived(int qp, uint32_t bytes) {
    if (qp < 0 || qp >= nqps_) return BRAID_ERROR(ncclInternalError, "a write on unknown queue pair {}", qp);
    const uint64_t seq = parts_seen_[size_t(qp)]++;
    Slot& s = slots_[seq % kIbMaxRequests];
    if (!s.busy || s.seq != seq || s.parts_left == 0)
      return BRAID_ERROR(ncclInternalError, "a write for message {} on queue pair {}, which no receive awaits", seq,
                         qp);
    --s.parts_left;
    s.bytes += bytes;
    return Status::ok();
  }
  // After a port failover (ib_failover.h): the first receive not complete
  // (every one before it is, since each queue pair delivers in order), from
  // which the sender writes again.  Parts of later receives are forgotten:
  // they come again, whole, into the same buffers.
  uint64_t rewind() {
    uint64_t first = next_;
    for (const Slot& s : slots_)
      if (s.busy && s.parts_left != 0) first = std::min(first, s.seq);
    for (Slot& s : slots_)
      if (s.busy && s.seq >= first) s.parts_left = uint32_t(nqps_), s.bytes = 0;
    std::fill(parts_seen_.begin(), parts_seen_.end(), first);
    return first;
  }
  uint64_t next() const { return next_; }  // the sequence number of the next receive
  // Whether receive `seq` is complete (then *bytes is its length, and its
  // place is free again).
  bool finish(uint64_t seq, uint64_t* bytes) {
    Slot& s = slots_[seq % kIbMaxRequests];
    if (!s.busy || s.seq != seq || s.parts_left != 0) return false;
    *bytes = s.bytes;
    s.busy = false;
    return true;
  }

 private:
  struct Slot {
    bool busy = false;
    uint64_t seq = 0;
    uint32_t parts_left = 0;
    uint64_t bytes = 0;
  };
  int nqps_;
  std::vector<Slot> slots_;
  std::vector<uint64_t> parts_seen_;  // per queue pair
  uint64_t next_ = 0;
};

}  // namespace braid

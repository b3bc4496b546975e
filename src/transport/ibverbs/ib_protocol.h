// The credit protocol of braid's InfiniBand connections, without verbs.
//
// A connection is one-way, over Q reliable-connected queue pairs.  The
// receiver gives credit: each receive it posts sends the sender a clear-to-
// send message (a SEND on queue pair 0) saying where the data may go
// {address, rkey, size, sequence number}.  The sender's n-th message takes
// the n-th credit and is written there with RDMA WRITE WITH IMMEDIATE, each
// write's immediate its length, spread over the queue pairs one of two ways
// (IbSpread; the sender chooses, and says which in its hello):
//  - split (braid's default): Q parts, part j on queue pair j.  Every
//    message has all Q parts (empty ones too), so the receiver needs no
//    header: queue pair j's k-th incoming write is part j of message k,
//    because one queue pair delivers in order;
//  - round robin (NCCL_IB_SPLIT_DATA_ON_QPS=0, NCCL 2.20+'s default):
//    message k whole on queue pair k mod Q, so queue pair j's writes are
//    messages j, j + Q, j + 2Q, ... in order.
// Message k is complete when its parts are, its length the sum of theirs.
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

// How messages are spread over a connection's queue pairs (above).
struct IbSpread {
  int nqps = 1;
  bool round_robin = false;
  int parts() const { return round_robin ? 1 : nqps; }
  // Part j (below parts()) of message `seq` of `bytes`: its queue pair and bytes.
  int qp(uint64_t seq, int j) const { return round_robin ? int(seq % uint64_t(nqps)) : j; }
  IbPart part(uint64_t bytes, int j) const { return round_robin ? IbPart{0, bytes} : ib_part(bytes, nqps, j); }
  // The first message at or after `from` with a part on queue pair q, and
  // how far apart that queue pair's messages are.
  uint64_t first_on(int q, uint64_t from) const {
    return round_robin ? from + (uint64_t(q) + uint64_t(nqps) - from % uint64_t(nqps)) % uint64_t(nqps) : from;
  }
  uint64_t stride() const { return round_robin ? uint64_t(nqps) : 1; }
};

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
  // The oldest credit, for the next message of `bytes`.  A message larger
  // than its receive is the caller's error (the ranks disagree on a size);
  // the credit stays, so the connection stays in step.
  Status take(uint64_t bytes, IbCredit* out) {
    const IbCredit& next = credits_.front();
    if (bytes > next.size)
      return BRAID_ERROR(ncclInvalidUsage, "a message of {} bytes for a receive of {} (sequence {}): the sender and "
                         "the receiver disagree on the size", bytes, next.size, next.seq);
    *out = next;
    credits_.pop_front();
    return Status::ok();
  }

 private:
  std::deque<IbCredit> credits_;
  uint64_t next_in_ = 0;
};

// The receiver's outstanding receives and the parts that arrive for them.
class IbReceives {
 public:
  explicit IbReceives(IbSpread spread) : spread_(spread), slots_(kIbMaxRequests), next_on_(size_t(spread.nqps)) {
    aim_from(0);
  }
  // Starts the next receive; false when kIbMaxRequests are outstanding.
  bool start(uint64_t* seq) {
    Slot& s = slots_[next_ % kIbMaxRequests];
    if (s.busy) return false;
    s = Slot{true, next_, uint32_t(spread_.parts()), 0};
    *seq = next_++;
    return true;
  }
  // Queue pair `qp`'s next write arrived, carrying `bytes`.
  Status part_arrived(int qp, uint32_t bytes) {
    if (qp < 0 || qp >= spread_.nqps) return BRAID_ERROR(ncclInternalError, "a write on unknown queue pair {}", qp);
    const uint64_t seq = next_on_[size_t(qp)];
    next_on_[size_t(qp)] += spread_.stride();
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
      if (s.busy && s.seq >= first) s.parts_left = uint32_t(spread_.parts()), s.bytes = 0;
    aim_from(first);
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
  // Each queue pair's next write is for the first message from `first` on that it carries.
  void aim_from(uint64_t first) {
    for (int q = 0; q < spread_.nqps; ++q) next_on_[size_t(q)] = spread_.first_on(q, first);
  }
  IbSpread spread_;
  std::vector<Slot> slots_;
  std::vector<uint64_t> next_on_;  // per queue pair: the message its next write is for
  uint64_t next_ = 0;
};

}  // namespace braid

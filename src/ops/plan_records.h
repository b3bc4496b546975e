// One rank's part of a Schedule as plain, fixed-size records: what both
// executors interpret (MSCCL++'s execution plan idea).  The CUDA backend
// copies them to device memory once per schedule; the host backend reads
// them where they are.  Built once per (schedule, rank) and kept in the
// communicator's plan cache (src/plan/planner.h).
//
// Connections are the rank's sending and receiving ops in op order: entry
// `send_conn` / `recv_conn` of `connections`.  Each executor resolves them
// to its own channels (a host pipe, a device FIFO), once per slice: a call
// may run as several slices, each a disjoint part of every buffer block on
// its own channels (op_step.h, slice_of).
#pragma once

#include <cstdint>
#include <vector>

#include "braid/schedule.h"

namespace braid {

struct OpRecord {
  uint8_t type = 0;  // OpType
  uint8_t src_buffer = 0, dst_buffer = 0;  // BufferKind
  uint8_t pad = 0;
  uint32_t src_index = 0, dst_index = 0;
  uint32_t count = 1;
  int32_t send_conn = -1, recv_conn = -1;  // into the rank's connections (per slice)
  int32_t peer = -1;  // one-sided ops: the rank whose buffers they touch; Signal, Wait: the peer
  uint32_t dep_begin = 0, dep_count = 0;   // into the rank's deps
};

struct DepRecord {
  uint32_t lane = 0;
  uint32_t op = 0;
};

struct LaneRecord {
  uint32_t op_begin = 0, op_count = 0;
  uint32_t channel = 0;  // the lane's channel in the schedule
};

struct ConnectionRecord {
  int32_t peer = -1;
  uint32_t channel = 0;  // the schedule's
  bool send = false;
};

struct RankRecords {
  std::vector<LaneRecord> lanes;
  std::vector<OpRecord> ops;
  std::vector<DepRecord> deps;
  std::vector<ConnectionRecord> connections;
  uint32_t channels = 1;  // channels the schedule uses on any rank: slice s of a lane on
                          // channel c runs on channel s * channels + c
  uint32_t max_frame = 1;  // the most chunks one message carries on any rank (op_step.h, frames)
  int slots = kMinSlots;   // messages each connection must buffer (Schedule::slots)
  // Whether any message carries chunks.  Without (one-sided schedules, whose
  // messages are signals), a call needs no fragments: one tile.
  bool chunk_messages = false;
  bool one_sided = false;  // some rank has one-sided ops: only an executor with peer access runs it
  bool signals = false;    // some rank has Signals and Waits (their messages carry PeerBuffers)
};

RankRecords build_rank_records(const Schedule& schedule, int rank);

}  // namespace braid

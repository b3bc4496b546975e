#include "src/ops/plan_records.h"

#include <algorithm>

namespace braid {

RankRecords build_rank_records(const Schedule& schedule, int rank) {
  RankRecords r;
  r.slots = schedule.slots;
  r.chunk_messages = has_chunk_messages(schedule);
  r.one_sided = has_one_sided_ops(schedule);
  for (const RankProgram& p : schedule.ranks)
    for (const Lane& lane : p.lanes) {
      r.channels = std::max<uint32_t>(r.channels, lane.channel + 1u);
      for (const Op& op : lane.ops) {
        r.signals |= op.type == OpType::Signal || op.type == OpType::Wait;
        if (op_sends(op.type) || op_receives(op.type)) r.max_frame = std::max(r.max_frame, message_chunks(op));
      }
    }
  for (const Lane& lane : schedule.ranks.at(rank).lanes) {
    r.lanes.push_back({uint32_t(r.ops.size()), uint32_t(lane.ops.size()), lane.channel});
    for (const Op& op : lane.ops) {
      OpRecord d;
      d.type = uint8_t(op.type);
      d.src_buffer = uint8_t(op.src.buffer);
      d.dst_buffer = uint8_t(op.dst.buffer);
      d.src_index = op.src.index;
      d.dst_index = op.dst.index;
      d.count = op.count;
      if (op_one_sided(op.type) || message_chunks(op) == 0)  // signals too: a Wait keeps its peer's buffers
        d.peer = op_uses_send_peer(op.type) ? op.send_peer : op.recv_peer;
      if (op_sends(op.type)) {
        d.send_conn = int32_t(r.connections.size());
        r.connections.push_back({op.send_peer, lane.channel, true});
      }
      if (op_receives(op.type)) {
        d.recv_conn = int32_t(r.connections.size());
        r.connections.push_back({op.recv_peer, lane.channel, false});
      }
      d.dep_begin = uint32_t(r.deps.size());
      d.dep_count = uint32_t(op.deps.size());
      for (const Dep& dep : op.deps) r.deps.push_back({dep.lane, dep.op});
      r.ops.push_back(d);
    }
  }
  return r;
}

}  // namespace braid

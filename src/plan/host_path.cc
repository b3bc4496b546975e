#include "src/plan/host_path.h"

#include <algorithm>

#include "braid/chunking.h"
#include "src/base/byte_ranges.h"
#include "src/ops/datatype.h"
#include "src/plan/alg_selection.h"
#include "src/plan/host_tuning.h"

namespace braid {

bool oneshot_serves(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::AllGather ||
         c == Collective::AlltoAll;
}

bool eager_serves(Collective c) {
  return c == Collective::Broadcast || c == Collective::Reduce || c == Collective::Gather ||
         c == Collective::Scatter;
}

bool single_copy_serves(Collective c) { return c != Collective::Gather && c != Collective::Scatter && c != Collective::Custom; }

bool pull_in_auto(Collective c) {
  return c == Collective::AllGather || c == Collective::AlltoAll || c == Collective::Broadcast;
}

bool pull_in_auto_oversubscribed(Collective c) { return c == Collective::AllGather || c == Collective::AlltoAll; }

bool pull_serves(Collective c) { return single_copy_serves(c); }

uint32_t collectives_where(bool (*serves)(Collective)) {
  uint32_t bits = 0;
  for (int i = 0; i < int(Collective::Custom); ++i)
    if (serves(Collective(i))) bits |= 1u << i;
  return bits;
}

BoardLimits board_limits(uint64_t agreed, bool oversubscribed, int nranks) {
  if (agreed != kBoardAutoInAgreement) return {agreed, agreed};
  if (!oversubscribed) {
    const uint64_t limit = nranks == 2 ? kBoardAutoTwoRanksBytes : kBoardAutoBytes;
    return {limit, limit};
  }
  return {kBoardOversubscribedBytes, uint64_t(kBoardLimitBytes)};
}

uint64_t board_payload_bytes(Collective c, size_t count, ncclDataType_t type, int nranks) {
  if (count > uint64_t(kBoardLimitBytes)) return UINT64_MAX;  // and the product cannot wrap
  return uint64_t(count) * datatype_size(type) * input_blocks(c, nranks);
}

namespace {

// The bytes of a call's input and output on one rank (0 where NCCL lets it
// pass none), and of its larger buffer on any rank.
struct CallBytes {
  uint64_t block = 0, input = 0, output = 0, larger = 0;
};
CallBytes call_bytes(const CollectiveCall& c, int rank, int nranks) {
  CallBytes b;
  b.block = c.count * datatype_size(c.type);
  const uint64_t in = input_blocks(c.collective, nranks), out = output_blocks(c.collective, nranks);
  b.input = has_input(c, rank) ? b.block * in : 0;
  b.output = has_output(c, rank) ? b.block * out : 0;
  b.larger = b.block * std::max(in, out);
  return b;
}

}  // namespace

HostPaths::HostPaths(const HostPathSettings& settings) : s_(settings), pull_collectives_(settings.pull_collectives) {
  if (s_.pull_collectives && s_.rank == 0 && !s_.pull_always)
    copy_paths_ = std::make_unique<CopyPathChooser>(
        s_.oversubscribed ? kOversubscribedCopyPathWindow : CopyPathChooser::kDefaultWindow, CopyPath::Pull);
  if (s_.slot_stores == SlotStoresMode::Auto) slot_stores_ = std::make_unique<SlotStoreChooser>();
}

HostPaths::~HostPaths() = default;

HostPaths::Board HostPaths::board_for(const CollectiveCall& c) const {
  const bool broadcast_gather = c.collective == Collective::Broadcast || c.collective == Collective::Gather;
  const uint64_t limit = broadcast_gather ? s_.board_max_bytes.broadcast_gather : s_.board_max_bytes.most;
  if (!(s_.board_collectives >> int(c.collective) & 1) || c.reduction.premul || !admits_fast_paths(c.algorithms) ||
      board_payload_bytes(c.collective, c.count, c.type, s_.nranks) > limit)
    return Board::None;
  return eager_serves(c.collective) ? Board::Eager : Board::OneShot;
}

bool HostPaths::pull_admits(Collective c, uint64_t bytes) const {
  return (pull_collectives_ >> int(c) & 1) && bytes >= s_.pull_min_bytes;
}

bool HostPaths::exchanges_descriptors(Collective c, uint64_t bytes) {
  if (s_.pinned_collectives >> int(c) & 1) return false;
  if (pull_admits(c, bytes)) {
    if (mapped_window_) return true;
    const int k = size_class(bytes);
    uint32_t& left = leases_.remaining[int(c)][k];
    if (left == 0) return true;
    --left;  // leased to the slots: no exchange
    if (copy_paths_ && leases_.chosen[int(c)][k]) copy_paths_->leased_call(c, bytes);
    return false;
  }
  const bool reachable = mapped_window_ || s_.one_process;
  return reachable && bytes >= s_.direct_min_bytes && s_.nranks > 1 && single_copy_serves(c);
}

TaskStores HostPaths::stores_for(const CollectiveCall& c) {
  const CallBytes b = call_bytes(c, s_.rank, s_.nranks);
  const bool in_place = ranges_overlap(c.sendbuff, b.input, c.recvbuff, b.output);
  TaskStores t;
  t.stream_output = b.output > 0 && should_stream_output(s_.cache_share, c.collective, s_.nranks, b.block, in_place);
  // Only calls that stream their output, and large ones, choose how they
  // store into the slots (src/plan/slot_stores.h).
  if (!t.stream_output || b.output < kSlotStoresMinOutputBytes) return t;
  if (s_.slot_stores == SlotStoresMode::Streamed) t.slots = SlotStores::Streamed;
  if (slot_stores_) {
    t.slots = slot_stores_->choose(c.collective, b.output).option;
    t.timed = true;
  }
  return t;
}

// The smallest chunk (bytes) any rank cuts call `c` on `schedule` into:
// every rank must cut fragments and slices alike.  UINT64_MAX: no chunks.
uint64_t HostPaths::least_chunk_bytes(const CollectiveCall& c, const Schedule& schedule) const {
  uint64_t least = UINT64_MAX;
  for (const RankProgram& p : schedule.ranks)
    for (const BufferShape& shape : {input_shape(c.collective, s_.nranks, c.count, p.input_chunks),
                                     output_shape(c.collective, s_.nranks, c.count, p.output_chunks)})
      if (shape.chunks > 0) least = std::min(least, shape.chunk_capacity() * datatype_size(c.type));
  return least;
}

// Only a call larger than kWideTileMinTiles wide fragments can have chunks
// that large: smaller ones never look at the ranks' chunking.
bool HostPaths::may_be_wide(const CollectiveCall& c) const {
  return call_bytes(c, s_.rank, s_.nranks).larger >= kWideTileMinTiles * s_.wide_tile_bytes;
}

uint64_t HostPaths::tile_bytes_for(const CollectiveCall& c, const Schedule& schedule) const {
  if (!may_be_wide(c)) return s_.tile_bytes;
  return call_tile_bytes(s_.tile_bytes, s_.wide_tile_bytes, least_chunk_bytes(c, schedule));
}

uint32_t HostPaths::slices_for(const CollectiveCall& c, const Schedule& schedule) const {
  if (s_.remote_slices <= 1) return 1;
  const uint64_t least = least_chunk_bytes(c, schedule);
  if (least == UINT64_MAX) return 1;
  const uint64_t tile = may_be_wide(c) ? call_tile_bytes(s_.tile_bytes, s_.wide_tile_bytes, least) : s_.tile_bytes;
  return uint32_t(std::clamp<uint64_t>(least / tile, 1, s_.remote_slices));
}

uint32_t HostPaths::p2p_slices(int peer, uint64_t bytes) const {
  if (s_.remote_slices <= 1 || peer < 0 || size_t(peer) >= s_.sliced_peers.size() || !s_.sliced_peers[peer]) return 1;
  return uint32_t(std::clamp<uint64_t>(bytes / s_.tile_bytes, 1, s_.remote_slices));
}

CopyChoice HostPaths::choose_copy_path(Collective c, uint64_t bytes, bool in_place) {
  if (never_pulls(c, in_place)) return CopyChoice{CopyPath::Slots, kInPlaceAlltoAllLease};
  if (s_.pull_always) return CopyChoice{CopyPath::Pull, 0};
  return copy_paths_ ? copy_paths_->choose(c, bytes) : CopyChoice{};
}

void HostPaths::record_copy_path(Collective c, uint64_t bytes, CopyPath path, double us) {
  if (copy_paths_) copy_paths_->record(c, bytes, path, us);
}

void HostPaths::lease_slots(Collective c, uint64_t bytes, bool in_place, uint32_t lease) {
  if (mapped_window_) return;
  const int k = size_class(bytes);
  leases_.remaining[int(c)][k] = lease;
  leases_.chosen[int(c)][k] = !never_pulls(c, in_place);
}

void HostPaths::record_slot_stores(Collective c, uint64_t output_bytes, SlotStores stores, double us) {
  if (slot_stores_) slot_stores_->record(c, output_bytes, stores, us);
}

}  // namespace braid

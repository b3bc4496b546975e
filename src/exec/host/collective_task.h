// A Task that runs one rank's part of a Schedule (see collective_task.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "braid/chunking.h"
#include "braid/schedule.h"
#include "nccl.h"
#include "src/exec/host/peer_reach.h"
#include "src/exec/host/task.h"
#include "src/ops/plan_records.h"
#include "src/transport/transport.h"

namespace braid {

struct CollectiveArgs {
  std::shared_ptr<const Schedule> schedule;
  std::shared_ptr<const RankRecords> records;  // this rank's part of it (the plan cache's)
  int rank = 0;
  const void* input = nullptr;  // nullptr where this rank has no such buffer
  void* output = nullptr;
  void* scratch = nullptr;      // scratch_elems() elements
  BufferShape input_shape, output_shape;
  uint64_t scratch_capacity = 0;  // elements per scratch chunk
  // Independent parts of every buffer block, each on its own channels
  // (src/ops/op_step.h): the CUDA kernel's slices, run the same way here;
  // scratch holds slices x scratch_chunks x scratch_capacity elements.
  uint32_t slices = 1;
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;       // Sum, Prod, Max or Min
  int divide_output_by = 0;       // Avg: divide the output by this when done (0: no)
  uint64_t tile_bytes = 0;         // this call's fragment size (src/plan/host_tuning.h, call_tile_bytes)
  uint64_t narrow_tile_bytes = 0;  // the communicator's; wider fragments cycle through proportionally fewer slots
  uint64_t frame_bytes = 0;        // a slot's capacity, agreed by every rank (0: this transport's): framed messages fit it
  bool stream_output = false;      // write the user output with streaming stores (src/plan/output_stores.h)
  bool stream_send_slots = false;  // write sent fragments with streaming stores (src/plan/slot_stores.h)
  int channel_base = 0;
  Transport* transport = nullptr;
  // Peers' shareable memory this rank has mapped, kept across calls
  // (one-sided schedules between processes; null: CMA for all of it).
  PeerMemory* peer_memory = nullptr;
  // For messages ("allreduce(ring) count=... float rank 1/4"), formatted
  // only when one is needed: formatting on every call cost ~3k instructions.
  std::string label;              // if set, used as is
  Collective collective = Collective::Custom;
  uint64_t count = 0;
  int nranks = 0;
};

// Scratch elements a schedule needs for a call run in `slices` slices.
inline uint64_t scratch_elems(const Schedule& s, int rank, uint64_t capacity, uint32_t slices = 1) {
  return uint64_t(slices) * s.ranks[rank].scratch_chunks * capacity;
}

Status make_collective_task(CollectiveArgs args, std::unique_ptr<Task>* out);

// Calls of this process whose executor wrote its send slots, or its user
// output, with streaming stores, or sent wide fragments (tests;
// BRAID_DEBUG=INFO names all three on each call).
std::atomic<uint64_t>& streamed_slot_calls();
std::atomic<uint64_t>& streamed_output_calls();
std::atomic<uint64_t>& wide_fragment_calls();
// Calls of this process that ran a one-sided schedule, and their ops that
// reached another process's buffer through CMA rather than a mapping (tests).
std::atomic<uint64_t>& one_sided_calls();
std::atomic<uint64_t>& one_sided_cma_ops();

}  // namespace braid

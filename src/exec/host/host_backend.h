// The host backend: a communicator whose buffers are host memory, run by
// the host executor on the calling thread.  A call completes before it
// returns (a group at ncclGroupEnd); the stream is accepted and not used.
//
// Which way a call goes (a board, the descriptor exchange of the single-copy
// pull paths, or the schedule on the transport's slots) is HostPaths'
// answer (src/plan/host_path.h); this file only carries it out: it plans
// schedules, builds the tasks (src/exec/host/task.h) and runs every
// communicator's tasks of a group in one cooperative loop.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/exec/backend.h"
#include "src/exec/host/board.h"
#include "src/exec/host/single_copy.h"
#include "src/exec/host/host_windows.h"
#include "src/exec/host/peer_reach.h"
#include "src/plan/host_path.h"

namespace braid {

class EagerBoard;
class RmaEngine;
class OneShotBoard;
class Task;

// Calls this backend ran on its boards, for tests and BRAID_DEBUG.
struct BoardCounts {
  uint64_t oneshot = 0;
  uint64_t eager = 0;
  int eager_depth = 0;           // headers per rank of the eager board (0: not open yet)
  size_t eager_ring_bytes = 0;  // data bytes per rank of the eager board
};

class HostBackend final : public Backend {
 public:
  HostBackend(const BackendContext& ctx, const HostPathSettings& settings);
  ~HostBackend() override;

  const char* name() const override { return "host"; }
  GroupRunner group_runner() const override;
  int connection_slots() const override { return ctx_.transport->slots(); }
  bool runs_one_sided() const override { return paths_.settings().peer_access; }
  bool runs_alone(const CollectiveCall& call) const override;
  Status run_alone(const CollectiveCall& call, bool* ran) override;
  Status window_registered(const WindowInfo& window) override;
  void window_deregistered(uint64_t seq) override;
  Status window_peer_pointer(uint64_t seq, int peer, uint64_t offset, void** out) override;
  MemoryHeld memory_held() const override;

  bool has_rma() const override { return true; }
  Status rma_start() override;
  bool rma_started() const override { return rma_ != nullptr; }
  Status rma_write(const RmaCall& call) override;
  Status rma_wait(const RmaCall& call) override;
  uint64_t rma_signals_pending() const override;

  BoardCounts board_counts() const;
  const BackendContext& context() const { return ctx_; }
  HostPaths& paths() { return paths_; }

 private:
  friend class HostGroup;
  static BoardCall board_call(const CollectiveCall& c);
  // The board `which` (made on first use) and the next call's number on it.
  Board* board(HostPaths::Board which, uint64_t* call);
  std::string describe_on_board(const CollectiveCall& c, HostPaths::Board which) const;
  Status run_on_board(const CollectiveCall& call, HostPaths::Board which);

  BackendContext ctx_;
  HostPaths paths_;
  HostWindows windows_;
  std::shared_ptr<SingleCopyGuard> guard_;  // ranks that are threads of one process
  SingleCopyContext single_copy_;
  SharedBuffer scratch_;      // for schedules with scratch chunks; peers of other processes map it
  PeerMemory peer_memory_;    // theirs, as this rank mapped them (one-sided schedules)
  // The last group's tasks, kept so that a repeated call rebinds them
  // instead of allocating: its schedule task, and the single-copy task around one.
  std::unique_ptr<Task> spare_task_, spare_single_copy_task_;
  std::unique_ptr<OneShotBoard> oneshot_;  // each board is made, and opens, on its first call
  std::unique_ptr<EagerBoard> eager_;
  std::unique_ptr<RmaEngine> rma_;  // one-sided RMA: from the first window (or init, rma_eager)
  uint64_t oneshot_calls_ = 0, eager_calls_ = 0;
};

// Runs the host backends' part of a group (their GroupRunner): every
// communicator's collectives in order, then its send/recv batch, all
// communicators concurrently, to completion.
Status run_host_group(std::span<CommWork> work);

}  // namespace braid

#include "src/exec/host/board.h"

#include "src/base/deadline.h"
#include "src/base/env.h"
#include "src/plan/host_path.h"
#include "src/transport/peer_processes.h"

namespace braid {

Status BoardWaiter::check(int awaited, Clock* clock) const {
  auto now = std::chrono::steady_clock::now();
  if (clock->timeout_ms < 0) {  // read only once a wait is long: a quick call pays no getenv
    clock->timeout_ms = env_int("BRAID_TIMEOUT") * 1000;
    clock->started = clock->last_liveness = now;
  }
  if (now - clock->last_liveness > std::chrono::milliseconds(50)) {
    clock->last_liveness = now;
    BRAID_TRY(awaited_alive(*map, awaited, what));
  }
  if (std::chrono::duration_cast<std::chrono::milliseconds>(now - clock->started).count() >= clock->timeout_ms)
    return BRAID_ERROR(ncclRemoteError, "no progress for {} ms (BRAID_TIMEOUT) in {}: still waiting for rank {}",
                       clock->timeout_ms, what, awaited);
  return Status::ok();
}

Status Board::finish_open(const std::atomic<bool>* stop) {
  const Deadline deadline = Deadline::after(map_.setup().timeout);
  Waiter waiter;
  uint32_t polls = 0;
  for (int awaited = 0;;) {
    BRAID_TRY(advance_open(&awaited));
    if (awaited < 0) return Status::ok();
    if (stop && stop->load(std::memory_order_relaxed))
      return BRAID_ERROR(ncclInvalidUsage, "communicator aborted while opening the board of {}", what());
    if (deadline.expired())
      return BRAID_ERROR(ncclRemoteError, "no progress for {} ms (BRAID_TIMEOUT) opening the board of {}: still "
                         "waiting for rank {}", map_.setup().timeout.count(), what(), awaited);
    if (++polls % kLivenessCheckEvery == 0) BRAID_TRY(check_alive(awaited));  // a syscall: not every poll
    waiter.pause();
  }
}

Status board_admits(const BoardCall& c, int nranks, size_t max_bytes, bool (*serves)(Collective), const char* board) {
  const uint64_t payload = board_payload_bytes(c.collective, c.count, c.type, nranks);
  if (payload > max_bytes)
    return BRAID_ERROR(ncclInternalError, "{} {} of {} bytes on a {}-byte board", board, to_string(c.collective),
                       payload, max_bytes);
  if (!serves(c.collective)) return BRAID_ERROR(ncclInternalError, "{} has no {}", board, to_string(c.collective));
  return Status::ok();
}

Status awaited_alive(const BoardMap& map, int rank, const char* what) {
  if (map.dead_rank({rank}) != rank) return Status::ok();
  return BRAID_ERROR(ncclRemoteError, "rank {} (pid {}) exited during {}", rank, map.setup().processes->pid(rank),
                     what);
}

}  // namespace braid

#include "src/exec/host/board.h"

#include "src/base/env.h"
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
    int dead = map->dead_rank({awaited});
    if (dead >= 0)
      return BRAID_ERROR(ncclRemoteError, "rank {} (pid {}) exited during {}", dead, map->setup().processes->pid(dead),
                         what);
  }
  if (std::chrono::duration_cast<std::chrono::milliseconds>(now - clock->started).count() >= clock->timeout_ms)
    return BRAID_ERROR(ncclRemoteError, "no progress for {} ms (BRAID_TIMEOUT) in {}: still waiting for rank {}",
                       clock->timeout_ms, what, awaited);
  return Status::ok();
}

}  // namespace braid

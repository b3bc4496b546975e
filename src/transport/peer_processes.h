// The processes of this host's other ranks, held as pidfds, for asking
// whether a peer has exited.
//
// At init each rank opens a pidfd of every peer process of its host in its
// own pid namespace (one per process, shared by all communicators), and
// where ranks of one host are in several namespaces, each passes a pidfd of
// its own process to the others (exchange_fds: only there, since it costs
// two more allgathers).  A pidfd answers for the process itself, where a
// pid does not:
//  - across pid namespaces (containers sharing the host name and /dev/shm
//    but not their pids), where the peer's pid names another process here,
//    or none;
//  - for a zombie (exited, not yet reaped by its parent), which
//    kill(pid, 0) still finds;
//  - after the pid is reused.
// Where no pidfd arrived (a kernel before 5.3, a failed exchange), the pid
// is asked where it means the same here (watchable_pid); a rank neither can
// reach is not watched, and its death is noticed at BRAID_TIMEOUT.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/base/process_watch.h"
#include "src/base/status.h"
#include "src/transport/fd_passing.h"
#include "src/transport/transport.h"

namespace braid {

class Bootstrap;

class PeerProcesses {
 public:
  // Collective over the communicator where ranks of one host are in
  // different pid namespaces (exchange_fds), local otherwise.  Never fails
  // for a peer it cannot reach: that rank falls back to its pid, or to
  // nothing.
  static Status create(const TransportContext& ctx, Bootstrap& bootstrap, std::shared_ptr<const PeerProcesses>* out);
  // What this process finds alone: pidfds of the peer processes of its pid
  // namespace, no exchange (also for transports made without create).
  static std::shared_ptr<const PeerProcesses> local(const TransportContext& ctx);
  // ctx.processes, or local(ctx) where the context has none.
  static std::shared_ptr<const PeerProcesses> of(const TransportContext& ctx) {
    return ctx.processes ? ctx.processes : local(ctx);
  }

  // Whether rank r's process has exited.  False for ranks of this process,
  // of other hosts, and for those that cannot be watched.  One syscall.
  bool exited(int rank) const;
  // The pid rank r reported (for messages; names its process only in its
  // own pid namespace).
  int32_t pid(int rank) const { return reported_[size_t(rank)]; }
  // Every other-process rank of this host that can be watched, for a
  // ProcessWatch (its pidfds are this object's, borrowed).
  std::vector<WatchedProcess> watchable() const;

 private:
  PeerProcesses() = default;
  std::vector<int32_t> reported_;                        // every rank's pid as it said
  std::vector<int32_t> pids_;                            // watchable_pid: 0 where a pid cannot be asked
  std::vector<std::shared_ptr<const UniqueFd>> pidfds_;  // null where none was had (shared: shared_pidfd)
};

}  // namespace braid

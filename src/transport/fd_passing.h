// File descriptors passed between processes of one host: SCM_RIGHTS over
// abstract UNIX sockets.
//
// What a peer process needs to map shareable memory (a memfd on the host
// backend; a cuMem allocation's POSIX fd on a GPU) is the descriptor
// itself, and only the kernel can hand one to another process: a message on
// a UNIX socket with SCM_RIGHTS installs a duplicate in the receiver.
// (Opening /proc/<pid>/fd/<n> works too, but only where the reader may
// ptrace-read the owner: same user, same PID namespace, no hidepid.)
//
// exchange_fds is collective over a communicator's ranks:
//  1. every rank listens on a fresh abstract socket name (random: no two
//     communicators or processes collide, and nothing is left in the file
//     system), and the names are allgathered;
//  2. every rank sends its descriptors to each rank of its host in another
//     process, one SEQPACKET connection per message.  The sends complete
//     without the receiver's accept (the listen backlog and the socket
//     buffer hold them), so no order of ranks can deadlock;
//  3. the ranks allgather which sends succeeded, so that each knows exactly
//     how many messages to wait for, and receive them, within a deadline.
// Ranks that are threads of one process skip all of it: they share their
// descriptors already.  A peer whose message could not be passed gets no
// descriptors; the caller decides what that means (for windows: not direct).
#pragma once

#include <span>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/transport/transport.h"

namespace braid {

class Bootstrap;

// A descriptor this object owns and closes.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// The most descriptors one rank may pass in one exchange.
constexpr size_t kMaxPassedFds = 64;

// Collective: every rank passes `mine` (up to kMaxPassedFds descriptors,
// possibly none).  (*theirs)[r] receives rank r's, for each rank r of this
// host in another process whose message arrived; it stays empty for the
// rest.  Fails only where this rank cannot take part (or the bootstrap
// fails); a peer it cannot reach just leaves its entry empty.
Status exchange_fds(const TransportContext& comm, Bootstrap& bootstrap, std::span<const int> mine,
                    std::vector<std::vector<UniqueFd>>* theirs, Deadline deadline);

}  // namespace braid

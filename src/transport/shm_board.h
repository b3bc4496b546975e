// A small shared-memory segment that every rank of a communicator on one
// host maps, for protocols that need no transport connection: the
// StragglAR arrival board and the one-shot small AllReduce.
//
// Setup: rank 0 creates the segment (O_EXCL), sizes it, lets the caller
// initialise it and marks it ready; the others wait (bounded by the timeout,
// an abort, or rank 0 dying) until it has its full size and is ready.  The
// last rank to attach unlinks the name; the mappings stay valid.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/transport/shm_segment.h"
#include "src/transport/transport.h"

namespace braid {

// Makes every page of a fresh shared mapping present now rather than at
// its first use inside a collective: the creator writes the bytes (zeros, as
// they already read), a process that attached reads one byte per page.
// Measured on a 2-core VM: without it each first-used page cost far more
// than the call that touched it, with no page fault counted (a job's early
// 64 KB AllReduces took many times their steady time); MAP_POPULATE alone
// took off only part of that.
void make_pages_present(void* p, size_t bytes, bool creator);

// The first bytes of every board.
struct BoardHeader {
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> attached;
};

struct BoardSetup {
  std::string name;           // shm name, the same on every rank of the communicator
  std::string what;           // for messages ("BRAID_STRAGGLER=eager")
  int rank = 0, nranks = 0;
  std::shared_ptr<const PeerProcesses> processes;  // the ranks' processes, to notice one that died (null: none)
  std::chrono::milliseconds timeout{0};
  const std::atomic<bool>* aborting = nullptr;
};

// The setup of a board of `comm` named `name`: its ranks' processes,
// BRAID_TIMEOUT, and `aborting`.
BoardSetup board_setup(const TransportContext& comm, std::string name, std::string what,
                       const std::atomic<bool>* aborting);

// A mapped board; unmapped (and unlinked, if nobody did) when destroyed.
class BoardMap {
 public:
  BoardMap() = default;
  ~BoardMap();
  BoardMap(const BoardMap&) = delete;
  BoardMap& operator=(const BoardMap&) = delete;
  // Maps `bytes` (a BoardHeader first); `init` runs on rank 0 before ready.
  // Waits for rank 0 to make it, within the setup's timeout.
  Status open(BoardSetup setup, size_t bytes, const std::function<void(void*)>& init);
  // The same without waiting, for work that must not block (a call run by
  // the executor beside others): begin_open once, then try_open until it
  // leaves *waiting_because null (else it says what is awaited: rank 0).
  void begin_open(BoardSetup setup);
  Status try_open(size_t bytes, const std::function<void(void*)>& init, const char** waiting_because);
  bool is_open() const { return open_; }
  void* base() const { return seg_ ? seg_->base() : nullptr; }
  size_t bytes() const { return seg_ ? seg_->bytes() : 0; }  // mapped (ncclCommMemStats)
  const BoardSetup& setup() const { return setup_; }
  // The first of `ranks` whose process is gone, or -1.
  int dead_rank(const std::vector<int>& ranks) const;

 private:
  BoardHeader* header() const;
  char* body() const;

  BoardSetup setup_;
  std::shared_ptr<ShmSegment> seg_;
  ShmSegment::Opened how_{};
  bool open_ = false;
  bool unlinked_ = false;
};

}  // namespace braid

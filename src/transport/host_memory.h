// Host memory that other processes on this host can map: what ncclMemAlloc
// returns on the host backend, so that buffers registered in a window can be
// read and written by the peers directly (src/exec/host/single_copy.h).
//
// Each allocation is a memfd mapped MAP_SHARED, with a serial this process
// never reuses.  A peer on the same host maps it through the descriptor:
// passed to it over a UNIX socket where ranks can meet collectively
// (windows: src/transport/fd_passing.h), or opened as /proc/<pid>/fd/<fd>
// where they cannot (a one-sided call's signal: allowed for a process of
// the same user, as ptrace-read access is).  Allocations are looked up by
// any address inside them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "src/base/status.h"

namespace braid {

// The host's page size (sysconf(_SC_PAGESIZE)).
size_t page_size();

// Allocates `bytes` (rounded up to pages) of shareable, zeroed host memory,
// aligned to at least 4096 bytes.
Status host_shared_alloc(size_t bytes, void** out);
// Frees what host_shared_alloc returned; false if `p` is not such a pointer.
bool host_shared_free(void* p);

// How a peer process finds [p, p + bytes): the memfd and offset within it,
// and which allocation that is (its serial is never reused in the process,
// so a peer that cached an opening can tell a new allocation from the one it
// opened, even where the fd number or the address repeats).
struct SharedHandle {
  int32_t pid = 0;
  int32_t fd = -1;      // -1: not in a shareable allocation
  uint64_t offset = 0;  // of p from the allocation's start
  uint64_t serial = 0;  // the allocation's, 1 and up in this process
  uint64_t allocation_bytes = 0;
};
// The handle of a range lying inside one shareable allocation (fd -1 if not).
SharedHandle host_shared_handle(const void* p, size_t bytes);

// A grow-only buffer of shareable host memory, so that peers of other
// processes can map it (a host communicator's scratch).  Growing replaces
// the allocation (a new serial) and does not keep the contents.
class SharedBuffer {
 public:
  SharedBuffer() = default;
  ~SharedBuffer();
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  Status reserve(size_t bytes);
  char* data() const { return static_cast<char*>(data_); }
  size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// A peer's range mapped into this process; unmapped when destroyed.
class PeerMapping {
 public:
  PeerMapping(void* map, size_t map_bytes, char* base) : map_(map), map_bytes_(map_bytes), base_(base) {}
  ~PeerMapping();
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;
  char* base() const { return base_; }  // the peer's p, as seen here

 private:
  void* map_;
  size_t map_bytes_;
  char* base_;
};
// Maps `bytes` at handle h of another process on this host, opening its
// descriptor through /proc/<pid>/fd (src/transport/fd_passing.h says when
// that is allowed).
Status map_peer_range(const SharedHandle& h, size_t bytes, std::unique_ptr<PeerMapping>* out);
// The same, through a descriptor of the allocation this process holds (one
// passed to it: fd_passing.h).
Status map_shared_fd(int fd, const SharedHandle& h, size_t bytes, std::unique_ptr<PeerMapping>* out);

}  // namespace braid

// Named POSIX shared-memory segments, mapped once per process.
//
// Every shared structure of the host backend (pipes, doorbells, boards) is
// a segment that one rank creates under a name and the others attach to.
// Ranks may be processes or threads of one process.  Processes each map the
// segment; threads of one process share a single mapping, found by name.
// Why share: a flag one rank stores and another loads is then one address
// in the process, which is how ThreadSanitizer matches a release with its
// acquire (by address: two mappings of one page look unrelated to it, and
// every handoff through them looked like a race).  It also saves a mapping
// per rank.
//
// Creation is several system calls (shm_open, fallocate, ftruncate); in
// between the object exists with 0 bytes, and mapping it then and touching
// it raises SIGBUS.  So an attacher waits for the full size, and callers
// keep their own "ready" flag inside the segment for the creator's
// initialisation.
//
// Memory: tmpfs allocates a page when it is first touched, and a touch
// that finds /dev/shm full raises SIGBUS (the bare "Bus error" of ranks in
// a container with docker's default 64 MB /dev/shm).  So no page is
// touched before it is allocated by a call that can fail instead: the
// creator allocates the first `reserve` bytes (all, by default), and a
// user of a larger segment allocates the rest as it needs it (populate),
// so that a ring whose fragments are small holds only what they touch.
// Both fail with an error that names /dev/shm's size and the remedies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "src/base/status.h"

namespace braid {

class ShmSegment {
 public:
  enum class Mode {
    Create,          // create the name; an existing one is an error
    Attach,          // map an existing name; never create it
    CreateOrAttach,  // whichever side comes first creates it
  };

  // How an open found the segment.
  enum class Opened {
    Created,  // made it: zero-filled, the caller initialises it
    Mapped,   // mapped what another process made (its pages are not present here yet)
    Shared,   // took the mapping another open in this process made
  };

  // Opens `name` (`bytes` long).  *out stays null while there is nothing to
  // map yet (no such name, or not sized yet): try again later.  The mapping
  // is shared with every other open of the name in this process.  A
  // creator allocates the first `reserve` bytes; nobody may touch the rest
  // before populating it.
  static Status open(const std::string& name, size_t bytes, Mode mode, std::shared_ptr<ShmSegment>* out,
                     Opened* how, size_t reserve = SIZE_MAX);

  // Allocates the pages holding [offset, offset + bytes) if they are not
  // yet, and maps them here for writing.  An error (never SIGBUS) when
  // /dev/shm is full.  Any user may populate any part, at any time.
  Status populate(size_t offset, size_t bytes) const;

  ~ShmSegment();  // unmaps (the last user in this process)
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  // Bytes of it allocated now, by any process: its pages in /dev/shm
  // (mincore; the whole mapping where that cannot be asked).
  size_t resident_bytes() const;

  // Removes the name: later opens see a fresh object (or none).  The
  // mappings stay valid.  Removing a name that is already gone is fine.
  static void unlink(const std::string& name);

 private:
  ShmSegment(std::string name, void* base, size_t bytes) : name_(std::move(name)), base_(base), bytes_(bytes) {}
  std::string name_;
  void* base_;
  size_t bytes_;
};

}  // namespace braid

// The registration cache of peers' memory (src/transport/peer_memory_cache.h):
// each allocation opened once, a freed one dropped when its base comes back
// with a new serial, the least recently used dropped past the capacity,
// failures remembered; and the serials shareable host memory hands out
// (src/transport/host_memory.h), which are what tells allocations apart.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "src/base/host_identity.h"
#include "src/transport/host_memory.h"
#include "src/transport/peer_memory_cache.h"

using braid::PeerAllocationKey;
using braid::Status;

namespace {

// An opening that records which allocation it is and counts closings.
struct Opening {
  Opening(PeerAllocationKey k, int* c) : key(k), closed(c) {}
  ~Opening() { ++*closed; }
  PeerAllocationKey key;
  int* closed;
};

struct Opener {
  int opened = 0, closed = 0;
  bool fail = false;
  Status operator()(const PeerAllocationKey& key, std::unique_ptr<Opening>* out) {
    ++opened;
    if (fail) return BRAID_ERROR(ncclSystemError, "cannot open serial {}", key.serial);
    *out = std::make_unique<Opening>(key, &closed);
    return Status::ok();
  }
};

PeerAllocationKey key(uint64_t pid, uint64_t serial, uint64_t base) { return PeerAllocationKey{pid, 7, serial, base}; }

}  // namespace

TEST_CASE("peer memory cache: an allocation is opened once however often it is named", "[unit][peer_memory]") {
  braid::PeerMemoryCache<Opening> cache(8);
  Opener open;
  const Opening* first = cache.find_or_open(key(100, 1, 0x1000), open);
  REQUIRE(first);
  for (int call = 0; call < 100; ++call) CHECK(cache.find_or_open(key(100, 1, 0x1000), open) == first);
  CHECK(open.opened == 1);
  CHECK(cache.opens() == 1);
  // Another process's allocation with the same serial and base is another allocation.
  const Opening* other = cache.find_or_open(key(101, 1, 0x1000), open);
  CHECK(other != first);
  CHECK(open.opened == 2);
  const Opening* fork = cache.find_or_open(PeerAllocationKey{100, 8, 1, 0x1000}, open);  // same pid, other image
  CHECK(fork != first);
  CHECK(open.opened == 3);
  CHECK(cache.size() == 3);
  CHECK(open.closed == 0);
}

TEST_CASE("peer memory cache: a new serial at a known base drops the freed allocation", "[unit][peer_memory]") {
  braid::PeerMemoryCache<Opening> cache(8);
  Opener open;
  REQUIRE(cache.find_or_open(key(100, 1, 0x1000), open));
  REQUIRE(cache.find_or_open(key(100, 2, 0x9000), open));
  // The peer freed serial 1 and its allocator gave serial 3 the same start.
  const Opening* again = cache.find_or_open(key(100, 3, 0x1000), open);
  REQUIRE(again);
  CHECK(again->key.serial == 3);
  CHECK(open.closed == 1);  // serial 1's opening
  CHECK(cache.size() == 2);
  // Serial 2 is untouched, and another process's allocation at 0x1000 as well.
  REQUIRE(cache.find_or_open(key(200, 5, 0x1000), open));
  CHECK(cache.find_or_open(key(100, 2, 0x9000), open)->key.serial == 2);
  CHECK(open.opened == 4);
  CHECK(open.closed == 1);
}

TEST_CASE("peer memory cache: past its capacity the least recently used opening goes", "[unit][peer_memory]") {
  braid::PeerMemoryCache<Opening> cache(3);
  Opener open;
  for (uint64_t s = 1; s <= 3; ++s) REQUIRE(cache.find_or_open(key(100, s, s << 20), open));
  REQUIRE(cache.find_or_open(key(100, 1, 1 << 20), open));  // 2 is now the oldest use
  REQUIRE(cache.find_or_open(key(100, 4, 4 << 20), open));
  CHECK(cache.size() == 3);
  CHECK(open.closed == 1);
  CHECK(open.opened == 4);
  // 1 and 3 are still held; 2 is opened again.
  cache.find_or_open(key(100, 1, 1 << 20), open);
  cache.find_or_open(key(100, 3, 3 << 20), open);
  CHECK(open.opened == 4);
  cache.find_or_open(key(100, 2, 2 << 20), open);
  CHECK(open.opened == 5);
  CHECK(cache.size() == 3);
}

TEST_CASE("peer memory cache: a failed opening is remembered with its reason", "[unit][peer_memory]") {
  braid::PeerMemoryCache<Opening> cache(4);
  Opener open;
  open.fail = true;
  Status why;
  CHECK(cache.find_or_open(key(100, 1, 0x1000), open, &why) == nullptr);
  CHECK(why.message() == "cannot open serial 1");
  open.fail = false;  // the next call does not try again
  Status again;
  CHECK(cache.find_or_open(key(100, 1, 0x1000), open, &again) == nullptr);
  CHECK(again.message() == "cannot open serial 1");
  CHECK(open.opened == 1);
  // A new allocation at that base is tried afresh.
  CHECK(cache.find_or_open(key(100, 2, 0x1000), open) != nullptr);
  CHECK(open.opened == 2);
}

TEST_CASE("shareable host memory: every allocation has its own serial and a handle names its extent",
          "[unit][peer_memory]") {
  braid::SharedBuffer buffer;
  REQUIRE(buffer.reserve(10000).is_ok());
  const braid::SharedHandle first = braid::host_shared_handle(buffer.data() + 100, 200);
  CHECK(first.fd >= 0);
  CHECK(first.offset == 100);
  CHECK(first.serial > 0);
  CHECK(first.allocation_bytes >= 10000);
  CHECK(first.allocation_bytes % braid::page_size() == 0);
  // A range past the allocation's end is not in shareable memory.
  CHECK(braid::host_shared_handle(buffer.data() + 100, first.allocation_bytes).fd == -1);
  REQUIRE(buffer.reserve(5000).is_ok());  // fits: the same allocation
  CHECK(braid::host_shared_handle(buffer.data(), 1).serial == first.serial);
  REQUIRE(buffer.reserve(first.allocation_bytes * 4).is_ok());
  const braid::SharedHandle grown = braid::host_shared_handle(buffer.data(), 1);
  CHECK(grown.serial > first.serial);
  CHECK(grown.allocation_bytes >= first.allocation_bytes * 4);
  std::vector<char> heap(64);
  CHECK(braid::host_shared_handle(heap.data(), heap.size()).fd == -1);
}

// Handles carry the owner's pid, which is kept to save a system call: a
// forked child must not hand out its parent's.
TEST_CASE("shareable host memory: a forked child's handles carry its own pid", "[unit][peer_memory]") {
  REQUIRE(braid::this_pid() == int(getpid()));
  braid::SharedBuffer buffer;
  REQUIRE(buffer.reserve(4096).is_ok());
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const bool ok =
        braid::this_pid() == int(getpid()) && braid::host_shared_handle(buffer.data(), 1).pid == int32_t(getpid());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(braid::host_shared_handle(buffer.data(), 1).pid == int32_t(getpid()));
}

// Bootstrap: how ranks find each other and exchange small messages at init.
//
// ncclGetUniqueId starts a root listener and writes its address plus a random
// magic into the 128-byte id (NCCL_COMM_ID / BRAID_COMM_ID instead name the
// root address; then rank 0 runs the root).  Each rank opens its own listener,
// connects to the root, proves it knows the magic, and sends its address; the
// root answers every rank with the full address table.  After that ranks talk
// directly (tagged point-to-point messages), and the root goes away.
// Connections with a wrong magic or malformed messages are dropped.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nccl.h"
#include "src/base/deadline.h"
#include "src/base/sock_addr.h"
#include "src/base/status.h"

namespace braid {

// Fills *id with a fresh root address + magic and starts the root listener
// (a background thread that serves one rendezvous and then exits).
// NCCL_COMM_ID / BRAID_COMM_ID, when set, name the root instead.
Status bootstrap_create_root(ncclUniqueId* id);
// Always a fresh root on this host, whatever NCCL_COMM_ID says: for
// communicators derived from another (split, shrink), listening on `on`,
// the parent's bootstrap address (an interface its ranks reach, where the
// default choice might be one they cannot: NCCL reuses its bootstrap
// interface too).
Status bootstrap_create_private_root(const SockAddr& on, ncclUniqueId* id);
// Checks that id looks like one ncclGetUniqueId made (ncclInvalidArgument if not).
Status bootstrap_check_id(const ncclUniqueId& id);
// A fresh private root for growing a communicator of `parent_nranks` ranks
// (ncclCommGetUniqueId); the id says that size, so that a joining rank can
// check the rank it asks for.  Listens on `on`, as a private root.
Status bootstrap_create_grow_root(const SockAddr& on, int parent_nranks, ncclUniqueId* id);
// The size an id from bootstrap_create_grow_root grows from; 0 for other
// ids.  ncclInvalidArgument for an id this library did not make.
Status bootstrap_grow_source(const ncclUniqueId& id, int* parent_nranks);

// Several roots (ncclCommInitRankScalable): ranks are dealt to roots in
// contiguous blocks, the first nranks % nroots roots taking one more, as NCCL
// does.  root_of_rank(first_rank_of_root(k)) == k.
int first_rank_of_root(int root, int nranks, int nroots);
int root_of_rank(int rank, int nranks, int nroots);

// NCCL_UID_STAGGER_THRESHOLD (default 256) and NCCL_UID_STAGGER_RATE
// (default 7000 a second), as NCCL 2.23+: where more ranks than the
// threshold meet at one root, the k-th of them connects k / rate seconds
// late, so that the root takes about `rate` hellos a second instead of all
// at once (a job of thousands of ranks would overrun its listen queue).
// In microseconds; 0 where not staggered.  A value that is not positive is
// the default.
int64_t root_stagger_us(int rank_at_root, int ranks_at_root, std::optional<int64_t> threshold,
                        std::optional<int64_t> rate);

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  // Rendezvous through the root named by `id`.
  // `abort`, if given, makes the rendezvous give up early when it rises.
  static Status connect(const ncclUniqueId& id, int rank, int nranks, Deadline deadline,
                        std::unique_ptr<Bootstrap>* out, const std::atomic<bool>* abort = nullptr);
  // Rendezvous through several roots: each rank meets its block at
  // ids[root_of_rank(rank)]; block 0 and the first rank of every other block
  // then meet at ids[0], where rank 0 assembles the global address table and
  // sends it back down.  One id behaves exactly like connect().
  static Status connect_scalable(const std::vector<ncclUniqueId>& ids, int rank, int nranks, Deadline deadline,
                                 std::unique_ptr<Bootstrap>* out, const std::atomic<bool>* abort = nullptr);

  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // Same on every rank of this communicator, different across communicators.
  virtual uint64_t comm_hash() const = 0;
  // The address this rank's bootstrap listens on, port 0 (the interface
  // chosen toward the root): the socket transport listens there too.
  virtual SockAddr address() const = 0;

  // Tagged point-to-point: messages with the same (peer, tag) arrive in order.
  virtual Status send(int peer, int tag, const void* data, size_t bytes) = 0;
  virtual Status recv(int peer, int tag, void* data, size_t bytes) = 0;
  // data holds nranks * bytes_per_rank; this rank's slice is already filled.
  virtual Status allgather(void* data, size_t bytes_per_rank) = 0;
  virtual Status barrier() = 0;
  // A barrier that also agrees on an outcome: `local` if it failed, else
  // an error naming a rank whose `local` failed (`what` failed there), else
  // ok; the same verdict on every rank.
  Status agree(Status local, const std::string& what);
  // Unblocks any waiting call with an error.
  virtual void abort() = 0;
};

}  // namespace braid

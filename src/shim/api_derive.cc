// Entry points that make communicators from other communicators or from
// several roots: ncclCommSplit, ncclCommShrink, ncclCommGrow (with
// ncclCommGetUniqueId), ncclCommRevoke and ncclCommInitRankScalable.
//
// Split and Shrink use the parent's bootstrap: the members of each new
// communicator agree on its rank order, its first member starts a private
// bootstrap root and sends the id to the others (point-to-point, so excluded
// or dead ranks are never needed), and every member then runs a normal init
// with that id.  A NULL config inherits the parent's (blocking mode included).
//
// Grow (NCCL 2.29) adds ranks to a live communicator.  One existing rank,
// the coordinator, calls ncclCommGetUniqueId: it starts a private bootstrap
// root whose id also says how many ranks the communicator has (so a joining
// rank can check the rank it was given).  It hands the id to the joining
// processes itself (out of band, as with ncclGetUniqueId).  Every existing
// rank then calls ncclCommGrow (the coordinator with the id, the others
// with NULL); one allgather over the parent's bootstrap gives them the id
// and checks that they agree on the new size.  Existing ranks keep their
// numbers, joining ones take theirs from [old size, new size), and all run
// a normal init with the id: the grown communicator is a new one, the
// parent stays usable.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "src/base/env.h"
#include "src/runtime/device_comm.h"
#include "src/runtime/group.h"
#include "src/shim/api.h"

using namespace braid;

namespace {

constexpr int kDeriveTag = 0x5b117;  // bootstrap tag of the id hand-out

// Stops what runs on `comm` for good (ncclCommRevoke, NCCL_SHRINK_ABORT):
// host work watches `stop`, braid's kernels their abort flag, device API
// kernels their devComms' abortFlag.  Its connections end, so that peers
// waiting on this rank fail at once (and shrink too) instead of waiting
// for it until BRAID_TIMEOUT; the bootstrap stays up for Split and Shrink.
void revoke(ncclComm* comm) {
  comm->revoked = true;
  comm->stop = true;
  if (comm->ready.load(std::memory_order_acquire) && comm->backend) comm->backend->revoke();
  if (comm->ready.load(std::memory_order_acquire) && comm->transport) comm->transport->abort();
  if (comm->dev_comms) comm->dev_comms->stop();
}

// Init of a communicator made from `parent`: a NULL config inherits the
// parent's, and with it what the parent knows of its caller's header.
Status init_derived(ncclComm* parent, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config,
                    ncclComm_t* newcomm) {
  ncclConfig_t inherited = parent->config;
  inherited.netName = parent->net_name.empty() ? nullptr : parent->net_name.c_str();
  Status s = init_rank(newcomm, nranks, id, rank, config ? config : &inherited, {}, parent);
  if (*newcomm && !config) (*newcomm)->client_version = parent->client_version;
  return s;
}

// members: parent ranks of the new communicator in new-rank order; this
// rank is members[me].
Status derive(ncclComm* parent, const std::vector<int>& members, int me, const ncclConfig_t* config,
              ncclComm_t* newcomm) {
  // An all-zero id, which no real one is (its magic is odd), tells the
  // members that their first could not start the root: they fail at once
  // instead of waiting for it in an init it will not join.
  const ncclUniqueId no_root{};
  ncclUniqueId id{};
  if (me == 0) {
    Status root = env_int("BRAID_TEST_FAIL_DERIVE_ROOT_RANK") == parent->rank
                      ? BRAID_ERROR(ncclSystemError, "BRAID_TEST_FAIL_DERIVE_ROOT_RANK={}: no root", parent->rank)
                      : bootstrap_create_private_root(parent->bootstrap->address(), &id);
    if (!root.is_ok()) id = no_root;
    for (size_t i = 1; i < members.size(); ++i)
      BRAID_TRY(parent->bootstrap->send(members[i], kDeriveTag, &id, sizeof(id)));
    BRAID_TRY(std::move(root).context("the new communicator's bootstrap root"));
  } else {
    BRAID_TRY(parent->bootstrap->recv(members[0], kDeriveTag, &id, sizeof(id)));
    if (std::memcmp(&id, &no_root, sizeof(id)) == 0)
      return BRAID_ERROR(ncclRemoteError, "rank {}, the new communicator's first, could not start its bootstrap root",
                         members[0]);
  }
  return init_derived(parent, int(members.size()), id, me, config, newcomm);
}

// Split, Shrink and, in a group, an existing rank's Grow run as NCCL's do:
// as a setup call of a group (a group of one outside any), at its end, concurrently
// with its other setups and inits.  So one thread can derive the
// communicators of several ranks in one group (their exchanges must meet),
// and on a non-blocking parent the call returns ncclInProgress at once, its
// exchange and the new communicator's init going on in the background:
// *newcomm is set once the parent's ncclCommGetAsyncError says so.  The
// caller's config is copied as its release wrote it (its `size` bytes): the
// group may end after it is gone.  `now` runs on a parent whose earlier
// work is done.  A non-blocking child's init is waited for here, as NCCL's
// runs within the parent's job: once the parent says ncclSuccess, the child
// does too (or says why its init failed, which is not the group's failure).
Status derive_at_group_end(ncclComm* comm, const ncclConfig_t* config, ncclComm_t* newcomm,
                           std::function<Status(const ncclConfig_t*)> now) {
  // A parent whose init failed says so at the call (NCCL's ncclCommEnsureReady).
  if (!group_active()) BRAID_TRY(wait_initialized(comm));
  std::shared_ptr<std::vector<char>> copy;
  if (config) copy = std::make_shared<std::vector<char>>(reinterpret_cast<const char*>(config),
                                                           reinterpret_cast<const char*>(config) + config->size);
  SetupCall call{comm, [comm, copy, newcomm, now = std::move(now)] {
    if (!comm->ready.load(std::memory_order_acquire)) return check_initialized(comm);
    Status s = now(copy ? reinterpret_cast<const ncclConfig_t*>(copy->data()) : nullptr);
    if (s.code() != ncclInProgress) return s;
    if (*newcomm) (void)comm_wait_job(*newcomm);
    return Status::ok();
  }};
  call.derives = true;
  return enqueue(std::move(call));
}

// The colour exchange and the new communicator's init.
Status split_now(ncclComm* comm, int color, int key, ncclComm_t* newcomm, const ncclConfig_t* config) {
  struct Entry {
    int32_t color, key;
  };
  std::vector<Entry> all(comm->nranks);
  all[comm->rank] = {color, key};
  BRAID_TRY(std::move(comm->bootstrap->allgather(all.data(), sizeof(Entry))).context("ncclCommSplit: color exchange"));
  if (color == NCCL_SPLIT_NOCOLOR) return Status::ok();
  std::vector<int> members;
  for (int r = 0; r < comm->nranks; ++r)
    if (all[r].color == color) members.push_back(r);
  // New ranks follow key, ties broken by parent rank (NCCL's order).
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
  int me = int(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  return derive(comm, members, me, config, newcomm);
}

Status split(ncclComm* comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!newcomm) return BRAID_ERROR(ncclInvalidArgument, "newcomm pointer is NULL");
  *newcomm = nullptr;
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return BRAID_ERROR(ncclInvalidArgument, "color {} must be >= 0 or NCCL_SPLIT_NOCOLOR", color);
  BRAID_TRY(check_config(config));
  return derive_at_group_end(comm, config, newcomm, [comm, color, key, newcomm](const ncclConfig_t* child_config) {
    return split_now(comm, color, key, newcomm, child_config);
  });
}

Status shrink(ncclComm* comm, int* exclude, int nexclude, ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  if (!newcomm) return BRAID_ERROR(ncclInvalidArgument, "newcomm pointer is NULL");
  *newcomm = nullptr;
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT)
    return BRAID_ERROR(ncclInvalidArgument, "shrinkFlags {} (expected NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT)", flags);
  if (nexclude < 1 || !exclude)  // NCCL: a shrink excludes someone
    return BRAID_ERROR(ncclInvalidArgument, "excludeRanksList is NULL or excludeRanksCount {} is not positive",
                       nexclude);
  BRAID_TRY(check_config(config));
  std::set<int> excluded;
  for (int i = 0; i < nexclude; ++i) {
    if (exclude[i] < 0 || exclude[i] >= comm->nranks)
      return BRAID_ERROR(ncclInvalidArgument, "excludeRanksList[{}] = {} out of range [0, {})", i, exclude[i],
                         comm->nranks);
    if (!excluded.insert(exclude[i]).second)
      return BRAID_ERROR(ncclInvalidArgument, "rank {} appears twice in excludeRanksList", exclude[i]);
  }
  if (excluded.count(comm->rank))
    return BRAID_ERROR(ncclInvalidArgument, "rank {} is in excludeRanksList: excluded ranks do not call ncclCommShrink",
                       comm->rank);
  if (flags == NCCL_SHRINK_ABORT) {
    // Terminate whatever still runs on the parent (e.g. a collective stuck
    // on a dead rank, in another thread) now, as NCCL's: the parent is
    // revoked from here.  A parent whose init never finished has no
    // bootstrap to shrink over.
    if (!comm->ready.load(std::memory_order_acquire))
      return BRAID_ERROR(ncclInvalidArgument, "the communicator's init has not finished (or failed): nothing to shrink");
    revoke(comm);
  }
  std::vector<int> members;
  for (int r = 0; r < comm->nranks; ++r)
    if (!excluded.count(r)) members.push_back(r);
  int me = int(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  return derive_at_group_end(comm, config, newcomm, [comm, members, me, newcomm](const ncclConfig_t* child_config) {
    return derive(comm, members, me, child_config, newcomm);
  });
}

Status get_grow_id(ncclComm* comm, ncclUniqueId* id) {
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (!id) return BRAID_ERROR(ncclInvalidArgument, "uniqueId pointer is NULL");
  if (comm->revoked) return BRAID_ERROR(ncclInvalidUsage, "communicator was revoked");
  BRAID_TRY(check_initialized(comm));  // its root listens where the communicator's bootstrap does
  if (comm->grow_id_pending)
    return BRAID_ERROR(ncclInvalidUsage, "this rank's previous ncclCommGetUniqueId id was not consumed by an "
                       "ncclCommGrow yet (one grow at a time)");
  BRAID_TRY(bootstrap_create_grow_root(comm->bootstrap->address(), comm->nranks, id));
  comm->grow_id = *id;
  comm->grow_id_pending = true;
  return Status::ok();
}

// A rank that joins: comm NULL, the coordinator's id, its new rank.
Status join_grow(int nranks, const ncclUniqueId* id, int rank, ncclComm_t* newcomm, const ncclConfig_t* config) {
  if (!id) return BRAID_ERROR(ncclInvalidArgument, "a joining rank (comm NULL) needs the uniqueId from "
                              "ncclCommGetUniqueId");
  int parent = 0;
  BRAID_TRY(bootstrap_grow_source(*id, &parent));
  if (parent == 0)
    return BRAID_ERROR(ncclInvalidArgument, "uniqueId was not made by ncclCommGetUniqueId (an ncclGetUniqueId id "
                       "creates a communicator, it does not grow one)");
  if (nranks <= parent)
    return BRAID_ERROR(ncclInvalidArgument, "nRanks {} does not grow the communicator of {} ranks", nranks, parent);
  if (rank < parent || rank >= nranks)
    return BRAID_ERROR(ncclInvalidArgument, "joining rank {} out of range [{}, {}) (ranks below {} are the existing "
                       "ones)", rank, parent, nranks, parent);
  return init_rank(newcomm, nranks, *id, rank, config);
}

// The existing ranks' exchange of the coordinator's id, and their init of
// the grown communicator.
Status grow_now(ncclComm* comm, int nranks, const ncclUniqueId* id, ncclComm_t* newcomm, const ncclConfig_t* config) {
  struct Offer {
    int32_t coordinator;  // 1: this rank passed the id
    int32_t nranks;
    ncclUniqueId id;
  };
  std::vector<Offer> offers(comm->nranks);
  offers[comm->rank] = {id ? 1 : 0, nranks, id ? *id : ncclUniqueId{}};
  BRAID_TRY(std::move(comm->bootstrap->allgather(offers.data(), sizeof(Offer))).context("ncclCommGrow"));
  comm->grow_id_pending = false;  // the rendezvous of the id is this grow's, whatever happens next
  int coordinator = -1, coordinators = 0;
  for (int r = 0; r < comm->nranks; ++r) {
    if (offers[r].nranks != nranks)
      return BRAID_ERROR(ncclInvalidUsage, "ncclCommGrow: rank {} grows to {} ranks, rank {} to {}", comm->rank,
                         nranks, r, offers[r].nranks);
    if (offers[r].coordinator) coordinator = r, ++coordinators;
  }
  if (coordinators != 1)
    return BRAID_ERROR(ncclInvalidUsage, "ncclCommGrow: {} existing ranks passed a uniqueId; exactly one (the one "
                       "that called ncclCommGetUniqueId) must, the others pass NULL", coordinators);
  return init_derived(comm, nranks, offers[coordinator].id, comm->rank, config, newcomm);
}

// An existing rank: the coordinator passes its id, the others NULL; rank is -1.
Status grow_existing(ncclComm* comm, int nranks, const ncclUniqueId* id, int rank, ncclComm_t* newcomm,
                     const ncclConfig_t* config) {
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (comm->revoked) return BRAID_ERROR(ncclInvalidUsage, "communicator was revoked");
  if (comm->suspended)
    return BRAID_ERROR(ncclInvalidUsage, "communicator is suspended (ncclCommSuspend): call ncclCommResume first");
  if (rank != -1)
    return BRAID_ERROR(ncclInvalidArgument, "rank {}: an existing rank passes -1 (it keeps rank {})", rank, comm->rank);
  if (nranks <= comm->nranks)
    return BRAID_ERROR(ncclInvalidArgument, "nRanks {} does not grow the communicator of {} ranks", nranks,
                       comm->nranks);
  if (id && (!comm->grow_id_pending || std::memcmp(id, &comm->grow_id, sizeof(*id)) != 0))
    return BRAID_ERROR(ncclInvalidArgument, "uniqueId is not the one this rank's ncclCommGetUniqueId made (or it "
                       "was consumed already); the other existing ranks pass NULL");
  // Outside a group the exchange runs here, and a non-blocking grown
  // communicator is handed back at once, initializing (NCCL sets *newcomm
  // of a grow at the call, and its callers poll it).
  if (!group_active()) {
    BRAID_TRY(wait_initialized(comm));
    return grow_now(comm, nranks, id, newcomm, config);
  }
  const bool coordinator = id != nullptr;
  const ncclUniqueId given = id ? *id : ncclUniqueId{};
  return derive_at_group_end(comm, config, newcomm, [=](const ncclConfig_t* child_config) {
    return grow_now(comm, nranks, coordinator ? &given : nullptr, newcomm, child_config);
  });
}

Status grow(ncclComm* comm, int nranks, const ncclUniqueId* id, int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!newcomm) return BRAID_ERROR(ncclInvalidArgument, "newcomm pointer is NULL");
  *newcomm = nullptr;
  BRAID_TRY(check_config(config));
  return comm ? grow_existing(comm, nranks, id, rank, newcomm, config) : join_grow(nranks, id, rank, newcomm, config);
}

}  // namespace

BRAID_API ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  return guarded(comm, "ncclCommGetUniqueId", [&] { return get_grow_id(comm, uniqueId); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommGetUniqueId, (ncclComm_t, ncclUniqueId*))

BRAID_API ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                                    ncclComm_t* newcomm, ncclConfig_t* config) {
  return guarded(comm, "ncclCommGrow", [&] { return grow(comm, nRanks, uniqueId, rank, newcomm, config); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommGrow,
                      (ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*, ncclConfig_t*))

BRAID_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  return guarded(comm, "ncclCommSplit", [&] { return split(comm, color, key, newcomm, config); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommSplit, (ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*))

BRAID_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                      ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return guarded(comm, "ncclCommShrink", [&] {
    return shrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommShrink, (ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int))

// Revoke: no new work; work in flight on this rank stops (the executor
// watches `stop`, the CUDA kernels their abort flag) and
// ncclCommGetAsyncError says ncclInProgress until it has, then ncclSuccess.
// The bootstrap stays up for Split and Shrink.
BRAID_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guarded(comm, "ncclCommRevoke", [&] {
    if (!comm) return Status::ok();  // NCCL: revoking NULL does nothing
    CommUse use(comm);  // an Abort from another thread waits for this call
    if (revokeFlags != NCCL_REVOKE_DEFAULT)
      return BRAID_ERROR(ncclInvalidArgument, "revokeFlags {} must be NCCL_REVOKE_DEFAULT (0)", revokeFlags);
    // NCCL's codes: a finalized communicator, or one revoked already, is refused.
    if (use.ok() && comm->finalized)
      return BRAID_ERROR(ncclInvalidArgument, "communicator was finalized: it cannot be revoked");
    if (use.ok() && comm->revoked) return BRAID_ERROR(ncclInvalidArgument, "communicator was revoked already");
    BRAID_TRY(check_comm(use, comm));
    revoke(comm);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t, int))

BRAID_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                ncclUniqueId* commIds, ncclConfig_t* config) {
  return guarded(nullptr, "ncclCommInitRankScalable", [&] {
    if (!newcomm) return BRAID_ERROR(ncclInvalidArgument, "newcomm pointer is NULL");
    *newcomm = nullptr;
    if (!commIds) return BRAID_ERROR(ncclInvalidArgument, "commIds is NULL");
    if (nranks < 1) return BRAID_ERROR(ncclInvalidArgument, "nranks {} must be at least 1", nranks);
    if (nId < 1 || nId > nranks)
      return BRAID_ERROR(ncclInvalidArgument, "nId {} must be in [1, nranks = {}]", nId, nranks);
    std::vector<ncclUniqueId> ids(commIds, commIds + nId);
    for (int k = 0; k < nId; ++k)
      BRAID_TRY(std::move(bootstrap_check_id(ids[k])).context(fmt::format("commIds[{}]", k)));
    return init_rank(newcomm, nranks, ids[0], myrank, config, ids);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommInitRankScalable,
                      (ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*))

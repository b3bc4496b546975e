// Entry points that make communicators from other communicators or from
// several roots: ncclCommSplit, ncclCommShrink, ncclCommRevoke and
// ncclCommInitRankScalable.
//
// Split and Shrink use the parent's bootstrap: the members of each new
// communicator agree on its rank order, its first member starts a private
// bootstrap root and sends the id to the others (point-to-point, so excluded
// or dead ranks are never needed), and every member then runs a normal init
// with that id.  A NULL config inherits the parent's (blocking mode included).
#include <algorithm>
#include <cstring>
#include <set>

#include "src/runtime/group.h"
#include "src/shim/api.h"

using namespace braid;

namespace {

constexpr int kDeriveTag = 0x5b117;  // bootstrap tag of the id hand-out

// members: parent ranks of the new communicator in new-rank order; this
// rank is members[me].
Status derive(ncclComm* parent, const std::vector<int>& members, int me, const ncclConfig_t* config,
              ncclComm_t* newcomm) {
  ncclUniqueId id{};
  if (me == 0) {
    BRAID_TRY(bootstrap_create_private_root(&id));
    for (size_t i = 1; i < members.size(); ++i)
      BRAID_TRY(parent->bootstrap->send(members[i], kDeriveTag, &id, sizeof(id)));
  } else {
    BRAID_TRY(parent->bootstrap->recv(members[0], kDeriveTag, &id, sizeof(id)));
  }
  ncclConfig_t inherited = parent->config;
  return init_rank(newcomm, int(members.size()), id, me, config ? config : &inherited);
}

Status split(ncclComm* comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!newcomm) return BRAID_ERROR(ncclInvalidArgument, "newcomm pointer is NULL");
  *newcomm = nullptr;
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return BRAID_ERROR(ncclInvalidArgument, "color {} must be >= 0 or NCCL_SPLIT_NOCOLOR", color);
  BRAID_TRY(check_config(config));
  if (group_active())
    return BRAID_ERROR(ncclInvalidUsage, "ncclCommSplit inside a group is not supported by braid (call it outside)");
  BRAID_TRY(comm_wait_job(comm));
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

Status shrink(ncclComm* comm, int* exclude, int nexclude, ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  if (!newcomm) return BRAID_ERROR(ncclInvalidArgument, "newcomm pointer is NULL");
  *newcomm = nullptr;
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT)
    return BRAID_ERROR(ncclInvalidArgument, "shrinkFlags {} (expected NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT)", flags);
  if (nexclude < 0 || (nexclude > 0 && !exclude))
    return BRAID_ERROR(ncclInvalidArgument, "excludeRanksList is NULL or excludeRanksCount {} is negative", nexclude);
  BRAID_TRY(check_config(config));
  if (group_active())
    return BRAID_ERROR(ncclInvalidUsage, "ncclCommShrink inside a group is not supported by braid (call it outside)");
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
    // on a dead rank, in another thread); the parent is revoked from here.
    comm->revoked = true;
    comm->stop = true;
  } else {
    BRAID_TRY(comm_wait_job(comm));
  }
  std::vector<int> members;
  for (int r = 0; r < comm->nranks; ++r)
    if (!excluded.count(r)) members.push_back(r);
  int me = int(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  return derive(comm, members, me, config, newcomm);
}

}  // namespace

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
// watches `stop`) and ncclCommGetAsyncError says ncclInProgress until it
// has, then ncclSuccess.  The bootstrap stays up for Split and Shrink.
BRAID_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guarded(comm, "ncclCommRevoke", [&] {
    BRAID_TRY(check_comm(comm));
    if (revokeFlags != NCCL_REVOKE_DEFAULT)
      return BRAID_ERROR(ncclInvalidArgument, "revokeFlags {} must be NCCL_REVOKE_DEFAULT (0)", revokeFlags);
    comm->revoked = true;
    comm->stop = true;
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

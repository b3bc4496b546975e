// Host-side entry points of NCCL 2.28's device API (nccl_device/*.h).
//
// Teams are plain arithmetic over the communicator and work for real: world
// is every rank, lsa ("load/store accessible") the ranks on this host, rail
// the ranks with the same local index on every host.  Device communicators,
// barriers and the LL AlltoAll are not implemented yet and say so.
#include "src/shim/api.h"

using namespace braid;

struct ncclTeam {
  int nRanks, rank, stride;
};
struct ncclDevComm;
struct ncclDevCommRequirements;
struct ncclDevResourceRequirements;
struct ncclLsaBarrierHandle;
struct ncclGinBarrierHandle;
struct ncclLLA2AHandle;

namespace {

// The ranks sharing this rank's host, assumed contiguous as NCCL's lsa team is.
ncclTeam lsa_team(const ncclComm* comm) {
  uint64_t mine = comm->peers[comm->rank].host_hash;
  int first = comm->rank, last = comm->rank;
  while (first > 0 && comm->peers[first - 1].host_hash == mine) --first;
  while (last + 1 < comm->nranks && comm->peers[last + 1].host_hash == mine) ++last;
  return ncclTeam{last - first + 1, comm->rank - first, 1};
}

bool usable(const ncclComm* comm) { return comm && comm_is_live(comm) && !comm->peers.empty(); }

Status needs_cuda(const char* function) {
  return BRAID_ERROR(ncclInvalidUsage, "{} is part of NCCL's device API, which braid does not implement yet",
                     function);
}

}  // namespace

BRAID_API ncclTeam ncclTeamWorld(ncclComm_t comm) {
  if (!usable(comm)) return ncclTeam{0, -1, 1};
  return ncclTeam{comm->nranks, comm->rank, 1};
}
BRAID_PROFILING_ALIAS(ncclTeam, ncclTeamWorld, (ncclComm_t))

BRAID_API ncclTeam ncclTeamLsa(ncclComm_t comm) {
  if (!usable(comm)) return ncclTeam{0, -1, 1};
  return lsa_team(comm);
}
BRAID_PROFILING_ALIAS(ncclTeam, ncclTeamLsa, (ncclComm_t))

BRAID_API ncclTeam ncclTeamRail(ncclComm_t comm) {
  if (!usable(comm)) return ncclTeam{0, -1, 1};
  ncclTeam lsa = lsa_team(comm);
  return ncclTeam{comm->nranks / lsa.nRanks, comm->rank / lsa.nRanks, lsa.nRanks};
}
BRAID_PROFILING_ALIAS(ncclTeam, ncclTeamRail, (ncclComm_t))

BRAID_API int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam team, int rank) {
  if (!usable(comm)) return -1;
  return comm->rank + (rank - team.rank) * team.stride;
}
BRAID_PROFILING_ALIAS(int, ncclTeamRankToWorld, (ncclComm_t, ncclTeam, int))

BRAID_API int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam team, int rank) {
  if (!usable(comm)) return -1;
  ncclTeam lsa = lsa_team(comm);
  int world = comm->rank + (rank - team.rank) * team.stride;
  return world - (comm->rank - lsa.rank);
}
BRAID_PROFILING_ALIAS(int, ncclTeamRankToLsa, (ncclComm_t, ncclTeam, int))

BRAID_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements*, ncclDevComm*) {
  return guarded(comm, "ncclDevCommCreate", [] { return needs_cuda("ncclDevCommCreate"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclDevCommCreate, (ncclComm_t, const ncclDevCommRequirements*, ncclDevComm*))

BRAID_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm*) {
  return guarded(comm, "ncclDevCommDestroy", [] { return needs_cuda("ncclDevCommDestroy"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclDevCommDestroy, (ncclComm_t, const ncclDevComm*))

BRAID_API ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam, int, ncclLsaBarrierHandle*,
                                                       ncclDevResourceRequirements*) {
  return guarded(nullptr, "ncclLsaBarrierCreateRequirement",
                 [] { return needs_cuda("ncclLsaBarrierCreateRequirement"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclLsaBarrierCreateRequirement,
                      (ncclTeam, int, ncclLsaBarrierHandle*, ncclDevResourceRequirements*))

BRAID_API ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam, int, ncclGinBarrierHandle*,
                                                       ncclDevResourceRequirements*) {
  return guarded(comm, "ncclGinBarrierCreateRequirement",
                 [] { return needs_cuda("ncclGinBarrierCreateRequirement"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGinBarrierCreateRequirement,
                      (ncclComm_t, ncclTeam, int, ncclGinBarrierHandle*, ncclDevResourceRequirements*))

BRAID_API ncclResult_t ncclLLA2ACreateRequirement(int, int, ncclLLA2AHandle*, ncclDevResourceRequirements*) {
  return guarded(nullptr, "ncclLLA2ACreateRequirement", [] { return needs_cuda("ncclLLA2ACreateRequirement"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclLLA2ACreateRequirement,
                      (int, int, ncclLLA2AHandle*, ncclDevResourceRequirements*))

// Returns a slot count, not a result code: -1 tells the caller there is none.
BRAID_API int ncclLLA2ACalcSlots(int, int) {
  (void)report(nullptr, "ncclLLA2ACalcSlots", needs_cuda("ncclLLA2ACalcSlots"));
  return -1;
}
BRAID_PROFILING_ALIAS(int, ncclLLA2ACalcSlots, (int, int))

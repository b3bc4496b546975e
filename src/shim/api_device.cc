// Host-side entry points of NCCL 2.28's device API (nccl_device/*.h).
//
// Teams work for real, with NCCL 2.28.9's shapes (src/devapi/teams.h): world
// is every rank, lsa ("load/store accessible") a block of consecutive ranks
// on one host, all blocks the same size, rail the ranks with the same LSA
// index.  Where NCCL returns whatever its arithmetic gives, braid refuses a
// team or member that cannot exist (-1 and the reason in ncclGetLastError).
// The requirement calls (barriers, LL AlltoAll) fill their structs as NCCL
// does.  Device communicators: src/runtime/device_comm.h.
#include <vector>

#include "src/devapi/resources.h"
#include "src/devapi/teams.h"
#include "src/runtime/device_comm.h"
#include "src/runtime/group.h"
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
static_assert(sizeof(ncclTeam) == sizeof(devapi::Team));

namespace {

bool usable(const ncclComm* comm) { return comm && comm_is_live(comm) && !comm->peers.empty(); }

Status comm_lsa(const ncclComm* comm, devapi::LsaShape* out) {
  if (!usable(comm)) return BRAID_ERROR(ncclInvalidArgument, "communicator is NULL, destroyed or not initialised");
  return lsa_shape_of(comm->peers, comm->rank, out);
}

ncclTeam to_c(devapi::Team t) { return ncclTeam{t.nRanks, t.rank, t.stride}; }
devapi::Team from_c(ncclTeam t) { return devapi::Team{t.nRanks, t.rank, t.stride}; }
constexpr ncclTeam kNoTeam{0, -1, 1};

// Runs a team function's body; a failure is reported and yields `fallback`.
template <typename T, typename Body>
T team_call(ncclComm* comm, const char* function, T fallback, Body&& body) noexcept {
  T out = fallback;
  ncclResult_t r = guarded(usable(comm) ? comm : nullptr, function, [&] { return body(&out); });
  return r == ncclSuccess ? out : fallback;
}

// The C API's opaque handles are braid's mirrors of NCCL 2.28.9's structs.
devapi::v22809::LsaBarrierHandle* as_v22809(ncclLsaBarrierHandle* h) {
  return reinterpret_cast<devapi::v22809::LsaBarrierHandle*>(h);
}
devapi::v22809::GinBarrierHandle* as_v22809(ncclGinBarrierHandle* h) {
  return reinterpret_cast<devapi::v22809::GinBarrierHandle*>(h);
}
devapi::v22809::LLA2AHandle* as_v22809(ncclLLA2AHandle* h) { return reinterpret_cast<devapi::v22809::LLA2AHandle*>(h); }
devapi::v22809::DevResourceRequirements* as_v22809(ncclDevResourceRequirements* r) {
  return reinterpret_cast<devapi::v22809::DevResourceRequirements*>(r);
}

}  // namespace

BRAID_API ncclTeam ncclTeamWorld(ncclComm_t comm) {
  return team_call(comm, "ncclTeamWorld", kNoTeam, [&](ncclTeam* out) {
    if (!usable(comm)) return BRAID_ERROR(ncclInvalidArgument, "communicator is NULL, destroyed or not initialised");
    *out = to_c(devapi::world_team(comm->nranks, comm->rank));
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclTeam, ncclTeamWorld, (ncclComm_t))

BRAID_API ncclTeam ncclTeamLsa(ncclComm_t comm) {
  return team_call(comm, "ncclTeamLsa", kNoTeam, [&](ncclTeam* out) {
    devapi::LsaShape lsa;
    BRAID_TRY(comm_lsa(comm, &lsa));
    *out = to_c(devapi::lsa_team(lsa));
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclTeam, ncclTeamLsa, (ncclComm_t))

BRAID_API ncclTeam ncclTeamRail(ncclComm_t comm) {
  return team_call(comm, "ncclTeamRail", kNoTeam, [&](ncclTeam* out) {
    devapi::LsaShape lsa;
    BRAID_TRY(comm_lsa(comm, &lsa));
    *out = to_c(devapi::rail_team(comm->nranks, comm->rank, lsa));
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclTeam, ncclTeamRail, (ncclComm_t))

BRAID_API int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam team, int rank) {
  return team_call(comm, "ncclTeamRankToWorld", -1, [&](int* out) {
    if (!usable(comm)) return BRAID_ERROR(ncclInvalidArgument, "communicator is NULL, destroyed or not initialised");
    return devapi::team_rank_to_world(from_c(team), comm->nranks, comm->rank, rank, out);
  });
}
BRAID_PROFILING_ALIAS(int, ncclTeamRankToWorld, (ncclComm_t, ncclTeam, int))

BRAID_API int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam team, int rank) {
  return team_call(comm, "ncclTeamRankToLsa", -1, [&](int* out) {
    devapi::LsaShape lsa;
    BRAID_TRY(comm_lsa(comm, &lsa));
    return devapi::team_rank_to_lsa(from_c(team), comm->nranks, comm->rank, lsa, rank, out);
  });
}
BRAID_PROFILING_ALIAS(int, ncclTeamRankToLsa, (ncclComm_t, ncclTeam, int))

// 2.31's Compute Fabric Transport teams.  braid has no CFT, and NCCL
// without it makes every rank a CFT team of its own: the flat team and the
// multimem one are {1, 0, 1}.  Of the hierarchical teams (ncclCftTeamMode_t:
// FLAT 0, HIER_MULTIMEM 1, HIER_LSA 2), the one over multimem teams of one
// rank is that team too; the one over LSA teams has no rank where an LSA
// team has several (NCCL's arithmetic gives {0, 0, lsaSize}): refused.
BRAID_API ncclTeam ncclTeamCft(ncclComm_t comm, int mode) {
  return team_call(comm, "ncclTeamCft", kNoTeam, [&](ncclTeam* out) {
    devapi::LsaShape lsa;
    BRAID_TRY(comm_lsa(comm, &lsa));
    if (mode < 0 || mode > 2) return BRAID_ERROR(ncclInvalidArgument, "CFT team mode {} is not FLAT, HIER_MULTIMEM "
                                                 "or HIER_LSA", mode);
    if (mode == 2 && lsa.size > 1)
      return BRAID_ERROR(ncclInvalidArgument, "braid has no Compute Fabric Transport: each rank is a CFT team of one, "
                         "which LSA teams of {} ranks cannot divide (NCCL_CFT_TEAM_HIER_LSA)", lsa.size);
    *out = ncclTeam{1, 0, 1};
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclTeam, ncclTeamCft, (ncclComm_t, int))

BRAID_API ncclTeam ncclTeamCftMultimem(ncclComm_t comm) {
  return team_call(comm, "ncclTeamCftMultimem", kNoTeam, [&](ncclTeam* out) {
    if (!usable(comm)) return BRAID_ERROR(ncclInvalidArgument, "communicator is NULL, destroyed or not initialised");
    *out = ncclTeam{1, 0, 1};
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclTeam, ncclTeamCftMultimem, (ncclComm_t))

// Its logical-endpoint queries: NCCL without CFT refuses them alike.
namespace {
Status no_cft(const char* function) {
  return BRAID_ERROR(ncclInvalidArgument, "{}: braid has no Compute Fabric Transport (no logical endpoints)", function);
}
}  // namespace

BRAID_API ncclResult_t ncclGetMultimemDeviceLeInfo(ncclWindow_t window, size_t offset, uint32_t* leId,
                                                   size_t* leOffset) {
  (void)window, (void)offset, (void)leId, (void)leOffset;
  return guarded(nullptr, "ncclGetMultimemDeviceLeInfo", [] { return no_cft("ncclGetMultimemDeviceLeInfo"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetMultimemDeviceLeInfo, (ncclWindow_t, size_t, uint32_t*, size_t*))

BRAID_API ncclResult_t ncclGetCftDeviceLeInfo(ncclWindow_t window, size_t offset, int peerCft, ncclTeam cftTeam,
                                              uint32_t* leId, size_t* leOffset) {
  (void)window, (void)offset, (void)peerCft, (void)cftTeam, (void)leId, (void)leOffset;
  return guarded(nullptr, "ncclGetCftDeviceLeInfo", [] { return no_cft("ncclGetCftDeviceLeInfo"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetCftDeviceLeInfo, (ncclWindow_t, size_t, int, ncclTeam, uint32_t*, size_t*))

BRAID_API ncclResult_t ncclGetPeerDeviceLeInfo(ncclWindow_t window, size_t offset, int peerWorld, uint32_t* leId,
                                               size_t* leOffset) {
  (void)window, (void)offset, (void)peerWorld, (void)leId, (void)leOffset;
  return guarded(nullptr, "ncclGetPeerDeviceLeInfo", [] { return no_cft("ncclGetPeerDeviceLeInfo"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetPeerDeviceLeInfo, (ncclWindow_t, size_t, int, uint32_t*, size_t*))

// Device communicators: src/runtime/device_comm.h says what is served and
// what is refused.  Collective, like NCCL's, and deferred to the end of an
// enclosing group, as NCCL's are.
BRAID_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements* reqs,
                                         ncclDevComm* outDevComm) {
  return guarded(comm, "ncclDevCommCreate", [&] {
    if (!reqs || !outDevComm) return BRAID_ERROR(ncclInvalidArgument, "reqs or outDevComm is NULL");
    CommUse use(comm);
    BRAID_TRY(check_usable(use, comm));
    if (!comm->dev_comms) comm->dev_comms = std::make_unique<DeviceComms>(comm);
    // Inside a group it runs at the group's end, on a copy of the
    // requirements (*outDevComm is written then), as NCCL's does.
    if (group_active()) {
      auto copy = std::make_shared<RequirementsCopy>(reqs);
      return enqueue(
          SetupCall{comm, [comm, copy, outDevComm] { return comm->dev_comms->create(copy->data(), outDevComm); }});
    }
    BRAID_TRY(wait_initialized(comm));
    return comm->dev_comms->create(reqs, outDevComm);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclDevCommCreate, (ncclComm_t, const ncclDevCommRequirements*, ncclDevComm*))

BRAID_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm* devComm) {
  return guarded(comm, "ncclDevCommDestroy", [&] {
    if (!devComm) return BRAID_ERROR(ncclInvalidArgument, "devComm is NULL");
    CommUse use(comm);  // an Abort from another thread waits for this call
    BRAID_TRY(check_comm(use, comm));
    if (!comm->dev_comms)
      return BRAID_ERROR(ncclInvalidArgument, "ncclDevCommDestroy: this communicator has created no devComm");
    return comm->dev_comms->destroy(devComm);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclDevCommDestroy, (ncclComm_t, const ncclDevComm*))

// The requirement calls fill the caller's structs by NCCL 2.28.9's formulas
// (src/devapi/resources.h); they need no GPU and no communicator state.
BRAID_API ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam team, int nBarriers, ncclLsaBarrierHandle* outHandle,
                                                       ncclDevResourceRequirements* outReq) {
  return guarded(nullptr, "ncclLsaBarrierCreateRequirement", [&] {
    return devapi::lsa_barrier_requirement(from_c(team), nBarriers, as_v22809(outHandle), as_v22809(outReq));
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclLsaBarrierCreateRequirement,
                      (ncclTeam, int, ncclLsaBarrierHandle*, ncclDevResourceRequirements*))

// The communicator is not used.  The caller may be built against 2.28.9's
// headers (a buffer and a signal per barrier) or 2.30's (a signal per
// barrier and team rank), which nothing here tells apart: it gets both.
BRAID_API ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t, ncclTeam team, int nBarriers,
                                                       ncclGinBarrierHandle* outHandle,
                                                       ncclDevResourceRequirements* outReq) {
  return guarded(nullptr, "ncclGinBarrierCreateRequirement", [&] {
    return devapi::gin_barrier_requirement_any(from_c(team), nBarriers, as_v22809(outHandle), as_v22809(outReq));
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGinBarrierCreateRequirement,
                      (ncclComm_t, ncclTeam, int, ncclGinBarrierHandle*, ncclDevResourceRequirements*))

BRAID_API ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle* outHandle,
                                                  ncclDevResourceRequirements* outReq) {
  return guarded(nullptr, "ncclLLA2ACreateRequirement", [&] {
    return devapi::ll_a2a_requirement(nBlocks, nSlots, as_v22809(outHandle), as_v22809(outReq));
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclLLA2ACreateRequirement,
                      (int, int, ncclLLA2AHandle*, ncclDevResourceRequirements*))

// Returns a slot count, not a result code: -1 (and the reason) for bad input.
BRAID_API int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  int slots = -1;
  ncclResult_t r =
      guarded(nullptr, "ncclLLA2ACalcSlots", [&] { return devapi::ll_a2a_slots(maxElts, maxEltSize, &slots); });
  return r == ncclSuccess ? slots : -1;
}
BRAID_PROFILING_ALIAS(int, ncclLLA2ACalcSlots, (int, int))

#include "src/devapi/resources.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace braid::devapi {
namespace {

using v22809::DevResourceRequirements;

constexpr uint64_t kMaxBufferBytes = uint64_t(1) << 39;  // handles (offset / 128) fit 32 bits
constexpr size_t kMaxRequirements = 1 << 16;             // a longer list is taken for a loop

Status null_output(const char* call) {
  return BRAID_ERROR(ncclInvalidArgument, "{}: outHandle and outReq must not be NULL", call);
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
bool power_of_two(uint64_t v) { return v && !(v & (v - 1)); }

// A requirement's size, computed wide: counts up to INT_MAX multiply past
// 64 bits, and a size no handle could address is refused.
Status requirement_bytes(const char* call, unsigned __int128 bytes, size_t* out) {
  if (bytes > kMaxBufferBytes)
    return BRAID_ERROR(ncclInvalidArgument,
                       "{}: the requirement would be {} bytes or more, past the {} a resource "
                       "buffer can address",
                       call, uint64_t(std::min<unsigned __int128>(bytes, UINT64_MAX)), kMaxBufferBytes);
  *out = size_t(bytes);
  return Status::ok();
}

}  // namespace

Status lsa_barrier_requirement(v22809::Team team, int barriers, v22809::LsaBarrierHandle* handle,
                               DevResourceRequirements* req) {
  if (!handle || !req) return null_output("ncclLsaBarrierCreateRequirement");
  if (barriers < 0 || team.nRanks < 1)
    return BRAID_ERROR(ncclInvalidArgument, "ncclLsaBarrierCreateRequirement: {} barriers on a team of {} ranks",
                       barriers, team.nRanks);
  size_t bytes = 0;
  BRAID_TRY(requirement_bytes("ncclLsaBarrierCreateRequirement",
                              (unsigned __int128)(3 + uint64_t(team.nRanks)) * uint64_t(barriers) * sizeof(uint32_t),
                              &bytes));
  std::memset(req, 0, sizeof *req);
  handle->nBarriers = barriers;
  req->bufferSize = bytes;
  req->bufferAlign = alignof(uint32_t);
  req->outBufferHandle = &handle->bufHandle;
  return Status::ok();
}

Status gin_barrier_requirement(int barriers, v22809::GinBarrierHandle* handle, DevResourceRequirements* req) {
  if (!handle || !req) return null_output("ncclGinBarrierCreateRequirement");
  if (barriers < 0) return BRAID_ERROR(ncclInvalidArgument, "ncclGinBarrierCreateRequirement: {} barriers", barriers);
  std::memset(req, 0, sizeof *req);
  req->bufferSize = uint64_t(barriers) * v22809::kMaxGinContexts * sizeof(uint32_t);
  req->bufferAlign = alignof(uint32_t);
  req->outBufferHandle = &handle->bufHandle;
  req->ginSignalCount = barriers;
  req->outGinSignalStart = &handle->signal0;
  return Status::ok();
}

Status gin_barrier_requirement_v23000(v22809::Team team, int barriers, v22809::GinBarrierHandle* handle,
                                      DevResourceRequirements* req) {
  if (!handle || !req) return null_output("ncclGinBarrierCreateRequirement");
  const int64_t signals = int64_t(barriers) * team.nRanks;
  if (barriers < 0 || team.nRanks < 1 || signals > INT32_MAX)
    return BRAID_ERROR(ncclInvalidArgument, "ncclGinBarrierCreateRequirement: {} barriers on a team of {} ranks",
                       barriers, team.nRanks);
  std::memset(req, 0, sizeof *req);
  req->ginSignalCount = int(signals);
  req->outGinSignalStart = &handle->signal0;
  return Status::ok();
}

Status gin_barrier_requirement_any(v22809::Team team, int barriers, v22809::GinBarrierHandle* handle,
                                   DevResourceRequirements* req) {
  DevResourceRequirements v30{};
  BRAID_TRY(gin_barrier_requirement_v23000(team, barriers, handle, &v30));
  BRAID_TRY(gin_barrier_requirement(barriers, handle, req));
  req->ginSignalCount = std::max(req->ginSignalCount, v30.ginSignalCount);
  return Status::ok();
}

Status ll_a2a_requirement(int blocks, int slots, v22809::LLA2AHandle* handle, DevResourceRequirements* req) {
  if (!handle || !req) return null_output("ncclLLA2ACreateRequirement");
  if (blocks < 0 || slots < 0)
    return BRAID_ERROR(ncclInvalidArgument, "ncclLLA2ACreateRequirement: {} blocks of {} slots", blocks, slots);
  size_t bytes = 0;
  BRAID_TRY(requirement_bytes("ncclLLA2ACreateRequirement",
                              (unsigned __int128)(1 + 2 * uint64_t(slots)) * uint64_t(blocks) * 16, &bytes));
  handle->nSlots = uint32_t(slots);
  std::memset(req, 0, sizeof *req);
  req->bufferSize = bytes;
  req->bufferAlign = 16;
  req->outBufferHandle = &handle->bufHandle;
  return Status::ok();
}

Status ll_a2a_slots(int max_elements, int max_element_bytes, int* slots) {
  const int64_t n = int64_t(max_elements) * ((int64_t(max_element_bytes) + 7) / 8);
  if (max_elements < 0 || max_element_bytes < 0 || n > INT32_MAX)
    return BRAID_ERROR(ncclInvalidArgument, "ncclLLA2ACalcSlots: {} elements of {} bytes", max_elements,
                       max_element_bytes);
  *slots = int(n);
  return Status::ok();
}

namespace {

// Places `own` (the devComm's own barriers), then the user's list, after
// the devComm's own `signals` and `counters`: checks everything first and
// writes nothing unless all is valid.
Status place(const DevResourceRequirements* user, int64_t signals, int64_t counters,
             const std::vector<const DevResourceRequirements*>& own, int gin_contexts, uint64_t granularity,
             ResourceLayout* out) {
  std::vector<const DevResourceRequirements*> list = own;
  for (const DevResourceRequirements* r = user; r; r = r->next) {
    if (list.size() > kMaxRequirements)
      return BRAID_ERROR(ncclInvalidArgument, "ncclDevCommCreate: more than {} resource requirements (a loop?)",
                         kMaxRequirements);
    list.push_back(r);
  }
  // First pass: check and place, writing nothing.
  struct Place {
    uint64_t offset;
    uint32_t signal, counter;
  };
  std::vector<Place> places;
  uint64_t bytes = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const DevResourceRequirements& r = *list[i];
    const uint64_t align = std::max<uint64_t>(128, r.bufferAlign);
    const bool bad_align = (r.bufferAlign && !power_of_two(r.bufferAlign)) || r.bufferAlign > kMaxBufferBytes;
    if (bad_align || r.bufferSize > kMaxBufferBytes || r.ginSignalCount < 0 || r.ginCounterCount < 0)
      return BRAID_ERROR(ncclInvalidArgument,
                         "ncclDevCommCreate: resource requirement {} asks for {} bytes aligned to {}, {} signals, {} "
                         "counters",
                         i, r.bufferSize, r.bufferAlign, r.ginSignalCount, r.ginCounterCount);
    bytes = align_up(bytes, align);
    if (bytes >= kMaxBufferBytes)  // its handle, bytes / 128, would not fit 32 bits
      return BRAID_ERROR(ncclInvalidArgument,
                         "ncclDevCommCreate: resource requirement {} would start at byte {}, "
                         "past what a handle addresses",
                         i, bytes);
    places.push_back(Place{bytes, uint32_t(signals), uint32_t(counters)});
    bytes += r.bufferSize;
    signals += r.ginSignalCount;
    counters += r.ginCounterCount;
    if (bytes > kMaxBufferBytes || signals > INT32_MAX || counters > INT32_MAX)
      return BRAID_ERROR(ncclInvalidArgument,
                         "ncclDevCommCreate: the requirements add up to {} bytes, {} signals, {} "
                         "counters",
                         bytes, signals, counters);
  }
  ResourceLayout layout;
  layout.shadows_offset = align_up(bytes, 128);
  layout.bytes = align_up(layout.shadows_offset + uint64_t(gin_contexts) * uint64_t(signals) * sizeof(uint64_t),
                          granularity);
  layout.signals = uint32_t(signals);
  layout.counters = uint32_t(counters);
  // Second pass: write what each requirement asked for.
  for (size_t i = 0; i < list.size(); ++i) {
    const DevResourceRequirements& r = *list[i];
    if (r.outBufferHandle) *r.outBufferHandle = uint32_t(places[i].offset / v22809::kResourceHandleUnit);
    if (r.outGinSignalStart) *r.outGinSignalStart = places[i].signal;
    if (r.outGinCounterStart) *r.outGinCounterStart = places[i].counter;
  }
  *out = layout;
  return Status::ok();
}

struct Count {
  const char* name;
  int value;
};

Status check_counts(std::initializer_list<Count> counts, int gin_contexts, int max_contexts, uint64_t granularity) {
  if (gin_contexts < 0 || gin_contexts > max_contexts || !power_of_two(granularity))
    return BRAID_ERROR(ncclInvalidArgument, "resource layout: {} GIN contexts, granularity {}", gin_contexts,
                       granularity);
  for (const Count& c : counts)
    if (c.value < 0) return BRAID_ERROR(ncclInvalidArgument, "ncclDevCommCreate: {} is {}", c.name, c.value);
  return Status::ok();
}

}  // namespace

Status layout_resources(const v22809::DevCommRequirements& reqs, v22809::Team lsa, int gin_contexts,
                        uint64_t granularity, v22809::LsaBarrierHandle* lsa_barrier,
                        v22809::GinBarrierHandle* rail_barrier, ResourceLayout* out) {
  if (!lsa_barrier || !rail_barrier || !out) return BRAID_ERROR(ncclInvalidArgument, "resource layout: NULL output");
  BRAID_TRY(check_counts({{"barrierCount", reqs.barrierCount},
                          {"lsaBarrierCount", reqs.lsaBarrierCount},
                          {"railGinBarrierCount", reqs.railGinBarrierCount},
                          {"ginSignalCount", reqs.ginSignalCount},
                          {"ginCounterCount", reqs.ginCounterCount}},
                         gin_contexts, v22809::kMaxGinContexts, granularity));
  // The devComm's own barriers, into temporaries: nothing is written before
  // the whole list has been checked.
  v22809::LsaBarrierHandle lsa_handle{};
  v22809::GinBarrierHandle rail_handle{};
  DevResourceRequirements lsa_req{}, rail_req{};
  BRAID_TRY(lsa_barrier_requirement(lsa, std::max(reqs.barrierCount, reqs.lsaBarrierCount), &lsa_handle, &lsa_req));
  BRAID_TRY(gin_barrier_requirement(std::max(reqs.barrierCount, reqs.railGinBarrierCount), &rail_handle, &rail_req));
  BRAID_TRY(place(reqs.resourceRequirementsList, reqs.ginSignalCount, reqs.ginCounterCount, {&rail_req, &lsa_req},
                  gin_contexts, granularity, out));
  *lsa_barrier = lsa_handle;
  *rail_barrier = rail_handle;
  return Status::ok();
}

Status layout_resources_v23000(const v23000::DevCommRequirements& reqs, const DevCommTeams& teams, int gin_contexts,
                               uint64_t granularity, DevCommBarriers* barriers, ResourceLayout* out) {
  if (!barriers || !out) return BRAID_ERROR(ncclInvalidArgument, "resource layout: NULL output");
  BRAID_TRY(check_counts({{"barrierCount", reqs.barrierCount},
                          {"lsaBarrierCount", reqs.lsaBarrierCount},
                          {"railGinBarrierCount", reqs.railGinBarrierCount},
                          {"worldGinBarrierCount", reqs.worldGinBarrierCount},
                          {"ginSignalCount", reqs.ginSignalCount},
                          {"ginCounterCount", reqs.ginCounterCount}},
                         gin_contexts, kMaxGinContextsV23000, granularity));
  // Into a copy of the handles, written back only when all is placed.
  DevCommBarriers b{};
  DevResourceRequirements world_req{}, rail_req{}, lsa_req{}, hybrid_dense_req{}, hybrid_rail_req{}, hybrid_lsa_req{};
  // A rail connection has no dense barrier: its rail barrier is that one
  // (NCCL refuses worldGinBarrierCount there).
  const int hybrid_dense = reqs.ginConnectionType == v23000::kGinConnectionRail ? 0 : reqs.barrierCount;
  BRAID_TRY(gin_barrier_requirement_v23000(teams.world, reqs.worldGinBarrierCount, &b.world, &world_req));
  BRAID_TRY(gin_barrier_requirement_v23000(teams.rail, reqs.railGinBarrierCount, &b.rail, &rail_req));
  BRAID_TRY(lsa_barrier_requirement(teams.lsa, reqs.lsaBarrierCount, &b.lsa, &lsa_req));
  BRAID_TRY(gin_barrier_requirement_v23000(teams.dense, hybrid_dense, &b.hybrid_dense, &hybrid_dense_req));
  BRAID_TRY(gin_barrier_requirement_v23000(teams.rail, reqs.barrierCount, &b.hybrid_rail, &hybrid_rail_req));
  BRAID_TRY(lsa_barrier_requirement(teams.lsa, reqs.barrierCount, &b.hybrid_lsa, &hybrid_lsa_req));
  BRAID_TRY(place(reqs.resourceRequirementsList, reqs.ginSignalCount, reqs.ginCounterCount,
                  {&world_req, &rail_req, &lsa_req, &hybrid_dense_req, &hybrid_rail_req, &hybrid_lsa_req},
                  gin_contexts, granularity, out));
  *barriers = b;
  return Status::ok();
}

}  // namespace braid::devapi

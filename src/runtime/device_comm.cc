#include "src/runtime/device_comm.h"

#include <algorithm>
#include <cstring>

#include "src/bootstrap/bootstrap.h"
#include "src/devapi/resources.h"
#include "src/devapi/teams.h"
#include "src/runtime/comm.h"
#include "src/runtime/init.h"

namespace braid {
namespace {

namespace v = devapi::v22809;

// NCCL_API_MAGIC, which 2.29 and later put at byte 8 of their requirements
// (after a size_t).  In 2.28.9's struct those bytes are the low half of an
// 8-byte-aligned pointer, which can never be this odd number.
constexpr uint32_t kVersionedMagic = 0xcafebeef;

Status no_gin(const char* what) {
  return BRAID_ERROR(ncclInvalidUsage,
                     "ncclDevCommCreate: {} needs GPU-initiated networking (GIN), which braid's device "
                     "communicators do not offer yet; LSA barriers (lsaBarrierCount), LL AlltoAll and the "
                     "user's resource requirements are served",
                     what);
}

}  // namespace

LsaSpace& symmetric_memory(ncclComm* comm) {
  if (!comm->lsa)
    comm->lsa = std::make_unique<LsaSpace>(comm->backend->device_api_memory(), comm->setup->ctx, *comm->bootstrap);
  return *comm->lsa;
}

DeviceComms::Created::~Created() {
  window.reset();  // unmaps the peers' copies first
  if (resources) memory->free_shareable(resources);
}

DeviceComms::~DeviceComms() = default;

Status DeviceComms::refuse_unservable(const v::DevCommRequirements& reqs) const {
  if (reqs.ginForceEnable) return no_gin("ginForceEnable");
  if (reqs.ginSignalCount || reqs.ginCounterCount) return no_gin("ginSignalCount or ginCounterCount");
  if (reqs.railGinBarrierCount) return no_gin("railGinBarrierCount");
  if (reqs.barrierCount) return no_gin("barrierCount (the world barrier runs the rail GIN barrier)");
  int i = 0;
  for (const v::DevResourceRequirements* r = reqs.resourceRequirementsList; r && i < 4096; r = r->next, ++i)
    if (r->ginSignalCount > 0 || r->ginCounterCount > 0) return no_gin("a resource requirement's GIN signals");
  if (reqs.lsaMultimem || reqs.teamRequirementsList)
    return BRAID_ERROR(ncclInvalidUsage, "ncclDevCommCreate: multimem (lsaMultimem, team requirements) needs NVLink "
                       "SHARP, which braid does not have");
  const devapi::LsaShape& lsa = comm_->lsa->lsa();
  if (lsa.size < comm_->nranks)
    return no_gin(fmt::format("a communicator of {} LSA teams (ranks on several hosts)", comm_->nranks / lsa.size)
                      .c_str());
  return Status::ok();
}

Status DeviceComms::create(const void* reqs_bytes, v::DevComm* out) {
  uint32_t magic = 0;
  std::memcpy(&magic, static_cast<const char*>(reqs_bytes) + 8, sizeof(magic));
  if (magic == kVersionedMagic)
    return BRAID_ERROR(ncclInvalidUsage, "ncclDevCommCreate: these requirements come from NCCL 2.29 or later device "
                       "headers (NCCL_API_MAGIC at byte 8); braid serves NCCL 2.28.9's device ABI: build the kernel "
                       "against the 2.28.9 nccl_device.h");
  const auto& reqs = *static_cast<const v::DevCommRequirements*>(reqs_bytes);
  LsaSpace& space = symmetric_memory(comm_);
  DeviceApiMemory& memory = space.memory();
  // Everything local first, then one agreement, so that a rank that cannot
  // serve the request does not leave the others waiting in the collective.
  v::LsaBarrierHandle lsa_barrier{};
  v::GinBarrierHandle rail_barrier{};
  devapi::ResourceLayout layout;
  auto created = std::make_unique<Created>();
  created->memory = &memory;
  Status local = refuse_unservable(reqs);
  if (local.is_ok())
    local = devapi::layout_resources(reqs, devapi::lsa_team(space.lsa()), 0, memory.granularity(), &lsa_barrier,
                                     &rail_barrier, &layout);
  if (local.is_ok() && layout.bytes) local = memory.alloc_shareable(layout.bytes, &created->resources);
  if (local.is_ok() && layout.bytes) local = memory.zero(created->resources, layout.bytes);
  std::vector<int64_t> oks(comm_->nranks);
  oks[comm_->rank] = local.is_ok();
  BRAID_TRY(std::move(comm_->bootstrap->allgather(oks.data(), sizeof(int64_t))).context("ncclDevCommCreate"));
  BRAID_TRY(std::move(local));
  for (int r = 0; r < comm_->nranks; ++r)
    if (!oks[r]) return BRAID_ERROR(ncclInvalidUsage, "ncclDevCommCreate failed on rank {} (its log says why)", r);

  v::DevComm dev{};
  if (layout.bytes) {
    BRAID_TRY(space.add_window(created->resources, layout.bytes, created.get(), false, &created->window));
    if (!created->window->symmetric())
      return BRAID_ERROR(ncclInvalidUsage, "ncclDevCommCreate: the resource buffer could not be mapped by every LSA "
                         "peer (see the INFO log of ncclCommWindowRegister)");
    dev.resourceWindow = static_cast<v::WindowVidmem*>(created->window->device());
    dev.resourceWindow_inlined = created->window->image();
  }
  const devapi::LsaShape& lsa = space.lsa();
  dev.rank = comm_->rank;
  dev.nRanks = comm_->nranks;
  dev.nRanks_rcp32 = v::div_rcp32(uint32_t(comm_->nranks));
  dev.lsaRank = lsa.rank;
  dev.lsaSize = lsa.size;
  dev.lsaSize_rcp32 = v::div_rcp32(uint32_t(lsa.size));
  void* table = nullptr;
  BRAID_TRY(space.window_table(&table));
  dev.windowTable = static_cast<v::DevCommWindowTable*>(table);
  dev.lsaBarrier = lsa_barrier;
  dev.railGinBarrier = rail_barrier;
  dev.ginSignalCount = int(layout.signals);
  dev.ginCounterCount = int(layout.counters);
  *out = dev;
  if (created->window) live_.push_back(std::move(created));
  else ++without_resources_;
  return Status::ok();
}

Status DeviceComms::destroy(const v::DevComm& dev) {
  if (dev.rank != comm_->rank || dev.nRanks != comm_->nranks)
    return BRAID_ERROR(ncclInvalidArgument, "ncclDevCommDestroy: devComm of rank {} of {} is not this "
                       "communicator's (rank {} of {})", dev.rank, dev.nRanks, comm_->rank, comm_->nranks);
  if (!dev.resourceWindow) {
    if (without_resources_ == 0)
      return BRAID_ERROR(ncclInvalidArgument, "ncclDevCommDestroy: no live devComm of this communicator matches "
                         "(destroyed already?)");
    --without_resources_;
    return Status::ok();
  }
  auto it = std::find_if(live_.begin(), live_.end(),
                         [&](const auto& c) { return c->window->device() == static_cast<void*>(dev.resourceWindow); });
  if (it == live_.end())
    return BRAID_ERROR(ncclInvalidArgument, "ncclDevCommDestroy: no live devComm of this communicator has resource "
                       "window {} (destroyed already?)", static_cast<void*>(dev.resourceWindow));
  live_.erase(it);
  return Status::ok();
}

}  // namespace braid

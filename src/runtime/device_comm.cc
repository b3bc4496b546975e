#include "src/runtime/device_comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/bootstrap/bootstrap.h"
#include "src/devapi/resources.h"
#include "src/devapi/teams.h"
#include "src/runtime/comm.h"
#include "src/runtime/init.h"

namespace braid {
namespace {

namespace v = devapi::v22809;
namespace v30 = devapi::v23000;

// NCCL_API_MAGIC, which 2.29 and later put at byte 8 of their requirements
// (after a size_t).  In 2.28.9's struct those bytes are the low half of an
// 8-byte-aligned pointer, which can never be this odd number.
constexpr uint32_t kVersionedMagic = devapi::v23000::kApiMagic;

// Descriptors a GIN context's queue holds per target: NCCL_GIN_PROXY_QUEUE_SIZE
// if it is a power of two from 2 to 65536, else NCCL's default (32
// requests x 8 receives).
uint32_t gin_queue_size() {
  const std::string text = env_raw("NCCL_GIN_PROXY_QUEUE_SIZE");
  const long v = text.empty() ? 0 : std::strtol(text.c_str(), nullptr, 10);
  if (v >= 2 && v <= 65536 && (v & (v - 1)) == 0) return uint32_t(v);
  if (!text.empty()) BRAID_WARN("NCCL_GIN_PROXY_QUEUE_SIZE={} is not a power of two from 2 to 65536: 256", text);
  return 256;
}
// A descriptor names signals and counters in 16 bits.
constexpr uint64_t kGinIds = uint64_t(1) << 16;

// Whether a resource requirement asks for GIN signals or counters (a list
// that loops is cut at 4096 nodes, which the layout then refuses).
bool list_wants_gin(const v::DevResourceRequirements* list) {
  int i = 0;
  for (const v::DevResourceRequirements* r = list; r && i < 4096; r = r->next, ++i)
    if (r->ginSignalCount > 0 || r->ginCounterCount > 0) return true;
  return false;
}

// Whether the devComm needs GIN (see device_comm.h): as NCCL, with several
// LSA teams, or when the requirements use it.
bool wants_gin(const v::DevCommRequirements& reqs, const devapi::LsaShape& lsa, int nranks) {
  if (lsa.size < nranks || reqs.ginForceEnable || reqs.ginSignalCount || reqs.ginCounterCount ||
      reqs.railGinBarrierCount || reqs.barrierCount)
    return true;
  return list_wants_gin(reqs.resourceRequirementsList);
}

}  // namespace

namespace {

// Copies the list `*head` points at into `nodes`, node by node, and points
// `*head` and each copy's `next` at the copies (a loop is cut after 4096
// nodes: the last copy still points into the caller's list, and the layout
// then refuses the list as too long).
template <typename Node>
void copy_list(Node** head, std::deque<Node>* nodes) {
  Node* link_target = nullptr;
  std::memcpy(&link_target, head, sizeof(link_target));  // `head` is inside a byte copy
  Node** link = head;
  for (int i = 0; link_target && i <= 4096; link_target = link_target->next, ++i) {
    nodes->push_back(*link_target);
    Node* copy = &nodes->back();
    std::memcpy(link, &copy, sizeof(copy));
    link = &copy->next;
  }
}

}  // namespace

RequirementsCopy::RequirementsCopy(const void* reqs) {
  const char* bytes = static_cast<const char*>(reqs);
  uint32_t magic = 0;
  std::memcpy(&magic, bytes + 8, sizeof(magic));
  const bool versioned = magic == kVersionedMagic;
  // A versioned struct is copied as far as its size says and 2.30's goes
  // (create refuses any size but 2.30's).
  size_t size = sizeof(v::DevCommRequirements);
  if (versioned) {
    uint64_t told = 0;
    std::memcpy(&told, bytes, sizeof(told));
    size = std::clamp<uint64_t>(told, 16, sizeof(v30::DevCommRequirements));
  }
  top_.assign(sizeof(v30::DevCommRequirements), 0);
  std::memcpy(top_.data(), bytes, size);
  const size_t lists = versioned ? offsetof(v30::DevCommRequirements, resourceRequirementsList)
                                 : offsetof(v::DevCommRequirements, resourceRequirementsList);
  if (lists + 2 * sizeof(void*) > size) return;  // a struct too short to hold them (create refuses it)
  copy_list(reinterpret_cast<v::DevResourceRequirements**>(top_.data() + lists), &resources_);
  copy_list(reinterpret_cast<v::TeamRequirements**>(top_.data() + lists + sizeof(void*)), &teams_);
}

LsaSpace& symmetric_memory(ncclComm* comm) {
  if (!comm->lsa)
    comm->lsa = std::make_unique<LsaSpace>(comm->backend->device_api_memory(), comm->setup->ctx, *comm->bootstrap);
  return *comm->lsa;
}

DeviceComms::Created::~Created() {
  gin.reset();     // stops its proxy first
  window.reset();  // unmaps the peers' copies
  if (resources) memory->free_shareable(resources);
}

DeviceComms::~DeviceComms() = default;

Status DeviceComms::refuse_unservable(const v::DevCommRequirements& reqs, bool gin) const {
  if (reqs.lsaMultimem || reqs.teamRequirementsList)
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: multimem (lsaMultimem, team requirements) needs NVLink "
                       "SHARP, which braid does not have");
  if (gin && !comm_->lsa->memory().host_reachable())
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: GPU-initiated networking (GIN signals or counters, "
                       "ginForceEnable, barrierCount, railGinBarrierCount, or ranks on several hosts) is served on the "
                       "host backend only; on the {} backend its proxy is not built yet",
                       comm_->lsa->memory().name());
  return Status::ok();
}

Status DeviceComms::create(const void* reqs_bytes, void* out) {
  uint32_t magic = 0;
  std::memcpy(&magic, static_cast<const char*>(reqs_bytes) + 8, sizeof(magic));
  if (magic != kVersionedMagic) {  // 2.28.9's unversioned requirements
    v::DevComm dev{};
    BRAID_TRY(create_v22809(*static_cast<const v::DevCommRequirements*>(reqs_bytes), Status::ok(), &dev));
    std::memcpy(out, &dev, sizeof(dev));
    return Status::ok();
  }
  v30::DevCommRequirements reqs{};
  std::memcpy(&reqs, reqs_bytes, offsetof(v30::DevCommRequirements, resourceRequirementsList));
  if (reqs.version < NCCL_VERSION(2, 30, 0) || reqs.size != sizeof(reqs))
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: requirements of {} bytes from device headers of NCCL version {}: braid "
                       "serves the device ABIs of NCCL 2.28.9 and 2.30 (whose requirements are {} bytes), not 2.29's",
                       reqs.size, reqs.version, sizeof(reqs));
  std::memcpy(&reqs, reqs_bytes, sizeof(reqs));
  // 2.30's requirements in 2.28.9's terms: what both have means the same,
  // and what only 2.30 has (its GIN) is refused, agreed with the others.
  v::DevCommRequirements common{};
  common.resourceRequirementsList = reqs.resourceRequirementsList;
  common.teamRequirementsList = reqs.teamRequirementsList;
  common.lsaMultimem = reqs.lsaMultimem;
  common.lsaBarrierCount = reqs.lsaBarrierCount;
  symmetric_memory(comm_);  // the LSA shape the refusal looks at
  Status refused = refuse_v23000_gin(reqs);
  v::DevComm dev{};
  BRAID_TRY(create_v22809(common, std::move(refused), &dev));
  v30::DevComm dev30{};
  dev30.magic = kVersionedMagic;
  dev30.version = reqs.version;
  dev30.rank = dev.rank;
  dev30.nRanks = dev.nRanks;
  dev30.nRanks_rcp32 = dev.nRanks_rcp32;
  dev30.lsaRank = dev.lsaRank;
  dev30.lsaSize = dev.lsaSize;
  dev30.lsaSize_rcp32 = dev.lsaSize_rcp32;
  dev30.windowTable = dev.windowTable;
  dev30.resourceWindow = dev.resourceWindow;
  static_assert(sizeof(dev30.resourceWindow_inlined) <= sizeof(dev.resourceWindow_inlined));
  std::memcpy(&dev30.resourceWindow_inlined, &dev.resourceWindow_inlined, sizeof(dev30.resourceWindow_inlined));
  dev30.lsaMultimem = dev.lsaMultimem;
  dev30.lsaBarrier = dev.lsaBarrier;
  // abortFlag stays NULL, as NCCL leaves it in the devComms users create.
  std::memcpy(out, &dev30, sizeof(dev30));
  return Status::ok();
}

// GIN in 2.30's terms (its own descriptor format, connection types, world
// barriers) is not served; the reasons name 2.30's fields.
Status DeviceComms::refuse_v23000_gin(const v30::DevCommRequirements& reqs) const {
  const bool resources = reqs.ginSignalCount > 0 || reqs.ginCounterCount > 0 || reqs.barrierCount > 0 ||
                         reqs.railGinBarrierCount > 0 || reqs.worldGinBarrierCount > 0 ||
                         list_wants_gin(reqs.resourceRequirementsList);
  const bool connect = reqs.ginForceEnable || reqs.ginConnectionType != v30::kGinConnectionNone;
  if (resources && !connect)
    return BRAID_ERROR(ncclInvalidArgument,
                       "ncclDevCommCreate: GIN resources (signals, counters or barriers) "
                       "requested with ginConnectionType NCCL_GIN_CONNECTION_NONE (as NCCL, refused)");
  if (resources || connect || comm_->lsa->lsa().size < comm_->nranks)
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: GPU-initiated networking for a client of NCCL 2.30's "
                       "device headers (its ginConnectionType, GIN resources, or ranks on several hosts) is not served "
                       "yet: braid's GIN proxy reads 2.28.9's descriptors; LSA windows, barriers and LL AlltoAll are "
                       "served");
  return Status::ok();
}

Status DeviceComms::create_v22809(const v::DevCommRequirements& reqs, Status refused, v::DevComm* out) {
  LsaSpace& space = symmetric_memory(comm_);
  DeviceApiMemory& memory = space.memory();
  const bool gin = wants_gin(reqs, space.lsa(), comm_->nranks) && refused.is_ok();
  // Everything local first, then one agreement, so that a rank that cannot
  // serve the request does not leave the others waiting in the collective.
  v::LsaBarrierHandle lsa_barrier{};
  v::GinBarrierHandle rail_barrier{};
  devapi::ResourceLayout layout;
  auto created = std::make_unique<Created>();
  created->memory = &memory;
  void* signal_memory = nullptr;
  uint32_t signals = 0, counters = 0;
  Status local = refused.is_ok() ? refuse_unservable(reqs, gin) : std::move(refused);
  if (local.is_ok())
    local = devapi::layout_resources(reqs, devapi::lsa_team(space.lsa()), gin ? 1 : 0, memory.granularity(),
                                     &lsa_barrier, &rail_barrier, &layout);
  if (local.is_ok() && layout.bytes) local = memory.alloc_shareable(layout.bytes, &created->resources);
  if (local.is_ok() && layout.bytes) local = memory.zero(created->resources, layout.bytes);
  if (local.is_ok() && gin) {
    signals = std::max<uint32_t>(layout.signals, 1);
    counters = std::max<uint32_t>(layout.counters, 1);
    if (signals > kGinIds || counters > kGinIds)
      local = BRAID_ERROR(ncclInvalidArgument,
                          "ncclDevCommCreate: {} GIN signals and {} counters (at most {} each: "
                          "a descriptor names them in 16 bits)",
                          signals, counters, kGinIds);
    if (local.is_ok()) local = memory.alloc_shareable(signals * sizeof(uint64_t), &signal_memory);
    if (local.is_ok()) local = memory.zero(signal_memory, signals * sizeof(uint64_t));
  }
  std::vector<int64_t> oks(comm_->nranks);
  oks[comm_->rank] = local.is_ok();
  Status agreed = std::move(comm_->bootstrap->allgather(oks.data(), sizeof(int64_t))).context("ncclDevCommCreate");
  if ((!agreed.is_ok() || !local.is_ok()) && signal_memory) memory.free_shareable(signal_memory);
  BRAID_TRY(std::move(agreed));
  BRAID_TRY(std::move(local));
  for (int r = 0; r < comm_->nranks; ++r)
    if (!oks[r]) {
      if (signal_memory) memory.free_shareable(signal_memory);
      return BRAID_ERROR(ncclInvalidUsage, "ncclDevCommCreate failed on rank {} (its log says why)", r);
    }

  v::DevComm dev{};
  if (layout.bytes) {
    BRAID_TRY(space.add_window(created->resources, layout.bytes, created.get(), false, &created->window));
    if (!created->window->symmetric())
      return BRAID_ERROR(ncclInvalidUsage,
                         "ncclDevCommCreate: the resource buffer could not be mapped by every LSA "
                         "peer (see the INFO log of ncclCommWindowRegister)");
    dev.resourceWindow = static_cast<v::WindowVidmem*>(created->window->device());
    dev.resourceWindow_inlined = created->window->image();
  }
  const devapi::LsaShape& lsa = space.lsa();
  if (gin) {
    BRAID_TRY(DeviceGin::create(space, *comm_->bootstrap, comm_->setup->ctx.peers, signal_memory, signals, counters,
                                gin_queue_size(), &created->gin));
    dev.ginContextCount = 1;
    dev.ginTypes[0] = v::kGinTypeProxy;
    dev.ginHandles[0] = created->gin->device_context();
    // Each context's shadow of every signal, at the buffer's tail (own
    // copy); no buffer when there are no signals to shadow.
    if (created->window)
      dev.ginSignalShadows = reinterpret_cast<uint64_t*>(created->window->lsa_pointer(lsa.rank, layout.shadows_offset));
  }
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
  std::lock_guard<std::mutex> lock(mutex_);
  live_.push_back(std::move(created));
  return Status::ok();
}

Status DeviceComms::destroy(const void* dev_bytes) {
  // Either ABI's devComm: 2.30's starts with NCCL_API_MAGIC, 2.28.9's with
  // a rank, which is never that.
  uint32_t magic = 0;
  std::memcpy(&magic, dev_bytes, sizeof(magic));
  int rank = 0, nranks = 0;
  void *resources = nullptr, *gin = nullptr;
  if (magic == kVersionedMagic) {
    const auto& d = *static_cast<const v30::DevComm*>(dev_bytes);
    rank = d.rank, nranks = d.nRanks, resources = d.resourceWindow, gin = d.ginHandles[0];
  } else {
    const auto& d = *static_cast<const v::DevComm*>(dev_bytes);
    rank = d.rank, nranks = d.nRanks, resources = d.resourceWindow, gin = d.ginHandles[0];
  }
  if (rank != comm_->rank || nranks != comm_->nranks)
    return BRAID_ERROR(ncclInvalidArgument,
                       "ncclDevCommDestroy: devComm of rank {} of {} is not this "
                       "communicator's (rank {} of {})",
                       rank, nranks, comm_->rank, comm_->nranks);
  // A devComm is known by its resource window and GIN context (both null
  // for one that needed neither: any such one will do).
  auto is = [&](const std::unique_ptr<Created>& c) {
    return (c->window ? c->window->device() : nullptr) == resources &&
           (c->gin ? c->gin->device_context() : nullptr) == gin;
  };
  std::unique_ptr<Created> gone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(live_.begin(), live_.end(), is);
    if (it == live_.end())
      return BRAID_ERROR(ncclInvalidArgument,
                         "ncclDevCommDestroy: no live devComm of this communicator has resource "
                         "window {} and GIN context {} (destroyed already?)",
                         resources, gin);
    gone = std::move(*it);
    live_.erase(it);
  }
  return Status::ok();  // `gone` is released outside the lock (it joins a proxy thread)
}

ncclResult_t DeviceComms::poll_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& c : live_)
    if (c->gin)
      if (Status s = c->gin->fault(); !s.is_ok()) return s.code();
  return ncclSuccess;
}

}  // namespace braid

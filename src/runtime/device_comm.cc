#include "src/runtime/device_comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "src/base/env.h"
#include "src/base/host_identity.h"
#include "src/base/log.h"
#include "src/base/nccl_version.h"
#include "src/bootstrap/bootstrap.h"
#include "src/devapi/resources.h"
#include "src/devapi/teams.h"
#include "src/runtime/comm.h"
#include "src/runtime/init.h"
#include "src/transport/peer_processes.h"

namespace braid {
namespace {

namespace v = devapi::v22809;
namespace v30 = devapi::v23000;
namespace v31 = devapi::v23100;
namespace v32 = devapi::v23200;
namespace v22900 = devapi::v22900;

// NCCL_API_MAGIC, which 2.29 and later put at byte 8 of their requirements
// (after a size_t).  In 2.28.9's struct those bytes are the low half of an
// 8-byte-aligned pointer, which can never be this odd number.
constexpr uint32_t kVersionedMagic = devapi::v23000::kApiMagic;

// 2.30.5 (unreleased; 2.30.7 is the first release with it) changed 2.30's
// device ABI: requirements that say which GIN signals its kernels use,
// 72-byte GIN contexts, descriptors of GFD version 2, and gets waited for
// with a flush descriptor.  Kernels built against 2.30.3's or 2.30.4's
// headers get the ABI those headers read; NCCL 2.30.7 too gives them its
// first GIN context version, below 2.30.5 (its src/gin/gin_host.cc,
// proxyBackendMinVersions).
constexpr uint32_t kV23005 = NCCL_VERSION(2, 30, 5);

bool queue_size_ok(long v) { return v >= 2 && v <= 65536 && (v & (v - 1)) == 0; }

// Descriptors a GIN context's queue holds per target: NCCL_GIN_PROXY_QUEUE_SIZE
// if it is a power of two from 2 to 65536, else the requirements' depth
// (2.30's ginQueueDepth) if it is one, else NCCL's default (32 requests x 8
// receives).
uint32_t gin_queue_size(int asked = 0) {
  const std::string text = env_raw("NCCL_GIN_PROXY_QUEUE_SIZE");
  const long v = text.empty() ? 0 : std::strtol(text.c_str(), nullptr, 10);
  if (queue_size_ok(v)) return uint32_t(v);
  if (!text.empty()) BRAID_WARN("NCCL_GIN_PROXY_QUEUE_SIZE={} is not a power of two from 2 to 65536", text);
  return queue_size_ok(asked) ? uint32_t(asked) : 256;
}

// How many signals and counters a descriptor can name: 16 bits each in
// 2.28.9's format, 24 and 23 in 2.30's.
Status check_gin_ids(devapi::GfdFormat f, uint32_t signals, uint32_t counters) {
  const bool v2 = f == devapi::GfdFormat::kV2;
  const uint64_t max_signals = uint64_t(1) << (v2 ? 24 : 16), max_counters = uint64_t(1) << (v2 ? 23 : 16);
  if (signals <= max_signals && counters <= max_counters) return Status::ok();
  return BRAID_ERROR(ncclInvalidArgument,
                     "ncclDevCommCreate: {} GIN signals and {} counters (at most {} and {}: what a descriptor names)",
                     signals, counters, max_signals, max_counters);
}

// Whether a resource requirement asks for GIN signals or counters (a list
// that loops is cut at 4096 nodes, which the layout then refuses).
bool list_wants_gin(const v::DevResourceRequirements* list) {
  int i = 0;
  for (const v::DevResourceRequirements* r = list; r && i < 4096; r = r->next, ++i)
    if (r->ginSignalCount > 0 || r->ginCounterCount > 0) return true;
  return false;
}

// Whether versioned requirements (2.29's or 2.30's) ask for GIN resources:
// signals, counters, or barriers where they imply GIN (2.29.4 on).
bool asks_gin_resources(const v30::DevCommRequirements& r, bool barriers_imply_gin) {
  return r.ginSignalCount > 0 || r.ginCounterCount > 0 || list_wants_gin(r.resourceRequirementsList) ||
         (barriers_imply_gin && (r.barrierCount > 0 || r.railGinBarrierCount > 0 || r.worldGinBarrierCount > 0));
}

Status resources_without_connection() {
  return BRAID_ERROR(ncclInvalidArgument,
                     "ncclDevCommCreate: GIN resources (signals, counters or barriers) requested with "
                     "ginConnectionType NCCL_GIN_CONNECTION_NONE (as NCCL, refused)");
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
  // A versioned struct is copied as far as its size says and 2.31's goes
  // (each release's is a prefix of the next one's; create refuses a size
  // not its version's).
  size_t size = sizeof(v::DevCommRequirements);
  if (versioned) {
    uint64_t told = 0;
    std::memcpy(&told, bytes, sizeof(told));
    size = std::clamp<uint64_t>(told, 16, sizeof(v31::DevCommRequirements));
  }
  top_.assign(sizeof(v31::DevCommRequirements), 0);
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

Status DeviceComms::refuse_unservable(bool multimem, bool gin) const {
  if (multimem)
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: multimem (lsaMultimem, team requirements) needs NVLink "
                       "SHARP, which braid does not have");
  if (gin && !comm_->lsa->memory().gin_ops())
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: GPU-initiated networking (GIN signals, counters or barriers, a GIN "
                       "connection, or ranks on several hosts) is not served on the {} backend here (on CUDA its "
                       "proxy is built but has not run on a GPU yet: BRAID_CUDA_GIN=1 enables it)",
                       comm_->lsa->memory().name());
  return Status::ok();
}

Status DeviceComms::create(const void* reqs_bytes, void* out) {
  uint32_t magic = 0;
  std::memcpy(&magic, static_cast<const char*>(reqs_bytes) + 8, sizeof(magic));
  if (magic != kVersionedMagic) {  // 2.28.9's unversioned requirements
    v::DevComm dev{};
    BRAID_TRY(create_v22809(*static_cast<const v::DevCommRequirements*>(reqs_bytes), &dev));
    std::memcpy(out, &dev, sizeof(dev));
    return Status::ok();
  }
  // Versioned requirements: each release's struct is a prefix of the
  // next one's, and, as NCCL does, braid lays an older one over 2.31's
  // defaults.  The size says which layout a kernel reads: its version
  // comes from the <nccl.h> it was built with, which may be braid's
  // (2.32.6) over 2.30's or 2.31's device headers.
  v31::DevCommRequirements full = v31::defaults();
  v30::DevCommRequirements& reqs = full.v23000;
  std::memcpy(&reqs, reqs_bytes, offsetof(v30::DevCommRequirements, resourceRequirementsList));
  const bool narrow = reqs.version >= v22900::kNarrowFirst && reqs.version <= v22900::kNarrowLast;
  const bool wide = reqs.version >= v22900::kWideFirst && reqs.version <= v22900::kWideLast;
  const bool v229 = narrow || wide;
  const bool v231 = !v229 && reqs.version >= NCCL_VERSION(2, 31, 0) && reqs.size == sizeof(full);
  const size_t want = narrow ? v22900::kRequirementsBytes
                      : wide ? v22900::kWideRequirementsBytes
                      : v231 ? sizeof(full)
                             : sizeof(reqs);
  if ((!v229 && reqs.version < NCCL_VERSION(2, 30, 0)) || reqs.size != want) {
    const bool later = reqs.version >= NCCL_VERSION(2, 31, 0);
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: requirements of {} bytes from device headers of NCCL {}: braid serves "
                       "the device ABIs NCCL serves, 2.28.9, 2.29.2-2.29.3, 2.29.5-2.29.7, 2.30, 2.31 and "
                       "2.32.0-2.32.3, whose requirements for this version are {} bytes{}",
                       reqs.size, nccl_version_name(reqs.version),
                       later ? fmt::format("{} (2.30's headers) or {}", sizeof(reqs), sizeof(full))
                             : std::to_string(want),
                       reqs.size > sizeof(full) ? "; a later ABI (2.32.4's on) is not served: rebuild the kernel "
                                                  "against 2.31's or 2.32.3's device headers"
                                                : "");
  }
  std::memcpy(&full, reqs_bytes, want);
  if (v229) return create_v22900(reqs, out);
  // 2.30.3 and 2.30.4 have no ginStrongSignalsRequired and
  // ginVaSignalsRequired (bytes 92 and 93 are their padding): their kernels
  // may use both kinds of signal.
  if (!v231 && reqs.version < kV23005) reqs.ginStrongSignalsRequired = reqs.ginVaSignalsRequired = true;
  v31::DevComm dev{};
  BRAID_TRY(create_v23100(full, v231, &dev));
  if (v231) {
    std::memcpy(out, &dev, sizeof(dev));
  } else {
    const bool rail = !reqs.ginForceEnable && reqs.ginConnectionType == v30::kGinConnectionRail;
    const v30::DevComm old = v31::to_v23000(dev, rail);
    std::memcpy(out, &old, sizeof(old));
  }
  return Status::ok();
}

// 2.29's clients get LSA, as NCCL's compatibility layer serves them
// (src/devapi/abi_v22900.h): GIN is refused, in 2.29.2-2.29.3 barrierCount
// means LSA barriers (it implied GIN only from 2.29.4 on), and the devComm
// is 2.28.9's, widened from 2.29.5.
Status DeviceComms::create_v22900(const v30::DevCommRequirements& reqs, void* out) {
  const bool wide = reqs.version >= v22900::kWideFirst;
  const bool resources = asks_gin_resources(reqs, wide);
  const bool connect = reqs.ginForceEnable || (wide && reqs.ginConnectionType != v30::kGinConnectionNone);
  Status refused = Status::ok();
  if ((resources && connect) || (!wide && resources))
    refused = BRAID_ERROR(ncclInvalidUsage,
                          "ncclDevCommCreate: GPU-initiated networking for a kernel built against NCCL {}'s "
                          "device headers, which neither braid nor NCCL's compatibility layer serves: rebuild it "
                          "against 2.30's (or 2.28.9's) headers; LSA windows, barriers and LL AlltoAll are served",
                          nccl_version_name(reqs.version));
  else if (resources)
    refused = resources_without_connection();
  v::DevCommRequirements lsa{};
  lsa.resourceRequirementsList = reqs.resourceRequirementsList;
  lsa.teamRequirementsList = reqs.teamRequirementsList;
  lsa.lsaMultimem = reqs.lsaMultimem;
  lsa.lsaBarrierCount = wide ? reqs.lsaBarrierCount : std::max(reqs.lsaBarrierCount, reqs.barrierCount);
  v22900::DevCommWide dev{};
  BRAID_TRY(create_v22809(lsa, &dev.v22809, std::move(refused), /*lsa_only=*/true));
  dev.abortFlag = liveness_->device_flag();  // made with the devComm (make_liveness; see create_v23100)
  std::memcpy(out, &dev, wide ? sizeof(dev) : sizeof(dev.v22809));
  return Status::ok();
}

Status DeviceComms::create_v22809(const v::DevCommRequirements& reqs, v::DevComm* out, Status refused,
                                  bool lsa_only) {
  LsaSpace& space = symmetric_memory(comm_);
  const bool gin = !lsa_only && wants_gin(reqs, space.lsa(), comm_->nranks);
  // ginContextCount is a hint: 1 to 4 contexts, each its own struct (the
  // device wraps a context index into those there are).
  const int contexts = gin ? std::clamp(reqs.ginContextCount, 1, v::kMaxGinContexts) : 0;
  v::DevComm dev{};
  devapi::ResourceLayout layout;
  Status local = refused.is_ok() ? refuse_unservable(reqs.lsaMultimem || reqs.teamRequirementsList, gin)
                                 : std::move(refused);
  if (local.is_ok())
    local = devapi::layout_resources(reqs, devapi::lsa_team(space.lsa()), contexts, space.memory().granularity(),
                                     &dev.lsaBarrier, &dev.railGinBarrier, &layout);
  const DeviceGinShape shape{devapi::GfdFormat::kV1, uint32_t(std::max(contexts, 1)),
                             std::max<uint32_t>(layout.signals, 1), std::max<uint32_t>(layout.counters, 1),
                             gin_queue_size()};
  Made made;
  BRAID_TRY(make(std::move(local), layout, gin ? &shape : nullptr, offsetof(v::DevComm, ginHandles), &made));
  fill_common(made, &dev);
  if (gin) {
    dev.ginContextCount = uint8_t(contexts);
    for (int c = 0; c < contexts; ++c) {
      dev.ginTypes[c] = v::kGinTypeProxy;
      dev.ginHandles[c] = made.gin->device_context(uint32_t(c));
    }
    dev.ginSignalShadows = made.shadows;
  }
  dev.ginSignalCount = int(layout.signals);
  dev.ginCounterCount = int(layout.counters);
  *out = dev;
  return Status::ok();
}

// 2.30's GIN is on when a connection is asked for (ginForceEnable means a
// full one); its resources without one are NCCL's invalid argument.  2.31
// added a connection type (CUSTOM_STRIDE), which 2.30's kernels cannot ask
// for.
Status DeviceComms::check_v23000_gin(const v30::DevCommRequirements& reqs, bool gin, bool v231) const {
  if (!gin && asks_gin_resources(reqs, true)) return resources_without_connection();
  const int last_type = v231 ? v31::kGinConnectionCustomStride : v30::kGinConnectionRail;
  if (reqs.ginConnectionType < v30::kGinConnectionNone || reqs.ginConnectionType > last_type)
    return BRAID_ERROR(ncclInvalidArgument, "ncclDevCommCreate: ginConnectionType {} is not NONE, FULL, RAIL{}",
                       int(reqs.ginConnectionType), v231 ? " or CUSTOM_STRIDE" : " (2.30's headers)");
  const devapi::GinMemoryOps* ops = comm_->lsa->memory().gin_ops();
  if (gin && ops && reqs.ginVaSignalsRequired && !ops->adds_in_windows())
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: GIN VA signals are required (ginVaSignalsRequired, true in NCCL's "
                       "initializer), and braid's proxy cannot add to window memory on the {} backend (as NCCL "
                       "refuses a GIN plugin without them); {}",
                       comm_->lsa->memory().name(),
                       !v231 && reqs.version < kV23005
                           ? "a kernel built against device headers before 2.30.5 cannot say it uses none: rebuild "
                             "it against 2.30.7's and set ginVaSignalsRequired = false"
                           : "set ginVaSignalsRequired = false");
  if (reqs.worldGinBarrierCount > 0 && reqs.ginConnectionType == v30::kGinConnectionRail)
    return BRAID_ERROR(ncclInvalidArgument,
                       "ncclDevCommCreate: a world GIN barrier with NCCL_GIN_CONNECTION_RAIL (as NCCL, refused)");
  if (reqs.ginTrafficClass != NCCL_CONFIG_UNDEF_INT && (reqs.ginTrafficClass < 0 || reqs.ginTrafficClass > 255))
    return BRAID_ERROR(ncclInvalidArgument, "ncclDevCommCreate: ginTrafficClass {} (expected 0..255)",
                       reqs.ginTrafficClass);
  return Status::ok();
}

// What 2.31 added to the requirements: braid has no Compute Fabric
// Transport (cftCaps must be NONE; cftBarrierCount is then ignored, as
// NCCL ignores it), its one GIN backend is the proxy (ginType NONE means
// any), and a custom stride must name a team of whole rails inside one LSA
// team's span (NCCL: at most the rail's stride; braid also wants it to
// divide the world, or the dense barrier's team would not be one).
Status DeviceComms::check_v23100(const v31::DevCommRequirements& reqs, bool gin) const {
  if (reqs.cftCaps != 0)
    return BRAID_ERROR(ncclInvalidArgument,
                       "ncclDevCommCreate: cftCaps {:#x} asks for the Compute Fabric Transport, which braid does "
                       "not have (as NCCL without it, refused)",
                       reqs.cftCaps);
  if (gin && reqs.ginType != v31::kGinTypeNone && reqs.ginType != v::kGinTypeProxy)
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: ginType {} asks for a GIN backend braid does not have: its GIN is of the "
                       "PROXY type ({}), which NCCL_GIN_TYPE_NONE or NCCL_GIN_TYPE_PROXY ask for",
                       reqs.ginType, int(v::kGinTypeProxy));
  // 2.32.4 lengthened the requirements: 120 bytes that say 2.32.4 or later
  // come from 2.31's or 2.32.0-2.32.3's device headers built with a later
  // nccl.h (braid's says 2.32.6), and those two read GIN contexts of
  // different sizes (72 and 80 bytes).
  if (gin && reqs.v23000.version > v32::kLast)
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: GIN for 120-byte requirements that say NCCL {}, whose own are longer: "
                       "the kernel's device headers are 2.31's or 2.32.0-2.32.3's, with another release's nccl.h, "
                       "and their GIN contexts differ; build it with the nccl.h of its device headers' release (LSA "
                       "is served as it is)",
                       nccl_version_name(reqs.v23000.version));
  const int stride = reqs.ginCustomStride, lsa = comm_->lsa->lsa().size;
  if (reqs.v23000.ginConnectionType == v31::kGinConnectionCustomStride &&
      (stride < 1 || stride > lsa || comm_->nranks % stride != 0))
    return BRAID_ERROR(ncclInvalidUsage,
                       "ncclDevCommCreate: ginCustomStride {} for NCCL_GIN_CONNECTION_CUSTOM_STRIDE must be from 1 to "
                       "the LSA team's size ({}) and divide the {} ranks",
                       stride, lsa, comm_->nranks);
  return Status::ok();
}

// The devComm of 2.31's layout, for 2.31's requirements (`v231`) and for
// 2.30's laid over 2.31's defaults, which create() then gives 2.30's
// layout, as NCCL serves 2.30's kernels.
Status DeviceComms::create_v23100(const v31::DevCommRequirements& asked, bool v231, v31::DevComm* out) {
  LsaSpace& space = symmetric_memory(comm_);
  v31::DevCommRequirements full = asked;
  v30::DevCommRequirements& reqs = full.v23000;
  if (reqs.ginForceEnable) reqs.ginConnectionType = v30::kGinConnectionFull;  // as NCCL (deprecated flag)
  const bool gin = reqs.ginConnectionType != v30::kGinConnectionNone;
  // ginContextCount is a hint (NCCL's words), but NCCL makes as many as
  // asked and clients index them: at least one, at most the layout's bound.
  const int contexts = gin ? std::clamp(reqs.ginContextCount, 1, devapi::kMaxGinContextsV23000) : 0;
  if (gin && contexts != reqs.ginContextCount)
    BRAID_INFO(kInit, "ncclDevCommCreate: {} GIN contexts asked for, {} made", reqs.ginContextCount, contexts);
  const devapi::LsaShape& lsa = space.lsa();
  devapi::DevCommBarriers barriers{};
  devapi::ResourceLayout layout;
  Status local = refuse_unservable(reqs.lsaMultimem || reqs.teamRequirementsList, gin);
  if (local.is_ok()) local = check_v23000_gin(reqs, gin, v231);
  if (local.is_ok()) local = check_v23100(full, gin);
  // The team the GIN barriers span: every rank, or a rail, or the ranks a
  // custom stride apart (braid's one connection reaches every rank, so the
  // GIN ranks are the world's: a connection stride of 1).
  const int stride = reqs.ginConnectionType == v31::kGinConnectionCustomStride ? full.ginCustomStride
                     : reqs.ginConnectionType == v30::kGinConnectionRail     ? lsa.size
                                                                             : 1;
  if (local.is_ok()) {
    const devapi::DevCommTeams teams{devapi::world_team(comm_->nranks, comm_->rank), devapi::lsa_team(lsa),
                                     devapi::rail_team(comm_->nranks, comm_->rank, lsa),
                                     devapi::Team{comm_->nranks / stride, comm_->rank / stride, stride}};
    local = devapi::layout_resources_v23000(reqs, teams, contexts, space.memory().granularity(), &barriers, &layout);
  }
  // Kernels of 2.30.3-2.30.4 read 48-byte contexts, 2.32's 80-byte ones;
  // 2.30.3-2.30.4's flush, and 2.31's flush with a timeout, post no flush
  // descriptor and wait only for a get's slot to be consumed.
  const bool early = !v231 && reqs.version < kV23005;
  const bool v232 = v231 && reqs.version >= v32::kFirst;
  const DeviceGinShape shape{devapi::GfdFormat::kV2,
                             uint32_t(std::max(contexts, 1)),
                             std::max<uint32_t>(layout.signals, 1),
                             std::max<uint32_t>(layout.counters, 1),
                             gin_queue_size(reqs.ginQueueDepth),
                             early ? 1 : v232 ? v32::kProxyContextVersion : 2,
                             early || v231,
                             reqs.ginTrafficClass == NCCL_CONFIG_UNDEF_INT ? -1 : reqs.ginTrafficClass};
  Made made;
  BRAID_TRY(make(std::move(local), layout, gin ? &shape : nullptr,
                 v231 ? offsetof(v31::DevComm, ginHandles) : offsetof(v30::DevComm, ginHandles), &made));
  v::DevComm common{};
  fill_common(made, &common);
  v31::DevComm dev{};
  dev.magic = kVersionedMagic;
  dev.version = reqs.version;
  dev.rank = common.rank;
  dev.nRanks = common.nRanks;
  dev.nRanks_rcp32 = common.nRanks_rcp32;
  dev.lsaRank = common.lsaRank;
  dev.lsaSize = common.lsaSize;
  dev.lsaSize_rcp32 = common.lsaSize_rcp32;
  dev.windowTable = common.windowTable;
  dev.resourceWindow = common.resourceWindow;
  dev.resourceWindow_inlined = {common.resourceWindow_inlined.lsaFlatBase, common.resourceWindow_inlined.stride4G,
                                common.resourceWindow_inlined.mcOffset4K};
  dev.worldGinBarrier = barriers.world;
  dev.railGinBarrier = barriers.rail;
  dev.lsaBarrier = barriers.lsa;
  dev.hybridDenseGinBarrier = barriers.hybrid_dense;
  dev.hybridRailGinBarrier = barriers.hybrid_rail;
  dev.hybridLsaBarrier = barriers.hybrid_lsa;
  if (gin) {
    // One connection (braid's proxy reaches every rank), its contexts an
    // array, on backend 0 (the windows' ginWinsDefaultBackend).
    dev.ginConnectionCount = 1;
    dev.backendIndex = 0;
    dev.ginNetDeviceTypes[0] = v::kGinTypeProxy;
    dev.ginHandles[0] = made.gin->device_context();  // the array of contexts
    dev.ginSignalShadows = made.shadows;
    dev.ginContextCount = uint32_t(contexts);
    dev.ginConnectionStride = 1;
    dev.ginConnectionStride_rcp32 = v::div_rcp32(1);
    dev.ginContextStride = stride;
    dev.ginStrongLegacySignals = reqs.ginStrongSignalsRequired;  // braid's signals are all strong
    dev.ginSignalCount = int(layout.signals);
    dev.ginCounterCount = int(layout.counters);
  }
  // No Compute Fabric Transport: every rank a CFT team of its own, as NCCL
  // fills these without one.
  dev.cftRank = dev.cftMultimemRank = 0;
  dev.cftSize = dev.cftMultimemSize = 1;
  dev.cftMultimemSize_rcp32 = v::div_rcp32(1);
  dev.ucLeId = dev.mcLeId = v31::kLeIdInvalid;
  // NCCL leaves abortFlag NULL in the devComms users create; braid's is
  // raised when the communicator cannot complete (device_liveness.h).
  dev.abortFlag = liveness_->device_flag();
  *out = dev;
  return Status::ok();
}

// What every devComm names: its ranks, the LSA team, the window table and
// the resource window.
void DeviceComms::fill_common(const Made& made, v::DevComm* dev) const {
  const devapi::LsaShape& lsa = comm_->lsa->lsa();
  dev->rank = comm_->rank;
  dev->nRanks = comm_->nranks;
  dev->nRanks_rcp32 = v::div_rcp32(uint32_t(comm_->nranks));
  dev->lsaRank = lsa.rank;
  dev->lsaSize = lsa.size;
  dev->lsaSize_rcp32 = v::div_rcp32(uint32_t(lsa.size));
  dev->windowTable = static_cast<v::DevCommWindowTable*>(made.window_table);
  dev->resourceWindow = made.resource_window;
  dev->resourceWindow_inlined = made.resource_image;
}

Status DeviceComms::make(Status local, const devapi::ResourceLayout& layout, const DeviceGinShape* gin,
                         size_t gin_handle_at, Made* out) {
  LsaSpace& space = *comm_->lsa;
  DeviceApiMemory& memory = space.memory();
  // Everything local first, then one agreement, so that a rank that cannot
  // serve the request does not leave the others waiting in the collective.
  auto created = std::make_unique<Created>();
  created->memory = &memory;
  created->gin_handle_at = gin_handle_at;
  if (local.is_ok() && layout.bytes) local = memory.alloc_shareable(layout.bytes, &created->resources);
  if (local.is_ok() && layout.bytes) local = memory.zero(created->resources, layout.bytes);
  if (local.is_ok() && gin) local = check_gin_ids(gin->format, gin->signals, gin->counters);
  if (local.is_ok()) local = make_liveness();
  BRAID_TRY(comm_->bootstrap->agree(std::move(local), "ncclDevCommCreate"));
  // From here every rank must make every exchange (the resource window's,
  // GIN's): a rank that fails midway leaves its peers waiting in one, so
  // such a failure breaks the communicator (break_comm).
  Made made;
  bool in_step = false;
  Status s = make_shared(layout, gin, created.get(), &made, &in_step);
  if (!s.is_ok()) {
    if (!in_step) break_comm(comm_, s);
    return s;
  }
  *out = made;
  std::lock_guard<std::mutex> lock(mutex_);
  live_.push_back(std::move(created));
  return Status::ok();
}

// The collective part of make: the resource window, GIN, and an agreement.
// *in_step: a failure every rank met alike, the communicator intact.
Status DeviceComms::make_shared(const devapi::ResourceLayout& layout, const DeviceGinShape* gin, Created* created,
                                Made* made, bool* in_step) {
  LsaSpace& space = *comm_->lsa;
  if (layout.bytes) {
    BRAID_TRY(space.add_window(created->resources, layout.bytes, created, NCCL_WIN_COLL_SYMMETRIC, false,
                               &created->window));
    *in_step = !created->window->symmetric();  // every rank sees it alike
    if (*in_step)
      return BRAID_ERROR(ncclInvalidUsage, "ncclDevCommCreate: the resource buffer could not be mapped by every LSA "
                         "peer (see the INFO log of ncclCommWindowRegister)");
    made->resource_window = static_cast<v::WindowVidmem*>(created->window->device());
    made->resource_image = created->window->image();
  }
  // GIN's own steps agree as they go; what fails after them here (its
  // queues, structs or proxy) is said in the agreement below.
  Status made_gin = Status::ok();
  if (gin) {
    TransportContext transport = comm_->setup->ctx;
    if (gin->traffic_class >= 0) transport.traffic_class = gin->traffic_class;
    made_gin = DeviceGin::create(space, *comm_->bootstrap, transport, *gin, gin_progress(), *liveness_,
                                 &created->gin);
    if (made_gin.is_ok()) made->gin = created->gin.get();
    // Each context's shadow of every signal, at the buffer's tail (own
    // copy); no buffer when there are no signals to shadow.
    if (made_gin.is_ok() && created->window)
      made->shadows =
          reinterpret_cast<uint64_t*>(created->window->lsa_pointer(space.lsa().rank, layout.shadows_offset));
  }
  // Agreed once more at the end: no rank returns (and launches a kernel
  // that waits for its peers, in barriers with no timeout) while a thread
  // rank of its process still allocates above (cudaMalloc and
  // cudaHostRegister may wait for the device); and a rank that failed here
  // fails them all, saying why.  Even then the communicator breaks: a GIN
  // that failed midway may have left a peer in one of its exchanges, and
  // this agreement's 8 bytes may have been read there, as one of GIN's
  // agreements, so that the verdict was not met in step.
  return comm_->bootstrap->agree(made_gin.is_ok() ? space.window_table(&made->window_table) : std::move(made_gin),
                                 "ncclDevCommCreate");
}

Status DeviceComms::destroy(const void* dev_bytes) {
  // Any ABI's devComm: 2.30's and 2.31's start with NCCL_API_MAGIC, and
  // have the rank and resource window at the same offsets; 2.28.9's and
  // 2.29's start with a rank, which is never that.
  const char* bytes = static_cast<const char*>(dev_bytes);
  uint32_t magic = 0;
  std::memcpy(&magic, bytes, sizeof(magic));
  int rank = 0, nranks = 0;
  void* resources = nullptr;
  if (magic == kVersionedMagic) {
    const auto& d = *static_cast<const v31::DevComm*>(dev_bytes);
    static_assert(offsetof(v31::DevComm, resourceWindow) == offsetof(v30::DevComm, resourceWindow));
    rank = d.rank, nranks = d.nRanks, resources = d.resourceWindow;
  } else {
    const auto& d = *static_cast<const v::DevComm*>(dev_bytes);
    rank = d.rank, nranks = d.nRanks, resources = d.resourceWindow;
  }
  if (rank != comm_->rank || nranks != comm_->nranks)
    return BRAID_ERROR(ncclInvalidArgument,
                       "ncclDevCommDestroy: devComm of rank {} of {} is not this "
                       "communicator's (rank {} of {})",
                       rank, nranks, comm_->rank, comm_->nranks);
  // A devComm is known by its resource window and GIN contexts (both null
  // for one that needed neither: any such one will do), the contexts read
  // where the ABI it was made for has them.  Every ABI's devComm is 200
  // bytes or more, past every such offset.
  auto is = [&](const std::unique_ptr<Created>& c) {
    void* gin = nullptr;
    std::memcpy(&gin, bytes + c->gin_handle_at, sizeof(gin));
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
                         "window {} and the GIN contexts this one names (destroyed already?)",
                         resources);
    gone = std::move(*it);
    live_.erase(it);
  }
  gone.reset();  // outside the lock (it joins a proxy thread), and before the liveness its GIN reports to
  retire_idle_liveness();
  return Status::ok();
}

// With no devComm left no kernel waits for the LSA peers: their watch ends,
// so that a peer leaving normally (after its own ncclCommDestroy, which
// does not wait for this rank) is no fault; a fault seen before stays
// reported.  The next devComm watches them again.
void DeviceComms::retire_idle_liveness() {
  std::unique_ptr<DeviceLiveness> retired;  // declared first: released (its watch thread joined) after the lock
  std::lock_guard<std::mutex> lock(mutex_);
  if (!live_.empty() || !liveness_) return;
  if (Status s = liveness_->reason(); !s.is_ok() && retired_fault_.is_ok()) retired_fault_ = s;
  retired = std::move(liveness_);
}

// On the host backend the posters are the ranks' threads: where they and
// the progress threads outnumber the cores, an idle progress thread yields
// at once instead of spinning on a core a poster needs.
devapi::GinProgress& DeviceComms::gin_progress() {
  if (!progress_) {
    const bool crowded = host_oversubscribed(2 * comm_->lsa->lsa().size);
    progress_ = std::make_unique<devapi::GinProgress>(crowded ? 0 : devapi::GinProxyOptions{}.idle_spins);
  }
  return *progress_;
}

Status DeviceComms::fault() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& c : live_)
    if (c->gin)
      if (Status s = c->gin->fault(); !s.is_ok()) return s;
  if (!retired_fault_.is_ok()) return retired_fault_;
  return liveness_ ? liveness_->reason() : Status::ok();
}

void DeviceComms::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (liveness_) liveness_->stop();
}

// The LSA peers in other processes are the ones whose exit a devComm's
// kernels must hear of (threads of this process cannot exit alone; other
// hosts' ranks are GIN's TCP links' to report).
Status DeviceComms::make_liveness() {
  if (liveness_) return Status::ok();
  const LsaSpace& space = *comm_->lsa;
  const int me = space.world_rank(), first = me - space.lsa().rank;
  std::vector<WatchedProcess> watched;  // the LSA team's other processes
  for (const WatchedProcess& p : PeerProcesses::of(comm_->setup->ctx)->watchable())
    if (p.rank >= first && p.rank < first + space.lsa().size) watched.push_back(p);
  std::unique_ptr<DeviceLiveness> made;
  BRAID_TRY(DeviceLiveness::create(space.memory(), watched, &made));
  std::lock_guard<std::mutex> lock(mutex_);
  liveness_ = std::move(made);
  return Status::ok();
}

}  // namespace braid

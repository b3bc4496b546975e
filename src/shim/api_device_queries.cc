// Host-side queries NCCL 2.29-2.31 added to its device API
// (nccl_device/core.h): ncclCommQueryProperties and the window pointer
// queries.  braid ships no nccl_device headers; these have NCCL's names,
// signatures and struct layout, so a program built against NVIDIA's
// headers links and runs.
//
// What they say on braid: a communicator's rank, size and device; device
// API support on a GPU whose memory braid can share (cuMem), as
// ncclDevCommCreate serves 2.30 and 2.31 clients there; no multimem; GIN of
// the proxy type where braid's proxy serves it (memory the host reaches:
// the host backend), on one connection that reaches every rank; host
// one-sided RMA where the backend has it.  A peer's window pointer is its
// copy in the flat LSA range where the window is symmetric; otherwise
// where the backend maps it into this process (the host backend: ranks
// that are threads of one process, src/exec/host/host_windows.h).
#include <cstring>
#include <mutex>
#include <vector>

#include "src/base/nccl_version.h"
#include "src/devapi/abi_v23100.h"
#include "src/devapi/abi_v23200.h"
#include "src/devapi/teams.h"
#include "src/shim/api.h"

using namespace braid;

// nccl_device/host.h's ncclCommProperties (2.32.3), member for member.
// 2.29's ends after ginType (40 bytes); 2.30 appended nLsaTeams,
// hostRmaSupport and railedGinType (56 bytes); 2.31 commHash to
// devCommRuntimeVersionSize (144); 2.32 the CFT flags (152).
typedef enum { kGinNone = 0, kGinProxy = 2 } braid_gin_type_t;  // ncclGinType_t
struct ncclCommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  braid_gin_type_t ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  braid_gin_type_t railedGinType;
  uint64_t commHash;
  int ginMinStride;               // the smallest stride of ranks GIN connects
  int ginConnectionType;          // ncclGinConnectionType_t: NONE 0, FULL 1, RAIL 2
  bool ginSupport[64];            // per ncclGinType_t, whether a devComm may ask for it
  size_t devCommRuntimeVersionSize;  // the devComm a useRuntimeVersion client gets
  bool cftSupport;                   // Compute Fabric Transport: braid has none
  bool cftMulticastSupport;
  bool cftCountedSupport;
};
constexpr size_t kProperties230 = offsetof(ncclCommProperties, commHash);
static_assert(offsetof(ncclCommProperties, ginType) == 36 && offsetof(ncclCommProperties, nLsaTeams) == 40 &&
              offsetof(ncclCommProperties, railedGinType) == 48 && kProperties230 == 56 &&
              offsetof(ncclCommProperties, ginSupport) == 72 &&
              offsetof(ncclCommProperties, devCommRuntimeVersionSize) == 136 &&
              offsetof(ncclCommProperties, cftSupport) == 144 && sizeof(ncclCommProperties) == 152,
              "NCCL 2.32.3's ncclCommProperties_t");
struct ncclMultimemHandle {
  void* mcBasePtr;
};

namespace {

// This rank's LSA team as NCCL shapes it (src/devapi/teams.h): its first
// world rank and its size.
void lsa_span(const ncclComm* comm, int* first, int* size) {
  devapi::LsaShape lsa;
  if (!lsa_shape_of(comm->peers, comm->rank, &lsa).is_ok()) lsa = devapi::LsaShape{};  // a live comm always has one
  *first = comm->rank - lsa.rank;
  *size = lsa.size;
}

Status query_properties(ncclComm* comm, ncclCommProperties* user) {
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (!user) return BRAID_ERROR(ncclInvalidArgument, "props is NULL");
  const auto [size, magic, version] = versioned_header(user);
  constexpr size_t k229 = offsetof(ncclCommProperties, nLsaTeams);
  if (magic != NCCL_API_MAGIC)
    return BRAID_ERROR(ncclInvalidArgument, "props was not initialised with NCCL_COMM_PROPERTIES_INITIALIZER (bad "
                       "magic {:#x})", magic);
  if (size < k229 || version < NCCL_VERSION(2, 29, 0))
    return BRAID_ERROR(ncclInvalidArgument, "props of size {} and version {} is not an ncclCommProperties_t (2.29's "
                       "is {} bytes)", size, version, k229);
  BRAID_TRY(wait_initialized(comm));  // a non-blocking init's peers are known once it is done
  int lsa_first = 0, lsa_size = 1;
  lsa_span(comm, &lsa_first, &lsa_size);
  ncclCommProperties p{};
  p.size = size;
  p.magic = magic;
  p.version = version;
  p.rank = comm->rank;
  p.nRanks = comm->nranks;
  p.cudaDev = comm->cuda_device;  // -1 on the host backend
  p.nvmlDev = -1;                 // braid does not use NVML
  p.nLsaTeams = comm->nranks / lsa_size;
  p.hostRmaSupport = comm->backend && comm->backend->has_rma();
  // GPU kernels on NCCL 2.30's device API: devComms with symmetric memory
  // on a GPU (src/runtime/device_comm.h).  The host backend serves devComms
  // to CPU code only, so it does not say yes to a kernel.
  p.deviceApiSupport = comm->cuda_device >= 0 && comm->backend && comm->backend->device_api_memory().can_share();
  // The GIN devComms get (src/runtime/device_comm.h): braid's proxy, full
  // and railed alike (a rail request is served by the full connection).
  // 2.29's clients get no GIN (src/runtime/device_comm.h), nor, on several
  // hosts, the device API, as NCCL's compatibility layer answers them.
  // (2.29.2's ginType is a byte at 34, braid's padding: 0, NONE.)
  const bool v229 = version < NCCL_VERSION(2, 30, 0);
  const bool gin = !v229 && comm->backend && comm->backend->device_api_memory().gin_ops();
  p.ginType = p.railedGinType = gin ? kGinProxy : kGinNone;
  if (v229) p.deviceApiSupport = p.deviceApiSupport && lsa_size == comm->nranks;
  // 2.31's members, which NCCL fills for a 2.31 or later client: braid's
  // one GIN connection reaches every rank (FULL, stride 1), of the proxy
  // type, and its devComms are 2.31's (device_comm.h).  2.32's CFT flags
  // stay false: braid has no Compute Fabric Transport.
  if (version >= NCCL_VERSION(2, 31, 0)) {
    p.commHash = comm->comm_hash;
    p.ginConnectionType = gin ? 1 : 0;
    p.ginMinStride = gin ? 1 : lsa_size;
    p.ginSupport[kGinProxy] = gin;
    p.devCommRuntimeVersionSize = sizeof(devapi::v23100::DevComm);
  }
  // A struct past 2.32's 152 bytes, or one past 2.30's that says 2.32.4 or
  // later, is a client of headers whose devComm braid does not write
  // (ncclDevCommCreate refuses 2.32.4's requirements, and GIN to a 2.31 or
  // 2.32.3 kernel built with a later nccl.h): no device API and no GIN.
  if (size > kProperties230 && (size > sizeof(p) || version > devapi::v23200::kLast)) {
    p.deviceApiSupport = false;
    p.ginType = p.railedGinType = kGinNone;
    p.ginConnectionType = 0;
    p.ginSupport[kGinProxy] = false;
    // Its program may stop on that answer with a message of its own: say why once.
    static std::once_flag said;
    std::call_once(said, [&] {
      BRAID_WARN("ncclCommQueryProperties: a client of NCCL {}'s device headers ({}-byte properties) is told "
                 "there is no device API: braid serves kernels built against 2.28.9's, 2.29's, 2.30's, 2.31's and "
                 "2.32.0-2.32.3's, each with its own release's nccl.h (rebuild against 2.32.3's)",
                 nccl_version_name(version), size);
    });
  }
  // Only the members the caller's struct has.
  std::memcpy(user, &p, std::min(size, sizeof(p)));
  return Status::ok();
}

Status window_of(ncclWindow_t win, ncclComm** comm) {
  if (!win) return BRAID_ERROR(ncclInvalidArgument, "window is NULL");
  ncclComm* c = window_owner(win);
  if (!c || !comm_is_live(c) || !c->windows.count(win))
    return BRAID_ERROR(ncclInvalidArgument, "window {} is not a registered window of a live communicator",
                       static_cast<void*>(win));
  *comm = c;
  return Status::ok();
}

Status peer_pointer(ncclWindow_t win, size_t offset, int peer, void** out) {
  if (!out) return BRAID_ERROR(ncclInvalidArgument, "outPtr is NULL");
  *out = nullptr;
  ncclComm* comm = nullptr;
  BRAID_TRY(window_of(win, &comm));
  CommUse use(comm);
  BRAID_TRY(check_usable(use, comm));
  if (peer < 0 || peer >= comm->nranks)
    return BRAID_ERROR(ncclInvalidArgument, "peer {} out of range [0, {})", peer, comm->nranks);
  const Window& w = *comm->windows.at(win);
  if (offset > w.ranks[size_t(peer)].size)
    return BRAID_ERROR(ncclInvalidArgument, "offset {} is past rank {}'s part of the window ({} bytes)", offset, peer,
                       w.ranks[size_t(peer)].size);
  // A symmetric window's LSA peers are in the flat range, on any backend:
  // the address NCCL's device code computes (src/runtime/lsa_space.h).
  const int lsa_first = comm->rank - comm->lsa->lsa().rank;
  if (w.device->symmetric() && peer >= lsa_first && peer < lsa_first + comm->lsa->lsa().size) {
    *out = w.device->lsa_pointer(peer - lsa_first, offset);
    return Status::ok();
  }
  if (peer == comm->rank) {  // its own part: the caller's memory, on any backend
    *out = reinterpret_cast<char*>(w.ranks[size_t(peer)].base) + offset;
    return Status::ok();
  }
  // Elsewhere where the backend maps the peer's part into this process; a
  // peer it does not reach by load and store is NULL with ncclSuccess, as
  // NCCL answers for a peer outside the LSA team (and the device side too).
  return comm->backend->window_peer_pointer(w.seq, peer, offset, out);
}

Status no_multimem(const char* function) {
  return BRAID_ERROR(ncclInvalidUsage, "{}: braid has no NVLink multicast (multimem) memory", function);
}

}  // namespace

BRAID_API ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties* props) {
  return guarded(comm, "ncclCommQueryProperties", [&] { return query_properties(comm, props); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommQueryProperties, (ncclComm_t, ncclCommProperties*))

BRAID_API ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr) {
  return guarded(nullptr, "ncclGetPeerDevicePointer", [&] { return peer_pointer(window, offset, peer, outPtr); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetPeerDevicePointer, (ncclWindow_t, size_t, int, void**))

BRAID_API ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr) {
  return guarded(nullptr, "ncclGetLsaDevicePointer", [&] {
    if (!outPtr) return BRAID_ERROR(ncclInvalidArgument, "outPtr is NULL");
    *outPtr = nullptr;
    ncclComm* comm = nullptr;
    BRAID_TRY(window_of(window, &comm));
    int first = 0, size = 1;
    lsa_span(comm, &first, &size);
    if (lsaRank < 0 || lsaRank >= size)
      return BRAID_ERROR(ncclInvalidArgument, "lsaRank {} out of range [0, {}) (the size of this rank's LSA team)",
                         lsaRank, size);
    return peer_pointer(window, offset, first + lsaRank, outPtr);
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetLsaDevicePointer, (ncclWindow_t, size_t, int, void**))

BRAID_API ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr) {
  (void)window, (void)offset;
  if (outPtr) *outPtr = nullptr;
  return guarded(nullptr, "ncclGetLsaMultimemDevicePointer",
                 [] { return no_multimem("ncclGetLsaMultimemDevicePointer"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetLsaMultimemDevicePointer, (ncclWindow_t, size_t, void**))

BRAID_API ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, ncclMultimemHandle multimem,
                                                    void** outPtr) {
  (void)window, (void)offset, (void)multimem;
  if (outPtr) *outPtr = nullptr;
  return guarded(nullptr, "ncclGetMultimemDevicePointer", [] { return no_multimem("ncclGetMultimemDevicePointer"); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclGetMultimemDevicePointer,
                      (ncclWindow_t, size_t, ncclMultimemHandle, void**))

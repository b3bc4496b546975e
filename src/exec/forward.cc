#include "src/exec/forward.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <sstream>

#include "src/bootstrap/bootstrap.h"
#include "src/base/env.h"
#include "src/base/log.h"

namespace braid {
namespace {

constexpr int kRealIdTag = 0x7e41;  // bootstrap tag of the real unique id

template <typename F>
bool resolve(void* handle, const char* name, F** out) {
  *out = reinterpret_cast<F*>(dlsym(handle, name));
  return *out != nullptr;
}

Status load(RealNccl* lib) {
  lib->path = env_string("BRAID_NCCL_LIB");
  if (lib->path.empty())
    return BRAID_ERROR(ncclInvalidUsage, "BRAID_FORWARD is set but BRAID_NCCL_LIB does not name a real libnccl.so.2");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer runtimes abort on RTLD_DEEPBIND (google/sanitizers#611);
  // sanitizer builds only load the library, they never forward to it.
  lib->handle = dlopen(lib->path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
  lib->handle = dlopen(lib->path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
  if (!lib->handle) return BRAID_ERROR(ncclSystemError, "BRAID_NCCL_LIB={}: {}", lib->path, dlerror());
  bool ok = resolve(lib->handle, "ncclGetVersion", &lib->GetVersion) &&
            resolve(lib->handle, "ncclGetUniqueId", &lib->GetUniqueId) &&
            resolve(lib->handle, "ncclCommInitRank", &lib->CommInitRank) &&
            resolve(lib->handle, "ncclCommDestroy", &lib->CommDestroy) &&
            resolve(lib->handle, "ncclCommAbort", &lib->CommAbort) &&
            resolve(lib->handle, "ncclGetErrorString", &lib->GetErrorString) &&
            resolve(lib->handle, "ncclGetLastError", &lib->GetLastError) &&
            resolve(lib->handle, "ncclAllReduce", &lib->AllReduce) &&
            resolve(lib->handle, "ncclReduceScatter", &lib->ReduceScatter) &&
            resolve(lib->handle, "ncclReduce", &lib->Reduce) &&
            resolve(lib->handle, "ncclAllGather", &lib->AllGather) &&
            resolve(lib->handle, "ncclBroadcast", &lib->Broadcast) &&
            resolve(lib->handle, "ncclAlltoAll", &lib->AlltoAll) &&
            resolve(lib->handle, "ncclGather", &lib->Gather) && resolve(lib->handle, "ncclScatter", &lib->Scatter);
  if (!ok) return BRAID_ERROR(ncclSystemError, "BRAID_NCCL_LIB={} lacks NCCL symbols ({})", lib->path, dlerror());
  // A library whose ncclGetVersion lives in this very object is braid
  // itself (BRAID_NCCL_LIB naming braid's own libnccl.so.2): refuse a loop.
  Dl_info self{}, other{};
  if (dladdr(reinterpret_cast<void*>(&real_nccl), &self) &&
      dladdr(reinterpret_cast<void*>(lib->GetVersion), &other) && self.dli_fbase == other.dli_fbase)
    return BRAID_ERROR(ncclInvalidUsage, "BRAID_NCCL_LIB={} is braid itself, not NVIDIA's NCCL", lib->path);
  int version = 0;
  lib->GetVersion(&version);
  BRAID_INFO(kInit, "forwarding target {}: NCCL version code {}", lib->path, version);
  return Status::ok();
}

Status real_status(const RealNccl& lib, ncclComm_t comm, ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  const char* last = lib.GetLastError(comm);
  return BRAID_ERROR(r, "real NCCL {} failed: {}{}{}", what, lib.GetErrorString(r), last && *last ? ": " : "",
                     last ? last : "");
}

Status make_real_comm(const BackendContext& ctx, const RealNccl& lib, std::unique_ptr<RealComm>* out) {
  const int rank = ctx.comm.rank, nranks = ctx.comm.nranks;
  ncclUniqueId id{};
  if (rank == 0) {
    BRAID_TRY(real_status(lib, nullptr, lib.GetUniqueId(&id), "ncclGetUniqueId"));
    for (int r = 1; r < nranks; ++r) BRAID_TRY(ctx.bootstrap->send(r, kRealIdTag, &id, sizeof id));
  } else {
    BRAID_TRY(ctx.bootstrap->recv(0, kRealIdTag, &id, sizeof id));
  }
  ncclComm_t real = nullptr;
  BRAID_TRY(real_status(lib, nullptr, lib.CommInitRank(&real, nranks, id, rank), "ncclCommInitRank"));
  *out = std::make_unique<RealComm>(real);
  return Status::ok();
}

}  // namespace

Status real_nccl(const RealNccl** out) {
  static RealNccl lib;
  static Status loaded = load(&lib);
  if (!loaded.is_ok()) return Status::error(loaded.code(), loaded.message());
  *out = &lib;
  return Status::ok();
}

RealComm::~RealComm() {
  const RealNccl* lib = nullptr;
  if (comm_ && real_nccl(&lib).is_ok()) lib->CommDestroy(comm_);
}

void RealComm::abort() {
  const RealNccl* lib = nullptr;
  if (comm_ && real_nccl(&lib).is_ok()) lib->CommAbort(comm_);
  comm_ = nullptr;
}

bool forward_wanted(Collective c) {
  std::string list = env_string("BRAID_FORWARD");
  if (list.empty()) return false;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (item == "all" || item == to_string(c)) return true;
  return false;
}

Status Forwarder::run(const CollectiveCall& c, const BackendContext& ctx) {
  const RealNccl* lib = nullptr;
  BRAID_TRY(real_nccl(&lib));
  if (c.op < ncclSum || c.op >= ncclNumOps)
    return BRAID_ERROR(ncclInvalidArgument, "op {} was created by braid; it cannot be forwarded to the real NCCL",
                       int(c.op));
  if (!real_) BRAID_TRY(make_real_comm(ctx, *lib, &real_));
  ncclComm_t real = real_->get();
  BRAID_INFO(kColl, "{} count={} rank {}/{}: forwarded to {}", to_string(c.collective), c.count, ctx.comm.rank,
             ctx.comm.nranks, lib->path);
  ncclResult_t r = ncclInternalError;
  switch (c.collective) {
    case Collective::AllReduce: r = lib->AllReduce(c.sendbuff, c.recvbuff, c.count, c.type, c.op, real, c.stream); break;
    case Collective::ReduceScatter:
      r = lib->ReduceScatter(c.sendbuff, c.recvbuff, c.count, c.type, c.op, real, c.stream);
      break;
    case Collective::Reduce:
      r = lib->Reduce(c.sendbuff, c.recvbuff, c.count, c.type, c.op, c.root, real, c.stream);
      break;
    case Collective::AllGather: r = lib->AllGather(c.sendbuff, c.recvbuff, c.count, c.type, real, c.stream); break;
    case Collective::Broadcast:
      r = lib->Broadcast(c.sendbuff, c.recvbuff, c.count, c.type, c.root, real, c.stream);
      break;
    case Collective::AlltoAll: r = lib->AlltoAll(c.sendbuff, c.recvbuff, c.count, c.type, real, c.stream); break;
    case Collective::Gather: r = lib->Gather(c.sendbuff, c.recvbuff, c.count, c.type, c.root, real, c.stream); break;
    case Collective::Scatter: r = lib->Scatter(c.sendbuff, c.recvbuff, c.count, c.type, c.root, real, c.stream); break;
    case Collective::Custom: break;
  }
  return real_status(*lib, real, r, to_string(c.collective));
}

}  // namespace braid

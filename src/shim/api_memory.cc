// Entry points for memory: ncclMemAlloc/Free, buffer registration and
// symmetric windows.
//
// MemAlloc follows the backend communicators would get (BRAID_BACKEND and
// the visible devices): device memory where that is cuda, shareable host
// memory on the host backend (a memfd other processes can map); either way
// NCCL_WIN_REQUIRED_ALIGNMENT-aligned and remembered, so freeing a foreign
// pointer is an error, not heap corruption.  Registration is bookkeeping
// (the host transports copy through their own staging, so there is nothing
// to pin); the handle names a record the communicator owns.  A window is
// collective: every rank's base and size are gathered into a
// per-communicator table, which the device AlltoAll API will read, and the
// backend makes what it can of it (the host backend maps the others'
// windows where it can, so that calls on window buffers run single-copy:
// src/exec/host/host_windows.h).
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <map>

#include "src/transport/host_memory.h"
#include "src/base/log.h"
#include "src/exec/device_backend.h"
#include "src/runtime/device_comm.h"
#include "src/runtime/group.h"
#include "src/shim/api.h"

using namespace braid;

namespace {

std::mutex alloc_mutex;
std::map<void*, bool>& allocations() {  // pointer -> on the device
  static auto* live = new std::map<void*, bool>;
  return *live;
}

Status window_collective(ncclComm* comm, void* buff, size_t size, ncclWindow_t* win, int flags);

Status window_register(ncclComm* comm, void* buff, size_t size, ncclWindow_t* win, int flags) {
  if (!win) return BRAID_ERROR(ncclInvalidArgument, "win pointer is NULL");
  *win = nullptr;
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (comm->revoked) return BRAID_ERROR(ncclInvalidUsage, "communicator was revoked");
  if (comm->suspended)
    return BRAID_ERROR(ncclInvalidUsage, "communicator is suspended (ncclCommSuspend): call ncclCommResume first");
  if (!buff && size > 0) return BRAID_ERROR(ncclInvalidArgument, "buff is NULL with size {}", size);
  // Strict ordering is what braid's one-sided writes always have (rma.h);
  // GIN-only windows are plain windows here (no GPU-initiated networking).
  constexpr int kKnown = NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING | NCCL_WIN_GIN_ONLY | NCCL_WIN_CFT_COUNTED;
  if (flags < 0 || (flags & ~kKnown))
    return BRAID_ERROR(ncclInvalidArgument, "winFlags {:#x} (expected NCCL_WIN_* flags: COLL_SYMMETRIC, "
                       "STRICT_ORDERING, GIN_ONLY)", flags);
  if (flags & NCCL_WIN_CFT_COUNTED)
    return BRAID_ERROR(ncclInvalidUsage, "winFlags NCCL_WIN_CFT_COUNTED: braid has no Compute Fabric Transport");
  if ((flags & NCCL_WIN_COLL_SYMMETRIC) && reinterpret_cast<uintptr_t>(buff) % NCCL_WIN_REQUIRED_ALIGNMENT != 0)
    return BRAID_ERROR(ncclInvalidArgument, "symmetric window base {} is not {}-byte aligned (use ncclMemAlloc)", buff,
                       NCCL_WIN_REQUIRED_ALIGNMENT);
  // Inside a group the collective part runs at the group's end (*win is
  // set then), as NCCL's does; the group waits for a non-blocking init.
  if (group_active())
    return enqueue(SetupCall{comm, [=] { return window_collective(comm, buff, size, win, flags); }});
  BRAID_TRY(comm_wait_job(comm));
  return window_collective(comm, buff, size, win, flags);
}

// The collective part of a registration: every rank's part gathered, the
// backend told, the device struct made (src/runtime/lsa_space.h).
Status window_collective(ncclComm* comm, void* buff, size_t size, ncclWindow_t* win, int flags) {
  struct Entry {
    uint64_t base, size;
    int64_t flags;
    SharedHandle handle;
  };
  std::vector<Entry> all(comm->nranks);
  all[comm->rank] = {reinterpret_cast<uint64_t>(buff), uint64_t(size), int64_t(flags), host_shared_handle(buff, size)};
  BRAID_TRY(std::move(comm->bootstrap->allgather(all.data(), sizeof(Entry))).context("ncclCommWindowRegister"));
  for (int r = 0; r < comm->nranks; ++r)
    if (all[r].flags != flags)  // every rank sees the same table: all fail alike
      return BRAID_ERROR(ncclInvalidUsage, "ranks disagree on winFlags ({:#x} on rank {}, {:#x} on rank {})", flags,
                         comm->rank, all[r].flags, r);
  auto window = std::make_unique<Window>();
  window->comm = comm;
  window->flags = flags;
  window->seq = comm->windows_registered++;
  WindowInfo info;
  info.seq = window->seq;
  for (const Entry& e : all) {
    window->ranks.push_back({e.base, e.size});
    info.handles.push_back(e.handle);
  }
  info.ranks = window->ranks;
  // The struct NCCL's device code reads, symmetric where every rank's
  // buffer can be (src/runtime/lsa_space.h).
  LsaSpace& space = symmetric_memory(comm);
  BRAID_TRY(space.add_window(buff, size, window.get(), true, &window->device));
  if (window->device->symmetric() && space.lsa().size == comm->nranks)  // every rank mapped here
    for (int r = 0; r < comm->nranks; ++r)
      info.mapped.push_back(r == comm->rank ? static_cast<char*>(buff) : window->device->lsa_pointer(r, 0));
  // Agreed at the end: no rank returns (and launches a kernel that waits
  // for its peers) while a thread rank of its process is still in what
  // registering does on the device, which may wait for it; and a rank whose
  // backend failed fails them all (the others undo their backend's part).
  Status registered = comm->backend->window_registered(info);
  const bool registered_here = registered.is_ok();
  Status agreed = comm->bootstrap->agree(std::move(registered), "ncclCommWindowRegister");
  if (!agreed.is_ok()) {
    if (registered_here) comm->backend->window_deregistered(window->seq);
    return agreed;
  }
  window->info = std::move(info);
  auto handle = static_cast<ncclWindow_t>(window->device->device());
  set_window_owner(handle, comm);
  *win = handle;
  comm->windows.emplace(handle, std::move(window));
  return Status::ok();
}

}  // namespace

BRAID_API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guarded(nullptr, "ncclMemAlloc", [&] {
    if (!ptr) return BRAID_ERROR(ncclInvalidArgument, "ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return BRAID_ERROR(ncclInvalidArgument, "size is 0");
    void* p = nullptr;
    const bool on_device = probe_device_backend().usable;
    static_assert(NCCL_WIN_REQUIRED_ALIGNMENT <= 4096, "host_shared_alloc aligns to pages");
    if (on_device) BRAID_TRY(device_mem_alloc(size, NCCL_WIN_REQUIRED_ALIGNMENT, &p));
    else BRAID_TRY(host_shared_alloc(size, &p));
    std::lock_guard<std::mutex> lock(alloc_mutex);
    allocations()[p] = on_device;
    *ptr = p;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))

BRAID_API ncclResult_t ncclMemFree(void* ptr) {
  return guarded(nullptr, "ncclMemFree", [&] {
    if (!ptr) return Status::ok();
    bool on_device = false;
    {
      std::lock_guard<std::mutex> lock(alloc_mutex);
      auto it = allocations().find(ptr);
      if (it == allocations().end())
        return BRAID_ERROR(ncclInvalidArgument, "{} was not allocated by ncclMemAlloc (or was freed already)", ptr);
      on_device = it->second;
      allocations().erase(it);
    }
    if (on_device) return device_mem_free(ptr);
    if (!host_shared_free(ptr))
      return BRAID_ERROR(ncclInternalError, "{} is not a host allocation of ncclMemAlloc", ptr);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclMemFree, (void* ptr))

BRAID_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guarded(comm, "ncclCommRegister", [&] {
    if (!handle) return BRAID_ERROR(ncclInvalidArgument, "handle pointer is NULL");
    *handle = nullptr;
    BRAID_TRY(check_comm(comm));
    if (!buff) return BRAID_ERROR(ncclInvalidArgument, "buff is NULL");
    if (size == 0) return BRAID_ERROR(ncclInvalidArgument, "size is 0");
    auto reg = std::make_unique<Registration>(Registration{buff, size});
    *handle = reg.get();
    comm->registrations.emplace(reg.get(), std::move(reg));
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommRegister, (const ncclComm_t, void*, size_t, void**))

BRAID_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guarded(comm, "ncclCommDeregister", [&] {
    BRAID_TRY(check_comm(comm));
    if (!handle) return BRAID_ERROR(ncclInvalidArgument, "handle is NULL");
    if (comm->registrations.erase(handle) == 0)
      return BRAID_ERROR(ncclInvalidArgument, "handle {} was not registered on this communicator (or deregistered)",
                         handle);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t, void*))

BRAID_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                              int winFlags) {
  return guarded(comm, "ncclCommWindowRegister", [&] { return window_register(comm, buff, size, win, winFlags); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommWindowRegister, (ncclComm_t, void*, size_t, ncclWindow_t*, int))

// Local: this process unmaps its views of the peers' memory, which stays
// theirs, so no rank has to wait for the others.
BRAID_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guarded(comm, "ncclCommWindowDeregister", [&] {
    BRAID_TRY(check_comm(comm));
    if (!win) return BRAID_ERROR(ncclInvalidArgument, "win is NULL");
    auto it = comm->windows.find(win);
    if (it == comm->windows.end())
      return BRAID_ERROR(ncclInvalidArgument, "window {} was not registered on this communicator (or deregistered)",
                         static_cast<void*>(win));
    if (comm->backend) comm->backend->window_deregistered(it->second->seq);  // none while suspended
    comm->windows.erase(it);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t, ncclWindow_t))

// This rank's buffer of the window (2.29).
BRAID_API ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  return guarded(comm, "ncclWinGetUserPtr", [&] {
    BRAID_TRY(check_comm(comm));
    if (!outUserPtr) return BRAID_ERROR(ncclInvalidArgument, "outUserPtr is NULL");
    *outUserPtr = nullptr;
    if (!win) return BRAID_ERROR(ncclInvalidArgument, "win is NULL");
    if (!comm->windows.count(win))
      return BRAID_ERROR(ncclInvalidArgument, "window {} was not registered on this communicator (or deregistered)",
                         static_cast<void*>(win));
    *outUserPtr = reinterpret_cast<void*>(comm->windows.at(win)->ranks[comm->rank].base);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclWinGetUserPtr, (ncclComm_t, ncclWindow_t, void**))

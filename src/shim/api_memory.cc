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
#include "src/base/env.h"
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

// A rank's part of a window, as every rank learns it.
struct WindowPart {
  uint64_t base, size;
  int64_t flags;
  uint64_t stride_env;  // lsa_stride_from_env(): refused alike, before any step that could leave ranks apart
  SharedHandle handle;
};
Status window_collective(ncclComm* comm, void* buff, size_t size, ncclWindow_t* win, int flags);
Status window_exchanges(ncclComm* comm, void* buff, size_t size, int flags, const std::vector<WindowPart>& parts,
                        ncclWindow_t* win);

Status window_register(ncclComm* comm, void* buff, size_t size, ncclWindow_t* win, int flags) {
  if (!win) return BRAID_ERROR(ncclInvalidArgument, "win pointer is NULL");
  *win = nullptr;
  CommUse use(comm);
  BRAID_TRY(check_comm(use, comm));
  if (comm->revoked) return BRAID_ERROR(ncclInvalidUsage, "communicator was revoked");
  if (comm->suspended)
    return BRAID_ERROR(ncclInvalidUsage, "communicator is suspended (ncclCommSuspend): call ncclCommResume first");
  // As NCCL's (dev_runtime.cc): a NULL buffer or an empty window is refused.
  if (!buff || size == 0) return BRAID_ERROR(ncclInvalidArgument, "invalid buffer {} / size {}", buff, size);
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
  BRAID_TRY(wait_initialized(comm));
  return window_collective(comm, buff, size, win, flags);
}

// The collective part of a registration: every rank's part gathered, the
// backend told, the device struct made (src/runtime/lsa_space.h).
//
// Its exchanges (here, in the symmetric memory and in the backend, which
// may map peers' memory and connect RMA) keep the bootstrap in step only
// if every rank makes all of them.  A rank that fails midway leaves its
// peers waiting in an exchange it will not make, or reading its next one
// as that one.  So any failure after the flags check breaks the
// communicator: this rank's bootstrap is aborted, which ends its peers'
// waits at once (and they abort theirs in turn), and the error stays as
// the communicator's asynchronous error (NCCL's rule after an error:
// abort the communicator).
Status window_collective(ncclComm* comm, void* buff, size_t size, ncclWindow_t* win, int flags) {
  std::vector<WindowPart> parts(comm->nranks);
  parts[comm->rank] = {reinterpret_cast<uint64_t>(buff), uint64_t(size), int64_t(flags), lsa_stride_from_env(),
                       host_shared_handle(buff, size)};
  Status s = std::move(comm->bootstrap->allgather(parts.data(), sizeof(WindowPart))).context("ncclCommWindowRegister");
  if (s.is_ok()) {
    for (int r = 0; r < comm->nranks; ++r) {  // every rank sees the same table: all fail alike, in step
      if (parts[r].flags != flags)
        return BRAID_ERROR(ncclInvalidUsage, "ranks disagree on winFlags ({:#x} on rank {}, {:#x} on rank {})", flags,
                           comm->rank, parts[r].flags, r);
      if (parts[r].stride_env == UINT64_MAX)
        return BRAID_ERROR(ncclInvalidArgument, "NCCL_WIN_STRIDE on rank {} is not a positive multiple of 4 GiB", r);
    }
    s = window_exchanges(comm, buff, size, flags, parts, win);
  }
  if (!s.is_ok()) break_comm(comm, s);
  return s;
}

Status window_exchanges(ncclComm* comm, void* buff, size_t size, int flags, const std::vector<WindowPart>& parts,
                        ncclWindow_t* win) {
  auto window = std::make_unique<Window>();
  window->comm = comm;
  window->flags = flags;
  window->seq = comm->windows_registered++;
  WindowInfo info;
  info.seq = window->seq;
  for (const WindowPart& p : parts) {
    window->ranks.push_back({p.base, p.size});
    info.handles.push_back(p.handle);
  }
  info.ranks = window->ranks;
  // The struct NCCL's device code reads, symmetric where every rank's
  // buffer can be (src/runtime/lsa_space.h).
  LsaSpace& space = symmetric_memory(comm);
  BRAID_TRY(space.add_window(buff, size, window.get(), uint32_t(flags), true, &window->device));
  if (window->device->symmetric() && space.lsa().size == comm->nranks)  // every rank mapped here
    for (int r = 0; r < comm->nranks; ++r)
      info.mapped.push_back(r == comm->rank ? static_cast<char*>(buff) : window->device->lsa_pointer(r, 0));
  if (env_int("BRAID_TEST_FAIL_WINDOW_RANK") == comm->rank)
    return BRAID_ERROR(ncclInternalError, "BRAID_TEST_FAIL_WINDOW_RANK={}: this rank's backend fails before its "
                       "exchanges", comm->rank);
  BRAID_TRY(comm->backend->window_registered(info));
  // A barrier at the end: no rank returns (and launches a kernel that waits
  // for its peers) while a thread rank of its process is still in what
  // registering does on the device, which may wait for it.
  if (Status s = comm->bootstrap->barrier(); !s.is_ok()) {
    comm->backend->window_deregistered(window->seq);  // the window is never handed out
    return std::move(s).context("ncclCommWindowRegister");
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
    CommUse use(comm);  // an Abort from another thread waits for this call
    BRAID_TRY(check_comm(use, comm));
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
    CommUse use(comm);  // an Abort from another thread waits for this call
    BRAID_TRY(check_comm(use, comm));
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
    CommUse use(comm);  // an Abort from another thread waits for this call
    BRAID_TRY(check_comm(use, comm));
    if (!win) return Status::ok();  // as NCCL's: nothing to deregister
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
    CommUse use(comm);  // an Abort from another thread waits for this call
    BRAID_TRY(check_comm(use, comm));
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

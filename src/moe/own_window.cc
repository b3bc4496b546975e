#include "src/moe/own_window.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/env.h"
#include "src/base/log.h"
#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"
#include "src/shim/host_exchange.h"
#include "src/shim/library_use.h"

// NCCL declares it in nccl_device/core.h (2.29), which braid does not ship;
// src/shim/api_device_queries.cc defines it with NCCL's signature.
extern "C" ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);

namespace braid::moe {

Status OwnWindow::open(ncclComm_t parent, size_t bytes, size_t words, const char* what,
                       std::unique_ptr<OwnWindow>* out) {
  int nranks = 0, rank = 0;
  BRAID_TRY(nccl_status(parent, ncclCommCount(parent, &nranks), "ncclCommCount"));
  BRAID_TRY(nccl_status(parent, ncclCommUserRank(parent, &rank), "ncclCommUserRank"));
  std::unique_ptr<OwnWindow> w(new OwnWindow());
  w->comm_ = parent;  // from here its destructor frees what it holds
  // Agreed before the (collective) registration, which a rank that could
  // not allocate would leave its peers waiting in: every rank fails alike.
  // ncclMemAlloc has no communicator: its reason is the global last error.
  Status allocated =
      nccl_status(nullptr, ncclMemAlloc(&w->memory_, bytes), fmt::format("ncclMemAlloc of the {} window", what));
  std::vector<int64_t> allocated_on;
  BRAID_TRY(gather_word(parent, allocated.is_ok(), &allocated_on, fmt::format("the {} window's allocation", what)));
  BRAID_TRY(std::move(allocated));
  for (int r = 0; r < nranks; ++r)
    if (!allocated_on[size_t(r)])
      return BRAID_ERROR(ncclSystemError, "rank {} could not allocate its {} window (its error says why)", r, what);
  // Zeroed before the registration: epoch 0 is "nothing yet".
  std::memset(w->memory_, 0, std::min(words, bytes));
  // First on the caller's communicator: where every rank stores into every
  // window (one host), no signal is used and that is all.  Otherwise the
  // window moves to a communicator of the handle's own, whose signals and
  // RMA connections serve it alone (each costs a receiver thread and
  // connections: only handles that span hosts pay for one).
  BRAID_TRY(w->map(rank, nranks, bytes, what));
  if (w->routes_->all_direct()) {
    w->log_routes(rank, nranks, what);
    *out = std::move(w);
    return Status::ok();
  }
  w->routes_.reset();
  const ncclWindow_t on_parent = w->handle_;
  w->handle_ = nullptr;
  BRAID_TRY(nccl_status(parent, ncclCommWindowDeregister(parent, on_parent), "ncclCommWindowDeregister"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.numRmaSig = WindowRoutes::kSignals;
  config.blocking = 1;  // the handle's own calls on it complete before they return, whatever the caller's is
  ncclComm_t own = nullptr;
  const ncclResult_t split = ncclCommSplit(parent, 0, rank, &own, &config);
  BRAID_TRY(nccl_status(parent, split == ncclInProgress ? ncclSuccess : split,
                        fmt::format("ncclCommSplit for the {} handle", what)));
  if (Status done = split == ncclInProgress ? split_done(parent, &own) : Status::ok(); !done.is_ok()) {
    if (own) ncclCommAbort(own);
    return done;
  }
  w->comm_ = own;
  w->owned_ = true;
  BRAID_TRY(w->map(rank, nranks, bytes, what));
  w->log_routes(rank, nranks, what);
  *out = std::move(w);
  return Status::ok();
}

Status OwnWindow::split_done(ncclComm_t parent, const ncclComm_t* own) {
  // A non-blocking parent's split completes in the background
  // (ncclInProgress), which sets *own then: both are waited for, as any
  // collective step of create, within BRAID_TIMEOUT.
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(wait_bound_ms(0)));
  auto settled = [&](ncclComm_t comm, const char* which) -> Status {
    ncclResult_t state = ncclInProgress;
    while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress && !deadline.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (state == ncclInProgress)
      return BRAID_ERROR(ncclTimeout, "the handle's ncclCommSplit did not complete within BRAID_TIMEOUT ({})", which);
    return nccl_status(comm, state, fmt::format("ncclCommSplit for the handle ({})", which));
  };
  BRAID_TRY(settled(parent, "the parent's background work"));
  if (!*own) return BRAID_ERROR(ncclInternalError, "ncclCommSplit for the handle completed without a communicator");
  return settled(*own, "the new communicator's init");
}

Status OwnWindow::map(int rank, int nranks, size_t bytes, const char* what) {
  // Strict ordering: RMA routes rely on writes landing in issue order.
  Status s = nccl_status(comm_, ncclCommWindowRegister(comm_, memory_, bytes, &handle_, NCCL_WIN_STRICT_ORDERING),
                         fmt::format("ncclCommWindowRegister of the {} window", what));
  if (!s.is_ok()) {
    handle_ = nullptr;
    return s;
  }
  // Which windows this process maps, then every rank's answer (routes are agreed).
  const bool rma_only = env_int("BRAID_MOE_RMA") != 0;
  std::vector<char*> mapped(size_t(nranks), nullptr);
  std::vector<uint8_t> mine(size_t(nranks), 0), reaches(size_t(nranks) * nranks, 0);
  for (int r = 0; r < nranks; ++r) {
    void* p = nullptr;
    if (ncclGetPeerDevicePointer(handle_, 0, r, &p) == ncclSuccess && p) mapped[size_t(r)] = static_cast<char*>(p);
    mine[size_t(r)] = mapped[size_t(r)] && (r == rank || !rma_only);
  }
  mapped[size_t(rank)] = static_cast<char*>(memory_);
  mine[size_t(rank)] = 1;
  // Over the bootstrap, not ncclAllGather: on a non-blocking communicator
  // that returns ncclInProgress and writes these locals later.
  std::copy(mine.begin(), mine.end(), reaches.begin() + ptrdiff_t(rank) * nranks);
  BRAID_TRY(std::move(host_allgather(comm_, reaches.data(), size_t(nranks))).context("the routes' agreement"));
  routes_ = std::make_unique<WindowRoutes>(comm_, handle_, rank, std::move(mapped), std::move(reaches));
  return Status::ok();
}

void OwnWindow::log_routes(int rank, int nranks, const char* what) const {
  int direct = 0;
  for (int r = 0; r < nranks; ++r) direct += r != rank && routes_->direct(r);
  BRAID_INFO(kInit | kColl, "{} rank {}: stores to {} of {} peers' windows, RMA to the others; {} peers put to it "
             "over RMA{}", what, rank, direct, nranks - 1, routes_->rma_sources(),
             owned_ ? " (on a communicator of its own)" : "");
}

OwnWindow::~OwnWindow() {
  if (!comm_) return;
  // A create that failed part way: other ranks may have failed elsewhere,
  // so nothing collective.  The memory goes where no window exposes it: a
  // communicator of its own is aborted with its windows (peers that mapped
  // the memory keep their mappings); on the caller's, a registered window
  // stays until that communicator goes.
  if (owned_) {
    ncclCommAbort(comm_);
    handle_ = nullptr;
  }
  if (memory_ && !handle_) ncclMemFree(memory_);
}

Status OwnWindow::close(ncclComm_t parent) {
  if (!comm_) return Status::ok();
  CommUse use(parent);  // an Abort from another thread waits for the barrier and the deregistration
  // Revoke (the recovery path: revoke, destroy the handles, shrink) ended
  // every call on it, and a peer may be gone: no barrier, and the handle's
  // own communicator is aborted, not destroyed.
  const bool revoked = use.ok() && comm_revoked(parent);
  const Status barrier = revoked ? Status::ok() : closing_barrier(use.ok(), parent);
  const Status released = release(barrier.is_ok() && !revoked, use.ok());
  return !barrier.is_ok() ? barrier : released;
}

Status OwnWindow::closing_barrier(bool parent_live, ncclComm_t parent) {
  if (!parent_live)
    return BRAID_ERROR(ncclInvalidArgument, "comm {} is not a live communicator (destroyed or aborted before the "
                       "handle); this rank's window is freed", static_cast<void*>(parent));
  // Over the bootstrap, as the agreements: a non-blocking communicator's
  // ncclAllReduce would write the result after this frame is gone.
  std::vector<int64_t> all;
  return gather_word(parent, 1, &all, "the closing barrier");
}

Status OwnWindow::release(bool quiet, bool parent_live) {
  // Without the barrier a peer may still be in a call: the handle's own
  // communicator is aborted, which ends its RMA into this window; peers on
  // this host store through mappings of their own, which outlive this one.
  Status s = Status::ok(), d = Status::ok();
  if (owned_ && !quiet) ncclCommAbort(comm_);
  else if (owned_ || parent_live)  // else the window went with the caller's communicator
    s = nccl_status(comm_, ncclCommWindowDeregister(comm_, handle_), "ncclCommWindowDeregister");
  // ncclMemFree has no communicator: its reason is the global last error.
  const Status f = nccl_status(nullptr, ncclMemFree(memory_), "ncclMemFree");
  if (owned_ && quiet) d = nccl_status(nullptr, ncclCommDestroy(comm_), "ncclCommDestroy of the handle's communicator");
  comm_ = nullptr;
  memory_ = nullptr;
  handle_ = nullptr;
  return !s.is_ok() ? s : !f.is_ok() ? f : d;
}

}  // namespace braid::moe

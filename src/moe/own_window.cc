#include "src/moe/own_window.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"

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
  Status allocated =
      nccl_status(parent, ncclMemAlloc(&w->memory_, bytes), fmt::format("ncclMemAlloc of the {} window", what));
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
  ncclComm_t own = nullptr;
  BRAID_TRY(nccl_status(parent, ncclCommSplit(parent, 0, rank, &own, &config),
                        fmt::format("ncclCommSplit for the {} handle", what)));
  w->comm_ = own;
  w->owned_ = true;
  BRAID_TRY(w->map(rank, nranks, bytes, what));
  w->log_routes(rank, nranks, what);
  *out = std::move(w);
  return Status::ok();
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
  BRAID_TRY(nccl_status(comm_, ncclAllGather(mine.data(), reaches.data(), size_t(nranks), ncclUint8, comm_, nullptr),
                        "the routes' agreement (ncclAllGather)"));
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
  int32_t one = 1, sum = 0;
  Status s = nccl_status(parent, ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, parent, nullptr),
                         "the closing barrier (ncclAllReduce)");
  if (!s.is_ok()) {
    if (owned_) ncclCommAbort(comm_);
    comm_ = nullptr;
    return s;
  }
  s = nccl_status(comm_, ncclCommWindowDeregister(comm_, handle_), "ncclCommWindowDeregister");
  const Status f = nccl_status(comm_, ncclMemFree(memory_), "ncclMemFree");
  const Status d = owned_ ? nccl_status(nullptr, ncclCommDestroy(comm_), "ncclCommDestroy of the handle's communicator")
                          : Status::ok();
  comm_ = nullptr;
  return !s.is_ok() ? s : !f.is_ok() ? f : d;
}

}  // namespace braid::moe

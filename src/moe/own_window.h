// A window of a handle's own, for braid's libraries on the public API (MoE
// dispatch/combine, the device-count AlltoAllv): ncclMemAlloc memory whose
// signal words are zeroed, registered with strict ordering, and the agreed
// routes to every rank's copy (window_routes.h: stores where this process
// maps it, one-sided RMA where it cannot).  Where every route is a store (one host), the window is
// registered on the caller's communicator and no signal is used; where
// some route needs RMA, on a communicator split off the caller's, so that
// its RMA signals are the handle's alone.
#pragma once

#include <cstddef>
#include <memory>

#include "nccl.h"
#include "src/base/status.h"
#include "src/moe/window_routes.h"

namespace braid::moe {

class OwnWindow {
 public:
  // Collective over parent's ranks.  The first `words` bytes (the signal
  // words) are zeroed; the rest is left as ncclMemAlloc gives it, so that
  // the pages of rows nobody writes (capacity never used) cost no memory.
  // `what` names the handle in messages.
  static Status open(ncclComm_t parent, size_t bytes, size_t words, const char* what,
                     std::unique_ptr<OwnWindow>* out);
  OwnWindow(const OwnWindow&) = delete;
  OwnWindow& operator=(const OwnWindow&) = delete;
  // Aborts the communicator when close() did not run (a failed create).
  ~OwnWindow();

  // Collective: a barrier on parent (after it no peer stores into this
  // window: all calls are over), then the window is deregistered and freed
  // and the communicator destroyed.  Without the barrier (a peer gone,
  // parent revoked, aborted or destroyed) this rank's resources are freed
  // all the same (the handle is gone after; the recovery path must not
  // leak): the communicator of its own is aborted, which ends its RMA, and
  // the barrier's error is returned.  A revoked parent needs no barrier.
  Status close(ncclComm_t parent);

  WindowRoutes& routes() { return *routes_; }
  char* base(int rank) const { return routes_->base(rank); }

 private:
  OwnWindow() = default;
  Status map(int rank, int nranks, size_t bytes, const char* what);
  static Status split_done(ncclComm_t parent, const ncclComm_t* own);
  void log_routes(int rank, int nranks, const char* what) const;
  Status closing_barrier(bool parent_live, ncclComm_t parent);
  // Frees what this rank holds; `quiet`: the barrier held (no peer stores any more).
  Status release(bool quiet, bool parent_live);

  ncclComm_t comm_ = nullptr;  // the caller's, or (owned_) the handle's own
  bool owned_ = false;
  void* memory_ = nullptr;
  ncclWindow_t handle_ = nullptr;
  std::unique_ptr<WindowRoutes> routes_;
};

}  // namespace braid::moe

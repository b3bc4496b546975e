#include "src/moe/window_routes.h"

#include <algorithm>
#include <utility>

#include "src/base/host_identity.h"
#include "src/shim/library_use.h"
#include "src/shim/rma_wait.h"

namespace braid::moe {

WindowRoutes::WindowRoutes(ncclComm_t comm, ncclWindow_t window, int self, std::vector<char*> mapped,
                           std::vector<uint8_t> reaches)
    : comm_(comm),
      window_(window),
      self_(self),
      nranks_(mapped.size()),
      mapped_(std::move(mapped)),
      reaches_(std::move(reaches)) {
  int mapped_ranks = 0;
  for (size_t s = 0; s < nranks_; ++s) {
    if (!reaches_[s * nranks_ + size_t(self_)]) rma_sources_.push_back(int(s));
    mapped_ranks += reaches_[size_t(self_) * nranks_ + s];
  }
  idle_spins_ = host_oversubscribed(mapped_ranks) ? 0 : Waiter::kDefaultSpins;
}

void WindowRoutes::put(int peer, const void* remote, const void* local, size_t bytes, int signal) {
  const size_t offset = size_t(static_cast<const char*>(remote) - mapped_[size_t(self_)]);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.is_ok()) return;
  const ncclResult_t r = ncclPutSignal(local, bytes, ncclInt8, peer, window_, offset, signal, 0, 0, comm_, nullptr);
  if (r != ncclSuccess)
    failure_ = BRAID_ERROR(r, "put of {} bytes to rank {} over RMA failed: {}", bytes, peer, ncclGetLastError(comm_));
}

Status WindowRoutes::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // A copy of its own: the caller's BRAID_TRY adds to the trail.
  return failure_.is_ok() ? Status::ok() : Status::error(failure_.code(), failure_.message());
}

Status WindowRoutes::wait_from_rma_sources(int signal, int32_t count, const Deadline& deadline,
                                           const ncclComm* caller) {
  if (rma_sources_.empty()) return Status::ok();
  waits_.clear();
  for (int s : rma_sources_) waits_.push_back({count, s, signal, 0});
  // In slices: the handle's own communicator does not see an abort or
  // revoke of the caller's, so that is looked at between them.  A slice
  // that times out consumes no signal.
  constexpr int kSliceMs = 100;
  for (;;) {
    const int left = std::max(deadline.remaining_ms(), 1);
    Status s = wait_signals_within(comm_, int(waits_.size()), waits_.data(), std::min(left, kSliceMs));
    if (s.is_ok() || s.code() != ncclTimeout || left <= kSliceMs || comm_stopping(caller)) return s;
  }
}

void PutRuns::add(int peer, char* remote, const void* local, size_t bytes) {
  // The run this put continues: the latest first, since an agent's rows to
  // one block follow each other (at most a few hundred runs are live).
  Run* run = nullptr;
  for (size_t i = live_; i-- > 0 && !run;)
    if (runs_[i].peer == peer && runs_[i].end() == remote) run = &runs_[i];
  if (!run && bytes >= kAloneBytes) {
    routes_->put(peer, remote, local, bytes, WindowRoutes::kRowSignal);
    return;
  }
  if (!run) {
    if (live_ == runs_.size()) runs_.emplace_back();
    run = &runs_[live_++];
    run->peer = peer;
    run->remote = remote;
    run->data.clear();
  }
  const auto* from = static_cast<const char*>(local);
  run->data.insert(run->data.end(), from, from + bytes);
  held_ += bytes;
  if (held_ >= kHeldBytes) flush();
}

void PutRuns::flush() {
  for (size_t i = 0; i < live_; ++i)
    routes_->put(runs_[i].peer, runs_[i].remote, runs_[i].data.data(), runs_[i].data.size(), WindowRoutes::kRowSignal);
  live_ = held_ = 0;
}

}  // namespace braid::moe

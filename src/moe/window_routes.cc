#include "src/moe/window_routes.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "src/base/deadline.h"

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
  unsigned mapped_ranks = 0;
  for (size_t s = 0; s < nranks_; ++s) {
    if (!reaches_[s * nranks_ + size_t(self_)]) rma_sources_.push_back(int(s));
    mapped_ranks += reaches_[size_t(self_) * nranks_ + s];
  }
  idle_spins_ = mapped_ranks > std::max(1u, std::thread::hardware_concurrency()) ? 0 : Waiter().spins();
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

Status WindowRoutes::wait_from_rma_sources(int signal, int32_t count, int64_t bound_ms) {
  if (rma_sources_.empty()) return Status::ok();
  waits_.clear();
  for (int s : rma_sources_) waits_.push_back({count, s, signal, 0});
  return wait_signals_within(comm_, int(waits_.size()), waits_.data(), bound_ms > 0 ? bound_ms : 1);
}

void PutRuns::add(int peer, char* remote, const void* local, size_t bytes) {
  const auto* from = static_cast<const char*>(local);
  auto it = by_end_.find({peer, remote});
  if (it == by_end_.end() && bytes >= kAloneBytes) {
    routes_->put(peer, remote, local, bytes, WindowRoutes::kRowSignal);
    return;
  }
  size_t index;
  if (it != by_end_.end()) {
    index = it->second;
    by_end_.erase(it);
  } else {
    index = runs_.size();
    runs_.push_back({peer, remote, {}});
  }
  Run& run = runs_[index];
  run.data.insert(run.data.end(), from, from + bytes);
  by_end_[{peer, run.remote + run.data.size()}] = index;
  held_ += bytes;
  if (held_ >= kHeldBytes) flush();
}

void PutRuns::flush() {
  for (const Run& run : runs_)
    routes_->put(run.peer, run.remote, run.data.data(), run.data.size(), WindowRoutes::kRowSignal);
  runs_.clear();
  by_end_.clear();
  held_ = 0;
}

}  // namespace braid::moe

// The communicator's life: the live registry's glue, waiting for the work
// that runs on it, and what ncclCommGetAsyncError reports.  (Its init is
// init.cc.)
#include "src/runtime/comm.h"
#include "src/runtime/device_comm.h"  // DeviceComms, for ~ncclComm
#include "src/runtime/init.h"  // CommSetup, for ~ncclComm

#include <chrono>
#include <thread>

#include "src/base/env.h"

ncclComm::ncclComm() = default;
ncclComm::~ncclComm() { braid::ras_comm_removed(this); }

namespace braid {
namespace {

std::mutex owners_mutex;
std::map<ncclWindow_t, ncclComm*>& owners() {
  static auto* map = new std::map<ncclWindow_t, ncclComm*>;  // never freed: used from exit paths
  return *map;
}

}  // namespace

Window::~Window() {
  if (!device) return;
  std::lock_guard<std::mutex> lock(owners_mutex);
  owners().erase(static_cast<ncclWindow_t>(device->device()));
}

ncclComm* window_owner(ncclWindow_t win) {
  std::lock_guard<std::mutex> lock(owners_mutex);
  auto it = owners().find(win);
  return it == owners().end() ? nullptr : it->second;
}

void set_window_owner(ncclWindow_t win, ncclComm* comm) {
  std::lock_guard<std::mutex> lock(owners_mutex);
  owners()[win] = comm;
}

bool AsyncJob::wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex);
  return cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done; });
}

void AsyncJob::finish(Outcomes of_comm) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    outcomes = std::move(of_comm);
    done = true;
  }
  cv.notify_all();
}

ncclResult_t AsyncJob::outcome_of(const ncclComm* comm) const {
  for (const auto& [c, r] : outcomes)
    if (c == comm) return r;
  return ncclSuccess;
}

void comm_register(ncclComm* comm) { live_comms().insert(comm); }
bool comm_unregister(ncclComm* comm) { return live_comms().erase(comm); }
bool comm_is_live(const ncclComm* comm) { return live_comms().contains(comm); }

bool comm_acquire(ncclComm* comm) {
  return live_comms().if_live(comm, [&] { comm->running.fetch_add(1); });
}
void comm_release(ncclComm* comm) { comm->running.fetch_sub(1); }

bool comm_wait_idle(ncclComm* comm, int64_t timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (comm->running.load() > 0 || live_comms().in_use(comm)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

Status comm_wait_job(ncclComm* comm) {
  std::shared_ptr<AsyncJob> job;
  {
    std::lock_guard<std::mutex> lock(comm->job_mutex);
    job = comm->job;
  }
  if (!job) return Status::ok();
  int64_t timeout_ms = env_int("BRAID_TIMEOUT") * 1000;
  if (!job->wait(timeout_ms + 1000))
    return BRAID_ERROR(ncclTimeout, "the communicator's background work did not finish within BRAID_TIMEOUT");
  return Status::ok();
}

bool set_async_error(ncclComm* comm, const Status& why) {
  int expected = ncclSuccess;
  if (why.is_ok() || !comm->async_error.compare_exchange_strong(expected, why.code())) return false;
  std::lock_guard<std::mutex> lock(comm->error_mutex);
  comm->async_cause = why.to_string();
  return true;
}

std::string async_cause(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(comm->error_mutex);
  return comm->async_cause;
}

void break_comm(ncclComm* comm, const Status& why) {
  set_async_error(comm, why);
  if (comm->bootstrap) comm->bootstrap->abort();
}

ncclResult_t comm_async_state(ncclComm* comm) {
  ncclResult_t sticky = ncclResult_t(comm->async_error.load());
  if (sticky != ncclSuccess) return sticky;
  std::shared_ptr<AsyncJob> job;
  {
    std::lock_guard<std::mutex> lock(comm->job_mutex);
    job = comm->job;
  }
  if (job) {
    std::lock_guard<std::mutex> lock(job->mutex);
    if (!job->done) return ncclInProgress;
    // A group the revoke interrupted failed for that alone (a break would
    // have set the sticky error above): the revoke's state below decides.
    if (ncclResult_t r = job->outcome_of(comm); r != ncclSuccess && !comm->revoked) return r;
  }
  // Revoked: in progress until the work it interrupted has let go (host
  // threads, and kernels the backend enqueued).
  if (comm->revoked) {
    const bool kernels = comm->ready.load(std::memory_order_acquire) && comm->backend && !comm->backend->quiescent();
    if (comm->running.load() > 0 || kernels) return ncclInProgress;
  }
  return ncclResult_t(comm->async_error.load());
}

}  // namespace braid

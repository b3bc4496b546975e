#include "src/runtime/group.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/thread_name.h"
#include "src/runtime/comm.h"
#include "src/runtime/init.h"
#include "src/runtime/profiler.h"

namespace braid {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<InitCall> inits;
  std::vector<SetupCall> setups;
  std::vector<CommQueue> queues;  // in order of each communicator's first call
  bool profiled = false;          // some call reached a profiler plugin: its group event may be open
  Status refused;                 // the first call of the group its checks refused (NCCL's ncclGroupError)

  CommWork& work_of(ncclComm* comm) {
    for (CommQueue& q : queues)
      if (q.comm == comm) return q.work;  // a group touches few communicators: a linear search wins
    queues.push_back(CommQueue{comm, {}});
    return queues.back().work;
  }
};
thread_local GroupState group;

void record_error(ncclComm* comm, const Status& s) {
  std::lock_guard<std::mutex> lock(comm->error_mutex);
  comm->last_error = s.to_string();
}

// Records a failed group's error on a communicator it touched.
void note_failure(ncclComm* comm, Status* s) {
  record_error(comm, *s);
  // A transfer that failed midway leaves connections in an unknown state:
  // the communicator is unusable from here (NCCL's async error).  A
  // revoked communicator is stopped on purpose: it reports quiescence.
  bool broken = s->code() == ncclRemoteError || s->code() == ncclSystemError || s->code() == ncclInternalError ||
                s->code() == ncclTimeout;
  if (comm->revoked) *s = BRAID_ERROR(ncclInvalidUsage, "communicator was revoked while this group ran");
  else if (broken) set_async_error(comm, *s);
}

// Whether a profiler plugin takes `comm`'s events: on every call's path,
// so the common answer (no plugin) costs two loads, not a call.
bool profiled(const ncclComm* comm) {
  return comm->ready.load(std::memory_order_acquire) && comm->profiler.table && profiler_active(comm);
}

// Runs body(0) .. body(n - 1) concurrently, one thread each (one inline
// when n is 1), and returns the first failure.  For calls made by one
// thread for several ranks, which must meet each other.
Status run_concurrently(size_t n, const std::function<Status(size_t)>& body) {
  if (n == 1) return body(0);
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.push_back(named_thread("braid group", with_caller_env([&, i] { results[i] = body(i); })));
  for (auto& t : threads) t.join();
  for (Status& s : results) BRAID_TRY(std::move(s));
  return Status::ok();
}

Status run_inits(std::vector<InitCall>& inits) {
  return run_concurrently(inits.size(), [&](size_t i) {
    const InitCall& call = inits[i];
    Status s = call.scalable_ids.empty() ? comm_init(call.comm, call.id)
                                         : comm_init_scalable(call.comm, call.scalable_ids);
    // At once, not after the group's other inits: a peer of this process
    // may be waiting for this one in theirs.
    if (!s.is_ok()) break_comm(call.comm, s);
    return s;
  });
}

// Each communicator's setup calls in call order, up to its first failure;
// several communicators' concurrently, as their collective calls meet one
// another's.  Returns each communicator that failed, with its error.
CommFailures run_setups(std::vector<SetupCall>& setups) {
  std::vector<ncclComm*> comms;
  for (const SetupCall& c : setups)
    if (std::find(comms.begin(), comms.end(), c.comm) == comms.end()) comms.push_back(c.comm);
  std::vector<Status> outcome(comms.size());
  (void)run_concurrently(comms.size(), [&](size_t i) {  // each outcome is kept: the first alone is not enough
    for (SetupCall& c : setups)
      if (c.comm == comms[i] && !(outcome[i] = c.run()).is_ok()) break;
    return Status::ok();
  });
  CommFailures failed;
  for (size_t i = 0; i < comms.size(); ++i)
    if (!outcome[i].is_ok()) failed.emplace_back(comms[i], std::move(outcome[i]));
  return failed;
}

bool listed(const CommFailures& failures, const ncclComm* comm) {
  return std::any_of(failures.begin(), failures.end(), [comm](const auto& f) { return f.first == comm; });
}

// The group's inits, and concurrently its setups that make communicators
// from others (taken out of work->setups): a rank joining a grow, whose
// init is one of the first, meets the existing ranks in the second.
// Returns the inits' outcome; `derived_failed` gets each parent whose
// derivation failed, with its error.
Status run_inits_and_derivations(GroupState& work, CommFailures* derived_failed) {
  std::vector<SetupCall> derivations;
  for (SetupCall& c : work.setups)
    if (c.derives) derivations.push_back(std::move(c));
  std::erase_if(work.setups, [](const SetupCall& c) { return c.derives; });
  if (derivations.empty()) return run_inits(work.inits);
  if (work.inits.empty()) {
    *derived_failed = run_setups(derivations);
    return Status::ok();
  }
  Status inits;
  (void)run_concurrently(2, [&](size_t part) {
    if (part == 0) inits = run_inits(work.inits);
    else *derived_failed = run_setups(derivations);
    return Status::ok();
  });
  return inits;
}

// Hands every communicator's queue to its backend; backends of one kind
// (one GroupRunner) get theirs together, kinds in order of first use.
Status run_work(std::vector<CommQueue>& queues) {
  if (queues.empty()) return Status::ok();
  // What only the argument check needed (calls of count 0) runs nowhere.
  for (CommQueue& q : queues) {
    std::erase_if(q.work.collectives, [](const CollectiveCall& c) { return c.count == 0; });
    std::erase_if(q.work.p2ps, [](const P2PCall& c) { return c.count == 0; });
    for (const CollectiveCall& c : q.work.collectives) q.comm->ras.count_launch(c.collective);  // for RAS
  }
  // Each communicator's task events, stopped once every runner returned
  // (nothing allocated where no plugin is loaded).
  std::vector<std::unique_ptr<ProfiledRun>> runs;
  for (CommQueue& q : queues)
    if (profiled(q.comm))
      runs.push_back(std::make_unique<ProfiledRun>(q.comm, q.work.collectives, q.work.p2ps));
  std::vector<GroupRunner> runners;
  for (CommQueue& q : queues) {
    q.work.backend = q.comm->backend.get();
    const GroupRunner runner = q.work.backend->group_runner();
    if (std::find(runners.begin(), runners.end(), runner) == runners.end()) runners.push_back(runner);
  }
  if (runners.size() == 1) {
    std::vector<CommWork> work;
    for (CommQueue& q : queues) work.push_back(std::move(q.work));
    return runners[0](work);
  }
  for (GroupRunner runner : runners) {
    std::vector<CommWork> work;
    for (CommQueue& q : queues)
      if (q.work.backend->group_runner() == runner) work.push_back(std::move(q.work));
    BRAID_TRY(runner(work));
  }
  return Status::ok();
}

// The group's one-sided calls, taken out of the queues before the backends
// get them: they run after the collectives and sends, every write of every
// communicator first, then the waits (a rank waiting before its own writes
// went out could wait for a peer that waits for those).
using RmaQueue = std::vector<std::pair<ncclComm*, std::vector<RmaCall>>>;
RmaQueue take_rma(std::vector<CommQueue>& queues) {
  RmaQueue rma;
  for (CommQueue& q : queues)
    if (!q.work.rma.empty()) rma.emplace_back(q.comm, std::move(q.work.rma));
  return rma;
}
Status run_rma(const RmaQueue& rma) {
  for (const auto& [comm, calls] : rma)
    for (const RmaCall& c : calls)
      if (!c.wait) BRAID_TRY(comm->backend->rma_write(c));
  for (const auto& [comm, calls] : rma)
    for (const RmaCall& c : calls)
      if (c.wait) BRAID_TRY(comm->backend->rma_wait(c));
  return Status::ok();
}

// Every communicator the group touches, once each.
std::vector<ncclComm*> comms_of(const GroupState& work) {
  std::vector<ncclComm*> comms;
  for (const auto& i : work.inits) comms.push_back(i.comm);
  for (const auto& c : work.setups)
    if (std::find(comms.begin(), comms.end(), c.comm) == comms.end()) comms.push_back(c.comm);
  for (const auto& q : work.queues)
    if (std::find(comms.begin(), comms.end(), q.comm) == comms.end()) comms.push_back(q.comm);
  return comms;
}

// Runs a whole group and records its outcome on each communicator:
// `outcomes` gets the error of each one whose own calls failed (one whose
// calls succeeded stays usable though another's setup failed).
Status execute(GroupState& work, AsyncJob::Outcomes* outcomes) {
  const std::vector<ncclComm*> comms = comms_of(work);
  CommFailures derived_failed;
  Status s = run_inits_and_derivations(work, &derived_failed);
  if (!s.is_ok()) {
    // A rank whose init failed midway leaves its peers in an exchange with
    // it: its bootstraps aborted (the failed one's in run_inits), they fail
    // at once, not at BRAID_TIMEOUT.
    for (const auto& init : work.inits) break_comm(init.comm, s);
    for (ncclComm* comm : comms) {
      note_failure(comm, &s);
      outcomes->emplace_back(comm, s.code());
    }
    return s;
  }
  // A communicator whose setup failed drops the work queued on it.  The
  // others' work still runs: their peers, which need not be members of the
  // failed communicator, are waiting for it.
  CommFailures failed = run_setups(work.setups);
  for (auto& f : derived_failed) failed.push_back(std::move(f));
  auto failed_before = [&](ncclComm* comm) { return listed(failed, comm); };
  std::erase_if(work.queues, [&](const CommQueue& q) { return failed_before(q.comm); });
  // A communicator whose ranks disagree on their calls (the argument check)
  // drops its work the same way: its ranks all know, and the others' work runs.
  for (auto& f : check_agreement(work.queues)) failed.push_back(std::move(f));
  std::erase_if(work.queues, [&](const CommQueue& q) { return failed_before(q.comm); });
  // Sends and receives are checked pair by pair: a pair that disagrees
  // drops its calls on both sides and fails there; the others run.
  for (auto& f : check_p2p_pairs(work.queues)) failed.push_back(std::move(f));
  const RmaQueue rma = take_rma(work.queues);
  Status ran = run_work(work.queues);
  if (ran.is_ok()) ran = run_rma(rma);
  for (auto& [comm, why] : failed) {
    if (listed(derived_failed, comm)) record_error(comm, why);  // the new communicator's failure: comm goes on
    else note_failure(comm, &why);
    outcomes->emplace_back(comm, why.code());
  }
  if (!ran.is_ok())
    for (CommQueue& q : work.queues) {
      note_failure(q.comm, &ran);
      outcomes->emplace_back(q.comm, ran.code());
    }
  return failed.empty() ? ran : failed.front().second;  // the group's error: a setup's or check's, else its work's
}

// The calling thread's profiler group event stops when the group is over
// for it, at the latest as ncclGroupEnd returns.
struct GroupApiStop {
  bool open;
  void stop() {
    if (open) profiler_group_api_stop(), open = false;
  }
  ~GroupApiStop() { stop(); }
};

// A call of the group was refused: as NCCL's, none of the group's calls
// run and ncclGroupEnd returns that error, so a caller that checks only
// ncclGroupEnd cannot take a group that lost a call for one that ran.  Its
// inits and setups still run (the communicators they make are the
// caller's).  Under the cross-rank argument check the refused call went to
// the check instead, which fails the group on every rank at once.
Status drop_refused_group(GroupState* work) {
  if (work->refused.is_ok()) return Status::ok();
  for (const CommQueue& q : work->queues)
    if (q.comm->check_args) return Status::ok();
  work->queues.clear();
  return BRAID_ERROR(work->refused.code(), "a call of the group was refused, so none of its calls ran (as NCCL): {}",
                     work->refused.message());
}

Status end_outermost() {
  GroupState work = std::move(group);
  group = GroupState{};
  GroupApiStop api{work.profiled};
  if (api.open) profiler_group_api_end_starts();
  Status refused = drop_refused_group(&work);
  if (!refused.is_ok() && work.inits.empty() && work.setups.empty()) return refused;
  std::vector<ncclComm*> comms = comms_of(work);
  // Hold every communicator so Abort/Destroy from another thread waits for us.
  for (size_t i = 0; i < comms.size(); ++i) {
    if (!comm_acquire(comms[i])) {
      for (size_t j = 0; j < i; ++j) comm_release(comms[j]);
      return BRAID_ERROR(ncclInvalidArgument, "a communicator used in this group was destroyed before ncclGroupEnd");
    }
  }
  // The group event stops first: once let go, a communicator may be
  // destroyed, and its profiler context with it.
  auto release_all = [comms] {
    for (ncclComm* c : comms) comm_release(c);
  };
  // Work on a communicator runs in call order: finish its background job first.
  for (ncclComm* c : comms) {
    Status s = comm_wait_job(c);
    if (!s.is_ok()) {
      api.stop();
      release_all();
      return s;
    }
  }
  const bool async = std::any_of(comms.begin(), comms.end(), [](ncclComm* c) { return c->nonblocking(); });
  if (!async) {
    AsyncJob::Outcomes outcomes;
    Status s = execute(work, &outcomes);
    api.stop();
    release_all();
    return refused.is_ok() ? s : refused;
  }
  api.stop();  // before the worker, which lets the communicators go
  // Non-blocking: the group runs on a worker; callers poll ncclCommGetAsyncError.
  auto job = std::make_shared<AsyncJob>();
  for (ncclComm* c : comms) {
    std::lock_guard<std::mutex> lock(c->job_mutex);
    c->job = job;
  }
  named_thread("braid group", with_caller_env([work = std::move(work), job, comms, release_all]() mutable {
    Status s;
    AsyncJob::Outcomes outcomes;
    try {
      s = execute(work, &outcomes);
    } catch (const std::exception& e) {
      s = BRAID_ERROR(ncclInternalError, "unexpected exception in a background group: {}", e.what());
      outcomes.clear();
      for (ncclComm* c : comms) outcomes.emplace_back(c, s.code());
    }
    if (!s.is_ok()) BRAID_WARN("background group failed: {}", s.to_string());
    job->finish(std::move(outcomes));
    release_all();
  })).detach();
  if (!refused.is_ok()) return refused;  // the inits and setups go on in the background
  return Status::error(ncclInProgress, "group runs in the background (non-blocking communicator)");
}

}  // namespace

void group_start() { ++group.depth; }

bool group_active() { return group.depth > 0; }

void group_note_refused(const Status& why) {
  if (group.depth > 0 && group.refused.is_ok() && !why.is_ok()) group.refused = Status::error(why.code(), why.message());
}

Status group_end() {
  if (group.depth == 0) return BRAID_ERROR(ncclInvalidUsage, "ncclGroupEnd called without ncclGroupStart");
  if (--group.depth > 0) return Status::ok();
  return end_outermost();
}

Status group_simulate_end(ncclSimInfo_t* sim) {
  if (group.depth == 0) return BRAID_ERROR(ncclInvalidUsage, "ncclGroupSimulateEnd called without ncclGroupStart");
  if (--group.depth > 0) return Status::ok();
  GroupState work = std::move(group);
  group = GroupState{};
  GroupApiStop api{work.profiled};
  if (api.open) profiler_group_api_end_starts();
  if (sim->magic != 0x74685283)  // NCCL_SIM_INFO_INITIALIZER's: the group ends, its calls dropped, as in NCCL
    return BRAID_ERROR(ncclInvalidArgument, "simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER (magic {:#x}): "
                       "the group is ended and its calls dropped", sim->magic);
  BRAID_TRY(run_inits(work.inits));
  CommFailures failed = run_setups(work.setups);
  if (!failed.empty()) return failed.front().second;
  for (ncclComm* c : comms_of(work))
    if (!comm_is_live(c)) return BRAID_ERROR(ncclInvalidArgument, "a communicator of this group was destroyed");
  double us = 0;
  BRAID_TRY(estimate_group_us(work.queues, &us));
  sim->estimatedTime = float(us);
  return Status::ok();
}

Status enqueue(ncclComm* comm, const CollectiveCall& call) {
  // NCCL: nothing to do; but the cross-rank check compares it (and takes
  // refused calls), and every call of a checked communicator goes to it.
  if (call.count == 0 && !comm->check_args) return Status::ok();
  // Only what NCCL would run makes profiler events: not a call kept for the
  // argument check alone.
  const bool traced = profiled(comm) && !call.refused && call.count != 0;
  // A blocking communicator's init is over before its handle is returned.
  if (!group_active() && !comm->nonblocking() && !comm->check_args) {
    bool ran = false;
    Status s;
    // Counted as launched before it runs (a rank stuck in it has launched
    // it, for RAS); taken back if the backend leaves it to the group path.
    comm->ras.count_launch(call.collective);
    if (!traced) {
      s = comm->backend->run_alone(call, &ran);
    } else if (comm->backend->runs_alone(call)) {
      CollectiveCall queued = call;
      profiler_group_api_start(comm, 1);
      profiler_call_api(comm, &queued);
      profiler_group_api_end_starts();
      {
        ProfiledRun run(comm, std::span<const CollectiveCall>(&queued, 1), {});
        s = comm->backend->run_alone(queued, &ran);
      }
      profiler_group_api_stop();
    }
    if (!ran) comm->ras.count_launch(call.collective, -1);
    if (ran) {
      if (!s.is_ok()) note_failure(comm, &s);
      return s;
    }
  }
  group_start();
  CommWork& work = group.work_of(comm);
  work.collectives.push_back(call);
  if (traced) {
    group.profiled = true;
    profiler_group_api_start(comm, group.depth);
    profiler_call_api(comm, &work.collectives.back());
  }
  return group_end();
}

Status enqueue(ncclComm* comm, const P2PCall& call) {
  // Both sides skip it, as NCCL does; but the cross-rank check compares it
  // with the peer's (and takes refused calls).
  if (call.count == 0 && !comm->check_args) return Status::ok();
  group_start();
  CommWork& work = group.work_of(comm);
  work.p2ps.push_back(call);
  if (profiled(comm) && !call.refused && call.count != 0) {
    group.profiled = true;
    profiler_group_api_start(comm, group.depth);
    profiler_call_api(comm, &work.p2ps.back());
  }
  return group_end();
}

Status enqueue(ncclComm* comm, const RmaCall& call) {
  group_start();
  group.work_of(comm).rma.push_back(call);
  return group_end();
}

Status enqueue(const InitCall& call) {
  group_start();
  group.inits.push_back(call);
  return group_end();
}

Status enqueue(SetupCall call) {
  group_start();
  group.setups.push_back(std::move(call));
  return group_end();
}

}  // namespace braid

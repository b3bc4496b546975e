// Group semantics (ncclGroupStart / ncclGroupEnd), per calling thread.
//
// Outside a group every call is a group of one (a blocking call may first
// take its backend's own path: Backend::run_alone).  Inside, calls are
// checked and queued per communicator; ncclGroupEnd runs queued
// communicator inits concurrently, then hands every communicator's queue to
// its backend (collectives in issue order, then its sends/receives as one
// concurrent batch), backends of one kind together (src/exec/backend.h).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "nccl.h"
#include "src/base/status.h"
#include "src/exec/backend.h"
#include "src/plan/call.h"

struct ncclComm;

namespace braid {

struct InitCall {
  ncclComm* comm = nullptr;
  ncclUniqueId id{};
  std::vector<ncclUniqueId> scalable_ids;  // ncclCommInitRankScalable: all the roots (else `id`)
};

// A collective setup call (ncclCommWindowRegister, ncclDevCommCreate) made
// inside a group: NCCL runs it at the group's end, so that one thread can
// set up several communicators, whose calls must then meet concurrently.
// It runs after the group's inits and before its collectives, except one
// that makes a communicator from `comm` (Split, Shrink, an existing rank's
// Grow): that one runs with the inits, so that ranks joining a grow (plain
// inits) meet the existing ones, and its failure is the new communicator's
// (comm is not broken by it, and only its work in the group is dropped).
struct SetupCall {
  ncclComm* comm = nullptr;
  std::function<Status()> run;
  bool derives = false;
};

// A communicator's calls queued in the group.
struct CommQueue {
  ncclComm* comm = nullptr;
  CommWork work;
};

void group_start();
// Ends one nesting level; runs the queued work when the outermost ends.
// Fails with ncclInvalidUsage when no group is open.
Status group_end();
bool group_active();
// A collective or send/receive made inside the group failed its checks
// (NCCL's ncclGroupErrCheck): the first such error is kept, and the
// outermost ncclGroupEnd runs none of the group's calls and returns it.
void group_note_refused(const Status& why);

// Queue (inside a group) or run now (outside).
Status enqueue(ncclComm* comm, const CollectiveCall& call);
Status enqueue(ncclComm* comm, const P2PCall& call);
Status enqueue(ncclComm* comm, const RmaCall& call);
Status enqueue(const InitCall& call);
Status enqueue(SetupCall call);

// ncclGroupSimulateEnd: ends the outermost group like group_end, but instead
// of running the queued collectives and sends/receives it checks them (plans
// a schedule for each), writes an alpha-beta estimate of their time in
// microseconds to sim->estimatedTime, and discards them.  Queued inits run.
// A `sim` without NCCL_SIM_INFO_INITIALIZER's magic ends the group too,
// dropping everything in it, and is ncclInvalidArgument (NCCL's behaviour).
Status group_simulate_end(ncclSimInfo_t* sim);

// Communicators whose part of a group failed before it ran, and why.
using CommFailures = std::vector<std::pair<ncclComm*, Status>>;

// BRAID_CHECK=1 (or NCCL_CHECK_MODE=DEBUG_GLOBAL): the ranks of each
// communicator compare what they queued (collective, count, datatype, op,
// root) through the bootstrap before any data moves; any difference fails
// that communicator's part of the group on every rank with
// ncclInvalidArgument (the caller drops its work and runs the rest).  Does
// nothing on communicators without the check.
CommFailures check_agreement(const std::vector<CommQueue>& queues);

// The same check for sends and receives, pair by pair (only the ranks that
// send or receive take part): each rank tells each peer its calls with it,
// and both compare the sends one way with the receives the other (in order:
// count, datatype; no refused call).  A pair that disagrees drops its calls
// from both ranks' queues, and their communicators fail with
// ncclInvalidArgument; every other pair's calls stay and run.
CommFailures check_p2p_pairs(std::vector<CommQueue>& queues);

// The alpha-beta estimate behind group_simulate_end (group_sim.cc); plans a
// schedule for every collective, so a call no schedule can run fails here.
Status estimate_group_us(const std::vector<CommQueue>& queues, double* us);

}  // namespace braid

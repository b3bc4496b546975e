// ncclGroupSimulateEnd's estimate: an alpha-beta model of the queued work.
//
// Each collective is planned exactly as ncclGroupEnd would plan it (so a call
// that cannot run fails here too), then costed with the closed form of the
// chosen algorithm (src/plan/cost_model.h).  Collectives of one communicator
// run one after another (times add); communicators of one group run
// concurrently (the slowest counts).  The result is in microseconds, like
// NCCL's.
#include <algorithm>

#include "src/ops/datatype.h"
#include "src/plan/cost_model.h"
#include "src/plan/planner.h"
#include "src/runtime/comm.h"
#include "src/runtime/group.h"

namespace braid {
namespace {

LinkCost link_of(const ncclComm* comm) {
  bool remote = false;
  for (const PeerInfo& p : comm->peers) remote |= p.host_hash != comm->peers[comm->rank].host_hash;
  return link_cost(remote);
}

}  // namespace

Status estimate_group_us(const std::vector<CommQueue>& queues, double* us) {
  *us = 0;
  for (const CommQueue& q : queues) {
    ncclComm* comm = q.comm;
    const LinkCost link = link_of(comm);
    double t = 0;
    for (const CollectiveCall& c : q.work.collectives) {
      if (c.count == 0) continue;  // queued for the argument check only (group_check.cc): runs nowhere
      const uint64_t bytes = c.count * datatype_size(c.type);
      std::shared_ptr<const Schedule> schedule;
      BRAID_TRY(comm->plans->schedule_for(c.collective, comm->nranks, c.root, bytes, &schedule, -1,
                                          Placement::Unknown, c.algorithms));
      // The planned schedule's family (BRAID_DETERMINISTIC's direct or chain included); a file's name
      // names none of these and is costed as the tree/log-step default.
      const std::string algo = schedule->name.substr(0, schedule->name.find('_'));
      t += collective_us(c.collective, comm->nranks, bytes, algo, link);
    }
    double p2p_bytes = 0;
    for (const P2PCall& p : q.work.p2ps) p2p_bytes += double(p.count * datatype_size(p.type));
    if (!q.work.p2ps.empty()) t += link.alpha_us + link.us_per_byte * p2p_bytes;
    *us = std::max(*us, t);
  }
  return Status::ok();
}

}  // namespace braid

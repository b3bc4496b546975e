// ncclGroupSimulateEnd's estimate: an alpha-beta model of the queued work.
//
// Each collective is planned exactly as ncclGroupEnd would plan it (so a call
// that cannot run fails here too), then costed with the closed form of the
// chosen algorithm, the same forms the algorithm files document:
//   ring allreduce 2(n-1)(a + b m/n); rd allreduce ceil(log2 n)(a + b m);
//   ring allgather/reducescatter (n-1)(a + b blk); binomial ceil(log2 n)(a + b m);
//   direct / pairwise (n-1)(a + b blk); a send/recv batch: one a + b per byte.
// a and b are rough host-backend figures (link_of: one pair for shared
// memory on one host, one for TCP), not measurements of the machine the
// estimate runs on.  Collectives of one communicator run one after another
// (times add); communicators of one group run concurrently (the slowest
// counts).  The result is in microseconds, like NCCL's.
#include <algorithm>
#include <cmath>
#include <map>

#include "src/runtime/comm.h"
#include "src/ops/datatype.h"
#include "src/runtime/group.h"
#include "src/plan/planner.h"

namespace braid {
namespace {

struct Link {
  double alpha_us;
  double us_per_byte;
};

Link link_of(const ncclComm* comm) {
  bool remote = false;
  for (const PeerInfo& p : comm->peers) remote |= p.host_hash != comm->peers[comm->rank].host_hash;
  return remote ? Link{25.0, 1.0 / 1.2e3} : Link{2.0, 1.0 / 10e3};
}

double collective_us(const CollectiveCall& c, int nranks, const std::string& algo, const Link& l) {
  const double n = nranks, esize = double(datatype_size(c.type));
  if (n <= 1) return 0;
  const double blk = double(c.count) * esize;  // one rank's block (or the whole buffer, for allreduce etc.)
  const double logn = std::ceil(std::log2(n));
  switch (c.collective) {
    case Collective::AllReduce:
      if (algo == "ring") return 2 * (n - 1) * (l.alpha_us + l.us_per_byte * blk / n);
      // chain: n chunks through 2(n-1) hops; direct and twoshot: two exchanges with every peer at once.
      if (algo == "chain") return (3 * n - 3) * (l.alpha_us + l.us_per_byte * blk / n);
      if (algo == "allgather") return l.alpha_us + (n - 1) * l.us_per_byte * blk;  // allgather_fold: one hop
      if (algo == "direct" || algo == "twoshot") return 2 * (l.alpha_us + (n - 1) * l.us_per_byte * blk / n);
      return (logn + 2) * (l.alpha_us + l.us_per_byte * blk);
    case Collective::AllGather: return (n - 1) * (l.alpha_us + l.us_per_byte * blk);
    case Collective::ReduceScatter:
      if (algo == "chain") return (2 * n - 1) * (l.alpha_us + l.us_per_byte * blk);  // every block down the chain
      return (n - 1) * (l.alpha_us + l.us_per_byte * blk);
    case Collective::Broadcast: return logn * (l.alpha_us + l.us_per_byte * blk);
    case Collective::Reduce:
      if (algo == "chain") return (2 * n - 1) * (l.alpha_us + l.us_per_byte * blk / n);
      return logn * (l.alpha_us + l.us_per_byte * blk);
    default: return (n - 1) * (l.alpha_us + l.us_per_byte * blk);
  }
}

}  // namespace

Status estimate_group_us(const std::vector<CommQueue>& queues, double* us) {
  *us = 0;
  for (const CommQueue& q : queues) {
    ncclComm* comm = q.comm;
    const Link link = link_of(comm);
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
      t += collective_us(c, comm->nranks, algo, link);
    }
    double p2p_bytes = 0;
    for (const P2PCall& p : q.work.p2ps) p2p_bytes += double(p.count * datatype_size(p.type));
    if (!q.work.p2ps.empty()) t += link.alpha_us + link.us_per_byte * p2p_bytes;
    *us = std::max(*us, t);
  }
  return Status::ok();
}

}  // namespace braid

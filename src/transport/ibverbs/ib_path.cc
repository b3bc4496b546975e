// A path of a connection of braid's InfiniBand net (ib_comm.h): its
// completion queue, its reliable-connected queue pairs on one port from
// INIT to ready-to-send, the credit buffers registered there, and the
// receives each end keeps posted.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "src/base/env.h"
#include "src/transport/ibverbs/ib_comm.h"

namespace braid {
namespace {

std::string errno_text() { return std::strerror(errno); }

constexpr int kPathDepth = 2 * kIbMaxRequests + 8;  // send work requests a queue pair holds

Status alloc_credits(IbPath* path) {
  static_assert(sizeof(IbCredit) * kIbMaxRequests <= 4096);
  path->credit_buf = static_cast<IbCredit*>(std::aligned_alloc(4096, 4096));
  if (!path->credit_buf) return BRAID_ERROR(ncclSystemError, "out of memory");
  std::memset(path->credit_buf, 0, 4096);
  path->credit_mr = ibv_reg_mr(path->dev->port.pd, path->credit_buf, sizeof(IbCredit) * kIbMaxRequests,
                               IBV_ACCESS_LOCAL_WRITE);
  if (!path->credit_mr) return BRAID_ERROR(ncclSystemError, "ibv_reg_mr (credits): {}", errno_text());
  return Status::ok();
}

// Path p's queue pairs on its completion queue, to INIT, and what this end
// says of them (a new starting PSN each time).
Status create_qps(IbComm* c, int p) {
  IbPath& path = c->paths[p];
  const IbPort& port = path.dev->port;
  path.port_events_at_make = path.dev->port_events.load();
  for (int j = 0; j < c->nqps; ++j) {
    ibv_qp_init_attr a{};
    a.qp_context = &path;  // its asynchronous events' (ib_events.h)
    a.send_cq = a.recv_cq = path.cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = uint32_t(kPathDepth);
    a.cap.max_recv_wr = uint32_t(kIbMaxRequests + 4);
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(port.pd, &a);
    if (!qp) return BRAID_ERROR(ncclSystemError, "ibv_create_qp: {}", errno_text());
    path.qps.push_back(qp);
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_INIT;
    m.pkey_index = port.pkey_index;
    m.port_num = uint8_t(port.port);
    m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (int rc = ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return BRAID_ERROR(ncclSystemError, "queue pair to INIT: {}", std::strerror(rc));
  }
  static thread_local std::mt19937 rng{std::random_device{}()};
  QpInfo& mine = c->mine.path[p];
  mine.nqps = uint32_t(c->nqps);
  mine.psn = rng() & 0xffffff;
  for (int j = 0; j < c->nqps; ++j) mine.qpn[j] = path.qps[size_t(j)]->qp_num;
  mine.lid = port.lid;
  mine.use_gid = port.use_gid;
  mine.mtu = uint8_t(port.mtu);
  mine.pkey = port.pkey;
  std::memcpy(mine.gid, path.gid.raw, 16);
  return Status::ok();
}

// The GID path p's queue pairs take: the one it had (the port's, for a
// new path) while it is still at its index in the port's table, else the
// table's choice now (a RoCE address changed, or added back elsewhere
// after a flap).
Status take_current_gid(IbComm* c, int p) {
  IbPath& path = c->paths[p];
  const IbPort& port = path.dev->port;
  if (gid_still_there(port, path.gid)) return Status::ok();
  GidEntry gid;
  BRAID_TRY(current_gid(port, path.gid, &gid));
  BRAID_INFO(kNet, "InfiniBand connection {} {}: {}:{} now has GID {} {} (was {} {}); the path's queue pairs take it",
             c->sending ? "to" : "from", c->peer, port.device, port.port, gid.index, gid_to_string(gid.raw),
             path.gid.index, gid_to_string(path.gid.raw));
  path.gid = gid;
  return Status::ok();
}

}  // namespace

Status create_path(IbComm* c, int p) {
  IbPath& path = c->paths[p];
  path.cq = ibv_create_cq(path.dev->port.context, (c->nqps + 1) * kPathDepth, &path, path.dev->channel, 0);
  if (!path.cq) return BRAID_ERROR(ncclSystemError, "ibv_create_cq: {}", errno_text());
  path.port_events_seen = path.dev->port_events.load();  // events before it are not its news
  path.gid = path.dev->port.gid;
  BRAID_TRY(take_current_gid(c, p));
  BRAID_TRY(create_qps(c, p));
  return alloc_credits(&path);
}

Status rebuild_path(IbComm* c, int p) {
  IbPath& path = c->paths[p];
  BRAID_TRY(take_current_gid(c, p));
  for (ibv_qp* qp : path.qps) ibv_destroy_qp(qp);  // each waits until its events were taken in
  path.qps.clear();
  path.fatal_event = 0;  // the old queue pairs'
  ibv_wc wcs[16];
  while (ibv_poll_cq(path.cq, 16, wcs) > 0) {
  }
  return create_qps(c, p);
}

Status path_ready(IbComm* c, int p) {
  IbPath& path = c->paths[p];
  const QpInfo& t = c->theirs.path[p];
  const IbPort& port = path.dev->port;
  if (bool(t.use_gid) != port.use_gid)
    return BRAID_ERROR(ncclSystemError, "one end addresses by GID (RoCE), the other by LID (InfiniBand): {} vs peer",
                       port.describe(&path.gid));
  const int timeout = int(std::clamp<int64_t>(env_int_or_nccl("BRAID_IB_TIMEOUT", "NCCL_IB_TIMEOUT"), 1, 31));
  const int retries = int(std::clamp<int64_t>(env_int_or_nccl("BRAID_IB_RETRY_CNT", "NCCL_IB_RETRY_CNT"), 0, 7));
  for (int j = 0; j < c->nqps; ++j) {
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_RTR;
    m.path_mtu = ibv_mtu(std::min<int>(t.mtu, port.mtu));
    m.dest_qp_num = t.qpn[j];
    m.rq_psn = t.psn;
    m.max_dest_rd_atomic = 1;
    m.min_rnr_timer = 12;
    m.ah_attr.port_num = uint8_t(port.port);
    m.ah_attr.dlid = t.lid;
    m.ah_attr.sl = port.service_level;
    if (port.use_gid) {
      m.ah_attr.is_global = 1;
      std::memcpy(m.ah_attr.grh.dgid.raw, t.gid, 16);
      m.ah_attr.grh.sgid_index = uint8_t(path.gid.index);
      m.ah_attr.grh.hop_limit = 255;
      m.ah_attr.grh.traffic_class = c->sending ? c->mine.path[p].traffic_class : t.traffic_class;
    }
    ibv_qp* qp = path.qps[size_t(j)];
    if (int rc = ibv_modify_qp(qp, &m,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      // On RoCE the kernel resolves the peer's GID to a MAC here.
      const bool unreachable = rc == ETIMEDOUT || rc == ENETUNREACH || rc == EHOSTUNREACH || rc == EINVAL;
      return BRAID_ERROR(ncclSystemError, "queue pair to ready-to-receive toward GID {} LID {}: {}{}",
                         gid_to_string(t.gid), t.lid, std::strerror(rc),
                         unreachable ? " (is the peer's GID reachable from " + port.describe(&path.gid) + "?)" : "");
    }
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = uint8_t(timeout);
    s.retry_cnt = uint8_t(retries);
    s.rnr_retry = 7;
    s.sq_psn = c->mine.path[p].psn;
    s.max_rd_atomic = 1;
    if (int rc = ibv_modify_qp(qp, &s,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                   IBV_QP_MAX_QP_RD_ATOMIC))
      return BRAID_ERROR(ncclSystemError, "queue pair to ready-to-send: {}", std::strerror(rc));
  }
  return Status::ok();
}

Status post_recv(ibv_qp* qp, uint64_t id, ibv_sge* sge) {
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = id;
  wr.sg_list = sge;
  wr.num_sge = sge ? 1 : 0;
  if (int rc = ibv_post_recv(qp, &wr, &bad)) return BRAID_ERROR(ncclSystemError, "ibv_post_recv: {}", std::strerror(rc));
  return Status::ok();
}

// The sender receives credits on queue pair 0 into credit_buf[i].
Status post_credit_recv(IbComm* c, int p, int i) {
  IbPath& path = c->paths[p];
  ibv_sge sge{reinterpret_cast<uint64_t>(&path.credit_buf[i]), sizeof(IbCredit), path.credit_mr->lkey};
  return post_recv(path.qps[0], wr_id(kWrRecvCredit, uint64_t(i)), &sge);
}

Status post_initial_recvs(IbComm* c, int p) {
  IbPath& path = c->paths[p];
  if (c->sending) {
    for (int i = 0; i < kIbMaxRequests; ++i) BRAID_TRY(post_credit_recv(c, p, i));
  } else {
    for (int j = 0; j < c->nqps; ++j)
      for (int i = 0; i < kIbMaxRequests; ++i)
        BRAID_TRY(post_recv(path.qps[size_t(j)], wr_id(kWrRecvData, uint64_t(j)), nullptr));
  }
  return Status::ok();
}

void destroy_path(IbPath* path) {
  for (ibv_qp* qp : path->qps) ibv_destroy_qp(qp);
  path->qps.clear();
  if (path->credit_mr) ibv_dereg_mr(path->credit_mr);
  std::free(path->credit_buf);
  path->credit_mr = nullptr;
  path->credit_buf = nullptr;
  if (path->cq) ibv_destroy_cq(path->cq);
  path->cq = nullptr;
}

}  // namespace braid

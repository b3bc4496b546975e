// braid's InfiniBand verbs network (a Net, net.h): reliable-connected queue
// pairs and the credit protocol of ib_protocol.h.
//
// Setting up a connection: listen opens a TCP listener and puts its address
// in the handle; connect reaches it, creates the sender's queue pairs and
// sends their numbers, LID, GID and MTU; accept creates the receiver's,
// moves them to ready-to-send and answers likewise; the sender moves its own
// and confirms with one byte, after which the receiver may give credit
// (a credit sent earlier would hit a queue pair not yet able to receive,
// and wait out an ack timeout).  Every step is non-blocking, its progress
// kept in the handle (connect) or the listener (accept), as NCCL's nets do.
//
// The TCP connection stays open for the connection's life: when the peer's
// process ends, its kernel closes it, and a receive still waiting learns
// within a tenth of a second that nothing will come, instead of at
// BRAID_TIMEOUT.  (A sender learns through its queue pair: the writes go
// unanswered and complete in error after BRAID_IB_RETRY_CNT tries of
// 4.096 us * 2^BRAID_IB_TIMEOUT.)
//
// Completions: one completion queue per connection, on a completion channel
// per port; event_fd (an epoll set of the channels) lets braid's transport
// sleep until a completion instead of polling (net_transport.cc).
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/transport/ibverbs/ib_device.h"
#include "src/transport/ibverbs/ib_mr_cache.h"
#include "src/transport/ibverbs/ib_protocol.h"
#include "src/transport/net/nets.h"

namespace braid {
namespace {

constexpr uint64_t kHandleMagic = 0x6272616964696232ULL;  // "braidib2": QpInfo carries the P_Key
constexpr auto kLivenessEvery = std::chrono::milliseconds(100);
constexpr int kCqBatch = 16;

struct QpInfo {
  uint64_t magic;
  uint32_t nqps;
  uint32_t psn;
  uint32_t qpn[kIbMaxQps];
  uint16_t lid;
  uint8_t use_gid;
  uint8_t mtu;
  uint8_t gid[16];
  uint8_t traffic_class;  // the sender's, which both ends use
  uint16_t pkey;          // each end's P_Key: both must reach the other (ib_select.h)
};

struct IbComm;

struct Handle {
  uint64_t magic;
  SockAddr addr;
  IbComm* connecting;  // the sender's progress between connect calls
};
static_assert(sizeof(Handle) <= kNetHandleBytes);

// A work request's id: what it is, and which.
enum WrKind : uint64_t { kWrData = 1, kWrCredit = 2, kWrRecvData = 3, kWrRecvCredit = 4 };
uint64_t wr_id(WrKind kind, uint64_t value) { return (uint64_t(kind) << 56) | value; }

struct IbDevice {
  IbPort port;
  ibv_comp_channel* channel = nullptr;
  std::unique_ptr<IbMrCache> mrs;
};

struct IbRequest {
  IbComm* comm = nullptr;
  bool busy = false;
  bool sending = false;
  uint64_t seq = 0;
  uint32_t parts_left = 0;
  uint64_t bytes = 0;
};

enum class Stage { Connecting, AwaitReply, ReadInfo, AwaitReady, Ready };

struct IbComm {
  IbComm(IbDevice* dev, bool sending, int nqps) : dev(dev), sending(sending), nqps(nqps), receives(nqps) {}
  IbDevice* dev;
  const bool sending;
  int nqps;
  int fd = -1;
  std::string peer;  // ip:port of the other end's side channel, for messages
  Stage stage = Stage::Connecting;
  QpInfo mine{}, theirs{};
  size_t theirs_got = 0;
  ibv_cq* cq = nullptr;
  std::vector<ibv_qp*> qps;
  // Credits: received into (sender) or sent from (receiver) these buffers.
  IbCredit* credit_buf = nullptr;
  ibv_mr* credit_mr = nullptr;
  IbCredits credits;   // sender
  IbReceives receives; // receiver
  IbRequest requests[kIbMaxRequests];
  uint64_t next_send = 0;
  Status error;
  std::chrono::steady_clock::time_point next_liveness_check{};

  void fail(Status s) {
    if (error.is_ok()) error = std::move(s).context(fmt::format("InfiniBand connection {} {}", sending ? "to" : "from", peer));
  }
};

struct ListenComm {
  IbDevice* dev;
  int fd;
  IbComm* accepting = nullptr;
};

std::string errno_text() { return std::strerror(errno); }

// --- queue pairs ----------------------------------------------------------

Status create_qps(IbComm* c) {
  const int depth = 2 * kIbMaxRequests + 8;
  c->cq = ibv_create_cq(c->dev->port.context, (c->nqps + 1) * depth, c, c->dev->channel, 0);
  if (!c->cq) return BRAID_ERROR(ncclSystemError, "ibv_create_cq: {}", errno_text());
  for (int j = 0; j < c->nqps; ++j) {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = c->cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = uint32_t(depth);
    a.cap.max_recv_wr = uint32_t(kIbMaxRequests + 4);
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(c->dev->port.pd, &a);
    if (!qp) return BRAID_ERROR(ncclSystemError, "ibv_create_qp: {}", errno_text());
    c->qps.push_back(qp);
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_INIT;
    m.pkey_index = c->dev->port.pkey_index;
    m.port_num = uint8_t(c->dev->port.port);
    m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (int rc = ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return BRAID_ERROR(ncclSystemError, "queue pair to INIT: {}", std::strerror(rc));
  }
  static thread_local std::mt19937 rng{std::random_device{}()};
  c->mine.magic = kHandleMagic;
  c->mine.nqps = uint32_t(c->nqps);
  c->mine.psn = rng() & 0xffffff;
  for (int j = 0; j < c->nqps; ++j) c->mine.qpn[j] = c->qps[size_t(j)]->qp_num;
  c->mine.lid = c->dev->port.lid;
  c->mine.use_gid = c->dev->port.use_gid;
  c->mine.mtu = uint8_t(c->dev->port.mtu);
  c->mine.pkey = c->dev->port.pkey;
  std::memcpy(c->mine.gid, c->dev->port.gid.raw, 16);
  return Status::ok();
}

Status qps_ready(IbComm* c) {
  const QpInfo& t = c->theirs;
  const IbPort& p = c->dev->port;
  if (bool(t.use_gid) != p.use_gid)
    return BRAID_ERROR(ncclSystemError, "one end addresses by GID (RoCE), the other by LID (InfiniBand): {} vs peer",
                       p.describe());
  const int timeout = int(std::clamp<int64_t>(env_int_or_nccl("BRAID_IB_TIMEOUT", "NCCL_IB_TIMEOUT"), 1, 31));
  const int retries = int(std::clamp<int64_t>(env_int_or_nccl("BRAID_IB_RETRY_CNT", "NCCL_IB_RETRY_CNT"), 0, 7));
  for (int j = 0; j < c->nqps; ++j) {
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_RTR;
    m.path_mtu = ibv_mtu(std::min<int>(t.mtu, p.mtu));
    m.dest_qp_num = t.qpn[j];
    m.rq_psn = t.psn;
    m.max_dest_rd_atomic = 1;
    m.min_rnr_timer = 12;
    m.ah_attr.port_num = uint8_t(p.port);
    m.ah_attr.dlid = t.lid;
    m.ah_attr.sl = p.service_level;
    if (p.use_gid) {
      m.ah_attr.is_global = 1;
      std::memcpy(m.ah_attr.grh.dgid.raw, t.gid, 16);
      m.ah_attr.grh.sgid_index = uint8_t(p.gid.index);
      m.ah_attr.grh.hop_limit = 255;
      m.ah_attr.grh.traffic_class = c->sending ? c->mine.traffic_class : t.traffic_class;
    }
    ibv_qp* qp = c->qps[size_t(j)];
    if (int rc = ibv_modify_qp(qp, &m,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      // On RoCE the kernel resolves the peer's GID to a MAC here.
      const bool unreachable = rc == ETIMEDOUT || rc == ENETUNREACH || rc == EHOSTUNREACH || rc == EINVAL;
      return BRAID_ERROR(ncclSystemError, "queue pair to ready-to-receive toward GID {} LID {}: {}{}",
                         gid_to_string(t.gid), t.lid, std::strerror(rc),
                         unreachable ? " (is the peer's GID reachable from " + p.describe() + "?)" : "");
    }
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = uint8_t(timeout);
    s.retry_cnt = uint8_t(retries);
    s.rnr_retry = 7;
    s.sq_psn = c->mine.psn;
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
Status post_credit_recv(IbComm* c, int i) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&c->credit_buf[i]), sizeof(IbCredit), c->credit_mr->lkey};
  return post_recv(c->qps[0], wr_id(kWrRecvCredit, uint64_t(i)), &sge);
}

Status alloc_credits(IbComm* c) {
  const size_t bytes = sizeof(IbCredit) * kIbMaxRequests;
  c->credit_buf = static_cast<IbCredit*>(std::aligned_alloc(4096, 4096));
  static_assert(sizeof(IbCredit) * kIbMaxRequests <= 4096);
  if (!c->credit_buf) return BRAID_ERROR(ncclSystemError, "out of memory");
  std::memset(c->credit_buf, 0, 4096);
  c->credit_mr = ibv_reg_mr(c->dev->port.pd, c->credit_buf, bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!c->credit_mr) return BRAID_ERROR(ncclSystemError, "ibv_reg_mr (credits): {}", errno_text());
  return Status::ok();
}

// Posts what each end must have waiting before the other may send: the
// sender's credit receives, the receiver's receives for incoming writes.
Status post_initial_recvs(IbComm* c) {
  if (c->sending) {
    for (int i = 0; i < kIbMaxRequests; ++i) BRAID_TRY(post_credit_recv(c, i));
  } else {
    for (int j = 0; j < c->nqps; ++j)
      for (int i = 0; i < kIbMaxRequests; ++i) BRAID_TRY(post_recv(c->qps[size_t(j)], wr_id(kWrRecvData, uint64_t(j)), nullptr));
  }
  return Status::ok();
}

// --- completions ----------------------------------------------------------

Status completion_error(const ibv_wc& wc) {
  const char* what = ibv_wc_status_str(wc.status);
  switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
      return BRAID_ERROR(ncclRemoteError,
                         "{}: the peer did not acknowledge (its process is gone, or its GID/LID is unreachable from "
                         "here; BRAID_IB_TIMEOUT and BRAID_IB_RETRY_CNT bound the wait)",
                         what);
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_ABORT_ERR:
      return BRAID_ERROR(ncclRemoteError, "{} (vendor error {:#x}): the peer refused the operation", what,
                         wc.vendor_err);
    case IBV_WC_WR_FLUSH_ERR:
      return BRAID_ERROR(ncclSystemError, "{}: the queue pair is in the error state", what);
    default:
      return BRAID_ERROR(ncclSystemError, "{} (vendor error {:#x})", what, wc.vendor_err);
  }
}

int qp_index(const IbComm* c, uint32_t qp_num) {
  for (int j = 0; j < c->nqps; ++j)
    if (c->qps[size_t(j)]->qp_num == qp_num) return j;
  return -1;
}

void poll_completions(IbComm* c) {
  ibv_wc wcs[kCqBatch];
  for (;;) {
    const int n = ibv_poll_cq(c->cq, kCqBatch, wcs);
    if (n < 0) return c->fail(BRAID_ERROR(ncclSystemError, "ibv_poll_cq failed"));
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS) {
        c->fail(completion_error(wc));
        continue;
      }
      const uint64_t value = wc.wr_id & ((uint64_t(1) << 56) - 1);
      switch (WrKind(wc.wr_id >> 56)) {
        case kWrData: --c->requests[value].parts_left; break;
        case kWrCredit: break;
        case kWrRecvData: {
          const int j = qp_index(c, wc.qp_num);
          Status s = c->receives.part_arrived(j, ntohl(wc.imm_data));
          if (s.is_ok() && j >= 0) s = post_recv(c->qps[size_t(j)], wc.wr_id, nullptr);
          if (!s.is_ok()) c->fail(std::move(s));
          break;
        }
        case kWrRecvCredit: {
          Status s = c->credits.add(c->credit_buf[value]);
          if (s.is_ok()) s = post_credit_recv(c, int(value));
          if (!s.is_ok()) c->fail(std::move(s));
          break;
        }
        default: c->fail(BRAID_ERROR(ncclInternalError, "a completion of unknown kind {:#x}", wc.wr_id)); break;
      }
    }
    if (n < kCqBatch) return;
  }
}

// Whether the peer's process has ended: its kernel closes the side channel
// then.  Checked at most every kLivenessEvery while waiting.
bool peer_gone(IbComm* c) {
  auto now = std::chrono::steady_clock::now();
  if (now < c->next_liveness_check) return false;
  c->next_liveness_check = now + kLivenessEvery;
  pollfd p{c->fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char byte;
  return (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) || ::recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// With the peer gone, polls once more before failing the connection: the
// completions of what it wrote before it left are queued before its side
// channel closes, but may have come after this thread's last poll.  `done`
// says whether what the caller waits for came with them.
// (A template: it runs on every poll that finds nothing, so no std::function.)
template <class Done>
void fail_if_peer_gone(IbComm* c, const Done& done) {
  if (!c->error.is_ok() || !peer_gone(c)) return;
  poll_completions(c);
  if (!done())
    c->fail(BRAID_ERROR(ncclRemoteError, "the peer's process is gone (it closed the connection's side channel)"));
}

// --- the net --------------------------------------------------------------

// Reads into `dst` what has arrived of `want` bytes, non-blocking.
Status read_some(int fd, void* dst, size_t want, size_t* got) {
  while (*got < want) {
    ssize_t r = ::recv(fd, static_cast<char*>(dst) + *got, want - *got, MSG_DONTWAIT);
    if (r == 0) return BRAID_ERROR(ncclRemoteError, "the peer closed the connection during setup");
    if (r < 0) {
      if (errno_would_block()) return Status::ok();
      return BRAID_ERROR(ncclSystemError, "recv during setup: {}", errno_text());
    }
    *got += size_t(r);
  }
  return Status::ok();
}

Deadline setup_deadline() { return Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT"))); }

class IbNet final : public Net {
 public:
  explicit IbNet(std::vector<IbPort> ports) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    for (IbPort& p : ports) {
      auto d = std::make_unique<IbDevice>();
      d->mrs = std::make_unique<IbMrCache>(p.pd);
      d->channel = ibv_create_comp_channel(p.context);
      if (d->channel) {
        ::fcntl(d->channel->fd, F_SETFL, ::fcntl(d->channel->fd, F_GETFL) | O_NONBLOCK);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = d.get();
        ::epoll_ctl(epoll_, EPOLL_CTL_ADD, d->channel->fd, &ev);
      }
      d->port = std::move(p);
      devices_.push_back(std::move(d));
    }
    nqps_ = int(std::clamp<int64_t>(env_int_or_nccl("BRAID_IB_QPS_PER_CONNECTION", "NCCL_IB_QPS_PER_CONNECTION"), 1,
                                    kIbMaxQps));
  }

  const char* name() const override { return "IB"; }
  int devices() const override { return int(devices_.size()); }

  Status properties(int dev, NetProperties* out) override {
    BRAID_TRY(check_dev(dev));
    const IbPort& p = devices_[size_t(dev)]->port;
    *out = NetProperties{};
    out->name = p.device;
    out->pci_path = p.pci_path;
    out->guid = p.guid;
    out->ptr_support = kNetPtrHost;
    out->speed_mbps = p.speed_mbps;
    out->port = p.port;
    out->max_recvs = 1;
    return Status::ok();
  }

  Status listen(int dev, const NetCommConfig&, NetHandle* handle, void** listen_comm) override {
    BRAID_TRY(check_dev(dev));
    SockAddr addr;
    BRAID_TRY(local_address(&addr));
    int fd = -1;
    SockAddr bound;
    BRAID_TRY(listen_tcp(addr, &fd, &bound));
    set_nonblocking(fd);
    std::memset(handle->bytes, 0, sizeof(handle->bytes));
    Handle h{kHandleMagic, bound, nullptr};
    std::memcpy(handle->bytes, &h, sizeof(h));
    *listen_comm = new ListenComm{devices_[size_t(dev)].get(), fd};
    return Status::ok();
  }

  Status connect(int dev, const NetCommConfig& config, NetHandle* handle, void** send_comm) override {
    *send_comm = nullptr;
    BRAID_TRY(check_dev(dev));
    Handle h;
    std::memcpy(&h, handle->bytes, sizeof(h));
    if (h.magic != kHandleMagic) return BRAID_ERROR(ncclInternalError, "not a handle of braid's InfiniBand net");
    IbComm* c = h.connecting;
    if (!c) {
      c = new IbComm(devices_[size_t(dev)].get(), true, nqps_);
      c->peer = to_string(h.addr);
      c->mine.traffic_class = c->dev->port.traffic_class_for(config.traffic_class);
      if (config.traffic_class >= 0)
        BRAID_INFO(kInit | kNet, "InfiniBand connection to {}: traffic class {} ({})", c->peer, c->mine.traffic_class,
                   c->dev->port.traffic_class >= 0 ? "NCCL_IB_TC, over the communicator's trafficClass"
                                                   : "the communicator's trafficClass");
      Status s = start_connect(c, h.addr);
      if (!s.is_ok()) {
        destroy(c);
        return s;
      }
      h.connecting = c;
      std::memcpy(handle->bytes, &h, sizeof(h));
    }
    Status s = continue_connect(c);
    if (!s.is_ok() || c->stage == Stage::Ready) {
      h.connecting = nullptr;
      std::memcpy(handle->bytes, &h, sizeof(h));
    }
    if (!s.is_ok()) {
      s = std::move(s).context(fmt::format("InfiniBand connect to {}", c->peer));
      destroy(c);
      return s;
    }
    if (c->stage == Stage::Ready) *send_comm = c;
    return Status::ok();
  }

  Status accept(void* listen_comm, void** recv_comm) override {
    *recv_comm = nullptr;
    auto* l = static_cast<ListenComm*>(listen_comm);
    if (!l->accepting) {
      SockAddr from;
      socklen_t len = sizeof(from);
      int fd = ::accept4(l->fd, &from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno_would_block()) return Status::ok();
        return BRAID_ERROR(ncclSystemError, "InfiniBand accept: {}", errno_text());
      }
      set_nodelay(fd);
      l->accepting = new IbComm(l->dev, false, 1);
      l->accepting->fd = fd;
      l->accepting->peer = to_string(from);
      l->accepting->stage = Stage::ReadInfo;
    }
    IbComm* c = l->accepting;
    Status s = continue_accept(c);
    if (!s.is_ok()) {
      l->accepting = nullptr;
      destroy(c);
      return std::move(s).context("InfiniBand accept");
    }
    if (c->stage == Stage::Ready) {
      l->accepting = nullptr;
      *recv_comm = c;
    }
    return Status::ok();
  }

  Status close_listen(void* listen_comm) override {
    auto* l = static_cast<ListenComm*>(listen_comm);
    if (l->accepting) destroy(l->accepting);
    ::close(l->fd);
    delete l;
    return Status::ok();
  }
  Status close_send(void* send_comm) override {
    destroy(static_cast<IbComm*>(send_comm));
    return Status::ok();
  }
  Status close_recv(void* recv_comm) override {
    destroy(static_cast<IbComm*>(recv_comm));
    return Status::ok();
  }

  Status reg_mr(void* comm, void* data, size_t bytes, int type, void** mhandle) override {
    if (type != kNetPtrHost)
      return BRAID_ERROR(ncclInvalidUsage,
                         "braid's InfiniBand net registers host memory only (GPU memory needs GPUDirect RDMA "
                         "through dma-buf, not implemented)");
    IbMrCache::Entry* e = nullptr;
    BRAID_TRY(static_cast<IbComm*>(comm)->dev->mrs->acquire(data, bytes, &e));
    *mhandle = e;
    return Status::ok();
  }
  Status dereg_mr(void* comm, void* mhandle) override {
    static_cast<IbComm*>(comm)->dev->mrs->release(static_cast<IbMrCache::Entry*>(mhandle));
    return Status::ok();
  }

  Status isend(void* send_comm, void* data, size_t bytes, int tag, void* mhandle, void** request) override {
    *request = nullptr;
    auto* c = static_cast<IbComm*>(send_comm);
    if (!c->error.is_ok()) return c->error;
    IbRequest& r = c->requests[c->next_send % kIbMaxRequests];
    if (r.busy) return Status::ok();
    if (c->credits.empty()) poll_completions(c);
    if (!c->error.is_ok()) return c->error;
    if (c->credits.empty()) {
      fail_if_peer_gone(c, [c] { return !c->credits.empty(); });
      return c->error;  // ok: the caller tries again
    }
    IbCredit credit;
    BRAID_TRY(c->credits.take(bytes, &credit));
    const uint32_t lkey = mhandle ? static_cast<IbMrCache::Entry*>(mhandle)->mr->lkey : 0;
    const uint64_t slot = c->next_send % kIbMaxRequests;
    for (int j = 0; j < c->nqps; ++j) {
      const IbPart part = ib_part(bytes, c->nqps, j);
      ibv_sge sge{reinterpret_cast<uint64_t>(data) + part.offset, uint32_t(part.length), lkey};
      ibv_send_wr wr{}, *bad = nullptr;
      wr.wr_id = wr_id(kWrData, slot);
      wr.sg_list = part.length ? &sge : nullptr;
      wr.num_sge = part.length ? 1 : 0;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl(uint32_t(part.length));
      wr.wr.rdma.remote_addr = credit.addr + part.offset;
      wr.wr.rdma.rkey = credit.rkey;
      if (int rc = ibv_post_send(c->qps[size_t(j)], &wr, &bad)) {
        c->fail(BRAID_ERROR(ncclSystemError, "ibv_post_send: {}", std::strerror(rc)));
        return c->error;
      }
    }
    r = IbRequest{c, true, true, credit.seq, uint32_t(c->nqps), bytes};
    ++c->next_send;
    *request = &r;
    return Status::ok();
  }

  Status irecv(void* recv_comm, void* data, size_t bytes, int tag, void* mhandle, void** request) override {
    *request = nullptr;
    auto* c = static_cast<IbComm*>(recv_comm);
    if (!c->error.is_ok()) return c->error;
    if (bytes > UINT32_MAX) return BRAID_ERROR(ncclInternalError, "a receive of {} bytes (at most 4 GiB)", bytes);
    uint64_t seq = 0;
    if (!c->receives.start(&seq)) return Status::ok();
    const uint64_t slot = seq % kIbMaxRequests;
    IbCredit& credit = c->credit_buf[slot];
    credit = IbCredit{reinterpret_cast<uint64_t>(data),
                      mhandle ? static_cast<IbMrCache::Entry*>(mhandle)->mr->rkey : 0, uint32_t(bytes), seq};
    ibv_sge sge{reinterpret_cast<uint64_t>(&credit), sizeof(IbCredit), c->credit_mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id(kWrCredit, slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (int rc = ibv_post_send(c->qps[0], &wr, &bad)) {
      c->fail(BRAID_ERROR(ncclSystemError, "ibv_post_send (credit): {}", std::strerror(rc)));
      return c->error;
    }
    IbRequest& r = c->requests[slot];
    r = IbRequest{c, true, false, seq, 0, 0};
    *request = &r;
    return Status::ok();
  }

  Status test(void* request, bool* done, size_t* bytes) override {
    auto* r = static_cast<IbRequest*>(request);
    IbComm* c = r->comm;
    auto finished = [&] {
      *done = r->sending ? r->parts_left == 0 : c->receives.finish(r->seq, &r->bytes);
      if (*done && bytes) *bytes = r->bytes;
      if (*done) r->busy = false;
      return *done;
    };
    if (finished()) return Status::ok();
    poll_completions(c);
    if (finished()) return Status::ok();
    fail_if_peer_gone(c, finished);
    return *done ? Status::ok() : c->error;
  }

  int event_fd() override { return epoll_; }
  Status arm_events(void* comm) override {
    if (int rc = ibv_req_notify_cq(static_cast<IbComm*>(comm)->cq, 0))
      return BRAID_ERROR(ncclSystemError, "ibv_req_notify_cq: {}", std::strerror(rc));
    return Status::ok();
  }
  void consume_events() override {
    std::lock_guard<std::mutex> lock(events_mutex_);
    for (auto& d : devices_) {
      if (!d->channel) continue;
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      while (ibv_get_cq_event(d->channel, &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
    }
  }

 private:
  Status check_dev(int dev) const {
    if (dev < 0 || dev >= int(devices_.size()))
      return BRAID_ERROR(ncclInternalError, "InfiniBand device {} out of range [0, {})", dev, devices_.size());
    return Status::ok();
  }

  Status start_connect(IbComm* c, const SockAddr& addr) {
    c->fd = tcp_socket_for(addr, SOCK_NONBLOCK);
    if (c->fd < 0) return BRAID_ERROR(ncclSystemError, "socket: {}", errno_text());
    set_nodelay(c->fd);
    if (::connect(c->fd, &addr.sa, addr.length()) != 0 && errno != EINPROGRESS)
      return BRAID_ERROR(ncclSystemError, "connect: {}", errno_text());
    c->stage = Stage::Connecting;
    return Status::ok();
  }

  Status continue_connect(IbComm* c) {
    if (c->stage == Stage::Connecting) {
      pollfd p{c->fd, POLLOUT, 0};
      if (::poll(&p, 1, 0) <= 0) return Status::ok();
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err) return BRAID_ERROR(ncclSystemError, "connect: {}", std::strerror(err));
      BRAID_TRY(create_qps(c));
      BRAID_TRY(alloc_credits(c));
      BRAID_TRY(post_initial_recvs(c));
      BRAID_TRY(send_all(c->fd, &c->mine, sizeof(c->mine), setup_deadline(), nullptr));
      c->stage = Stage::AwaitReply;
    }
    if (c->stage == Stage::AwaitReply) {
      BRAID_TRY(read_some(c->fd, &c->theirs, sizeof(c->theirs), &c->theirs_got));
      if (c->theirs_got < sizeof(c->theirs)) return Status::ok();
      if (c->theirs.magic != kHandleMagic || c->theirs.nqps != uint32_t(c->nqps))
        return BRAID_ERROR(ncclSystemError, "malformed answer from the receiver");
      if (std::string why; !pkeys_reach(c->mine.pkey, c->theirs.pkey, &why))
        return BRAID_ERROR(ncclSystemError, "InfiniBand connection to {}: {}", c->peer, why);
      BRAID_TRY(qps_ready(c));
      const char ready = 1;
      BRAID_TRY(send_all(c->fd, &ready, 1, setup_deadline(), nullptr));
      c->stage = Stage::Ready;
      BRAID_TRACE(kNet, "InfiniBand connection to {} ready: {} queue pairs on {}", c->peer, c->nqps,
                  c->dev->port.describe());
    }
    return Status::ok();
  }

  Status continue_accept(IbComm* c) {
    if (c->stage == Stage::ReadInfo) {
      BRAID_TRY(read_some(c->fd, &c->theirs, sizeof(c->theirs), &c->theirs_got));
      if (c->theirs_got < sizeof(c->theirs)) return Status::ok();
      if (c->theirs.magic != kHandleMagic || c->theirs.nqps < 1 || c->theirs.nqps > uint32_t(kIbMaxQps))
        return BRAID_ERROR(ncclSystemError, "malformed connection request");
      if (std::string why; !pkeys_reach(c->dev->port.pkey, c->theirs.pkey, &why)) {
        // Answered first, with this end's P_Key, so that the sender says why too.
        c->mine.magic = kHandleMagic;
        c->mine.nqps = c->theirs.nqps;
        c->mine.pkey = c->dev->port.pkey;
        (void)send_all(c->fd, &c->mine, sizeof(c->mine), setup_deadline(), nullptr);
        return BRAID_ERROR(ncclSystemError, "InfiniBand connection from {}: {}", c->peer, why);
      }
      c->nqps = int(c->theirs.nqps);
      c->receives = IbReceives(c->nqps);
      BRAID_TRY(create_qps(c));
      BRAID_TRY(alloc_credits(c));
      BRAID_TRY(post_initial_recvs(c));
      BRAID_TRY(qps_ready(c));
      BRAID_TRY(send_all(c->fd, &c->mine, sizeof(c->mine), setup_deadline(), nullptr));
      c->stage = Stage::AwaitReady;
    }
    if (c->stage == Stage::AwaitReady) {
      char ready = 0;
      size_t got = 0;
      BRAID_TRY(read_some(c->fd, &ready, 1, &got));
      if (got == 0) return Status::ok();
      c->stage = Stage::Ready;
    }
    return Status::ok();
  }

  void destroy(IbComm* c) {
    for (ibv_qp* qp : c->qps) ibv_destroy_qp(qp);
    if (c->credit_mr) ibv_dereg_mr(c->credit_mr);
    std::free(c->credit_buf);
    if (c->cq) {
      std::lock_guard<std::mutex> lock(events_mutex_);  // no event of it read and not yet acknowledged
      ibv_destroy_cq(c->cq);
    }
    if (c->fd >= 0) ::close(c->fd);
    delete c;
  }

  std::vector<std::unique_ptr<IbDevice>> devices_;
  int epoll_ = -1;
  int nqps_ = 1;
  std::mutex events_mutex_;
};

}  // namespace

Status braid_ib_net(Net** out) {
  static std::mutex mutex;
  static IbNet* net = nullptr;
  static Status failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (!net && failure.is_ok()) {
    std::vector<IbPort> ports;
    Status s = open_ib_ports(&ports);
    if (s.is_ok()) net = new IbNet(std::move(ports));  // lives as long as the process
    else failure = std::move(s);
  }
  *out = net;
  return net ? Status::ok() : failure;
}

}  // namespace braid

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
//
// With NCCL_IB_RESILIENCY_PORT_FAILOVER=1 a connection also has a standby
// path on another port, which takes over when the first fails
// (ib_failover.h); the structures are in ib_comm.h, a path's queue pairs in
// ib_path.cc.  The devices' asynchronous events (a port down, a queue pair
// in error) are read by a thread per device and taken in by each
// connection (ib_events.h).
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
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/transport/ibverbs/ib_comm.h"
#include "src/transport/ibverbs/ib_events.h"
#include "src/transport/ibverbs/ib_failover.h"
#include "src/transport/net/nets.h"

namespace braid {
namespace {

constexpr uint64_t kHandleMagic = 0x6272616964696235ULL;  // "braidib5": IbHello, paths, P_Keys, port news, spread
constexpr auto kLivenessEvery = std::chrono::milliseconds(100);
constexpr int kCqBatch = 16;

struct Handle {
  uint64_t magic;
  SockAddr addr;
  IbComm* connecting;  // the sender's progress between connect calls
};
static_assert(sizeof(Handle) <= kNetHandleBytes);

struct ListenComm {
  IbDevice* dev;
  int fd;
  IbComm* accepting = nullptr;
};

std::string errno_text() { return std::strerror(errno); }

// --- completions ----------------------------------------------------------

// `also`: what the connection adds (failover_lost_standby).
Status completion_error(const ibv_wc& wc, const std::string& also) {
  const char* what = ibv_wc_status_str(wc.status);
  switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
      return BRAID_ERROR(ncclRemoteError,
                         "{}: the peer did not acknowledge (its process is gone, or its GID/LID is unreachable from "
                         "here; BRAID_IB_TIMEOUT and BRAID_IB_RETRY_CNT bound the wait){}",
                         what, also);
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_ABORT_ERR:
      return BRAID_ERROR(ncclRemoteError, "{} (vendor error {:#x}): the peer refused the operation{}", what,
                         wc.vendor_err, also);
    case IBV_WC_WR_FLUSH_ERR:
      return BRAID_ERROR(ncclSystemError, "{}: the queue pair is in the error state{}", what, also);
    default:
      return BRAID_ERROR(ncclSystemError, "{} (vendor error {:#x}){}", what, wc.vendor_err, also);
  }
}

int qp_index(const IbPath& path, uint32_t qp_num) {
  for (size_t j = 0; j < path.qps.size(); ++j)
    if (path.qps[j]->qp_num == qp_num) return int(j);
  return -1;
}

}  // namespace

// One completion of path `p`.  A stopped path's (a failover's drain) are
// taken in for what they say landed; nothing is posted on it again.
void handle_completion(IbComm* c, int p, const ibv_wc& wc) {
  const bool live = path_is_live(c, p);
  if (wc.status != IBV_WC_SUCCESS) {
    if (live && !failover_takes(c, wc)) c->fail(completion_error(wc, failover_lost_standby(c)));
    return;
  }
  IbPath& path = c->paths[p];
  const uint64_t value = wc.wr_id & ((uint64_t(1) << 56) - 1);
  Status s;
  switch (WrKind(wc.wr_id >> 56)) {
    case kWrData:
      if (c->requests[value].parts_left > 0) --c->requests[value].parts_left;
      break;
    case kWrCredit: break;
    case kWrRecvData: {
      const int j = qp_index(path, wc.qp_num);
      s = c->receives.part_arrived(j, ntohl(wc.imm_data));
      if (s.is_ok() && live) s = post_recv(path.qps[size_t(j)], wc.wr_id, nullptr);
      break;
    }
    case kWrRecvCredit:
      if (!live) break;  // credits of a stopped path are given again on the new one
      s = c->credits.add(path.credit_buf[value]);
      if (s.is_ok()) s = post_credit_recv(c, p, int(value));
      break;
    default: s = BRAID_ERROR(ncclInternalError, "a completion of unknown kind {:#x}", wc.wr_id); break;
  }
  if (!s.is_ok()) c->fail(std::move(s));
}

Status post_message(IbComm* c, const IbRequest& r, const IbCredit& credit) {
  const uint64_t slot = r.seq % kIbMaxRequests;
  const uint32_t lkey = r.memory ? r.memory->lkey(c->active) : 0;
  const IbSpread spread = c->spread();
  for (int j = 0; j < spread.parts(); ++j) {
    const IbPart part = spread.part(r.bytes, j);
    ibv_sge sge{reinterpret_cast<uint64_t>(r.data) + part.offset, uint32_t(part.length), lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id(kWrData, slot);
    wr.sg_list = part.length ? &sge : nullptr;
    wr.num_sge = part.length ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(uint32_t(part.length));
    wr.wr.rdma.remote_addr = credit.addr + part.offset;
    wr.wr.rdma.rkey = credit.rkey;
    if (int rc = ibv_post_send(c->path().qps[size_t(spread.qp(r.seq, j))], &wr, &bad))
      return BRAID_ERROR(ncclSystemError, "ibv_post_send: {}", std::strerror(rc));
  }
  return Status::ok();
}

Status post_credit(IbComm* c, const IbRequest& r) {
  const uint64_t slot = r.seq % kIbMaxRequests;
  IbPath& path = c->path();
  IbCredit& credit = path.credit_buf[slot];
  credit = IbCredit{reinterpret_cast<uint64_t>(r.data), r.memory ? r.memory->rkey(c->active) : 0, uint32_t(r.bytes),
                    r.seq};
  ibv_sge sge{reinterpret_cast<uint64_t>(&credit), sizeof(IbCredit), path.credit_mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id(kWrCredit, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (int rc = ibv_post_send(path.qps[0], &wr, &bad))
    return BRAID_ERROR(ncclSystemError, "ibv_post_send (credit): {}", std::strerror(rc));
  return Status::ok();
}

namespace {

// The events, the side channel, then the path in use.
void poll_completions(IbComm* c) {
  take_async_events(c);
  failover_progress(c);
  if (!path_is_live(c, c->active)) return;
  ibv_wc wcs[kCqBatch];
  for (;;) {
    const int n = ibv_poll_cq(c->path().cq, kCqBatch, wcs);
    if (n < 0) return c->fail(BRAID_ERROR(ncclSystemError, "ibv_poll_cq failed"));
    const int p = c->active;  // the whole batch is this path's, also after an error in it
    for (int i = 0; i < n; ++i) handle_completion(c, p, wcs[i]);
    if (c->path_failed != IBV_WC_SUCCESS || n < kCqBatch) break;
  }
  if (c->path_failed != IBV_WC_SUCCESS) failover_start(c);
  failover_progress(c);
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
      d->mrs = std::make_unique<IbMrCache>(p.pd, p.relaxed_ordering);
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
    std::map<ibv_context*, std::vector<IbDevice*>> ports_of;  // a thread per device context, for all its ports
    for (auto& d : devices_) ports_of[d->port.context].push_back(d.get());
    for (auto& [context, ports] : ports_of) watch_async_events(std::move(ports));
    spread_.nqps = int(std::clamp<int64_t>(
        env_int_or_nccl("BRAID_IB_QPS_PER_CONNECTION", "NCCL_IB_QPS_PER_CONNECTION"), 1, kIbMaxQps));
    spread_.round_robin = env_int_or_nccl("BRAID_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_SPLIT_DATA_ON_QPS") == 0;
    const char* how = spread_.nqps == 1      ? "every message on it"
                      : spread_.round_robin ? "each message whole on the next in turn (NCCL_IB_SPLIT_DATA_ON_QPS=0)"
                                            : "each message split across them";
    BRAID_INFO(kInit | kNet, "InfiniBand connections this process sends on: {} queue pairs each, {}", spread_.nqps,
               how);
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
    out->rail = p.rail;
    out->plane = p.plane;
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
      c = new IbComm(devices_[size_t(dev)].get(), true, spread_);
      c->peer = to_string(h.addr);
      if (failover_wanted()) add_standby(c, dev);
      for (int p = 0; p < c->npaths; ++p)
        c->mine.path[p].traffic_class = c->paths[p].dev->port.traffic_class_for(config.traffic_class);
      const IbPort& port = c->paths[0].dev->port;
      if (config.traffic_class >= 0)
        BRAID_INFO(kInit | kNet, "InfiniBand connection to {}: traffic class {} ({})", c->peer,
                   c->mine.path[0].traffic_class,
                   port.traffic_class >= 0 ? "NCCL_IB_TC, over the communicator's trafficClass"
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
      l->accepting = new IbComm(l->dev, false, IbSpread{});  // the sender's, from its hello
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
    auto* c = static_cast<IbComm*>(comm);
    auto memory = std::make_unique<IbMemory>();
    for (int p = 0; p < c->npaths; ++p) {
      Status s = c->paths[p].dev->mrs->acquire(data, bytes, &memory->on[p]);
      if (!s.is_ok()) {
        (void)dereg_mr(comm, memory.release());
        return s;
      }
    }
    *mhandle = memory.release();
    return Status::ok();
  }
  Status dereg_mr(void* comm, void* mhandle) override {
    auto* c = static_cast<IbComm*>(comm);
    std::unique_ptr<IbMemory> memory(static_cast<IbMemory*>(mhandle));
    for (int p = 0; p < kIbMaxPaths; ++p)
      if (memory->on[p]) c->paths[p].dev->mrs->release(memory->on[p]);
    return Status::ok();
  }

  Status isend(void* send_comm, void* data, size_t bytes, int tag, void* mhandle, void** request) override {
    *request = nullptr;
    auto* c = static_cast<IbComm*>(send_comm);
    if (!c->error.is_ok()) return c->error;
    IbRequest& r = c->requests[c->next_send % kIbMaxRequests];
    if (r.busy) return Status::ok();
    take_async_events(c);
    failover_look(c);
    if (c->credits.empty() || failover_holds_sends(c)) poll_completions(c);
    if (!c->error.is_ok()) return c->error;
    if (failover_holds_sends(c)) return Status::ok();  // the caller tries again
    if (c->credits.empty()) {
      fail_if_peer_gone(c, [c] { return !c->credits.empty(); });
      return c->error;  // ok: the caller tries again
    }
    IbCredit credit;
    BRAID_TRY(c->credits.take(bytes, &credit));
    r = IbRequest{c, true, true, credit.seq, uint32_t(c->spread().parts()), bytes, data,
                  static_cast<const IbMemory*>(mhandle)};
    if (Status s = post_message(c, r, credit); !s.is_ok()) {
      r.busy = false;
      c->fail(std::move(s));
      return c->error;
    }
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
    IbRequest& r = c->requests[seq % kIbMaxRequests];
    r = IbRequest{c, true, false, seq, 0, bytes, data, static_cast<const IbMemory*>(mhandle)};
    // During a failover the credit goes with the others once the sender is on the new path.
    take_async_events(c);
    failover_look(c);
    if (!c->error.is_ok()) return c->error;
    if (failover_holds_credits(c)) {
      failover_hold_credit(c, seq);
    } else if (Status s = post_credit(c, r); !s.is_ok()) {
      c->fail(std::move(s));
      return c->error;
    }
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
    if (int rc = ibv_req_notify_cq(static_cast<IbComm*>(comm)->path().cq, 0))
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

  // NCCL_IB_RESILIENCY_PORT_FAILOVER=1: a standby path on the next port.
  // With one port, on that port: it takes over once the port is back (a
  // link that flapped longer than the retries last), as ib_failover.h says.
  void add_standby(IbComm* c, int dev) {
    if (devices_.size() < 2) {
      static std::once_flag said;
      std::call_once(said, [] {
        BRAID_INFO(kInit | kNet, "NCCL_IB_RESILIENCY_PORT_FAILOVER=1 with one port: connections stand by on the "
                   "same port, to go on once it is back from a failure");
      });
    }
    c->paths[1].dev = devices_[size_t(dev + 1) % devices_.size()].get();
    c->npaths = 2;
  }
  void drop_standby(IbComm* c, const Status& why) {
    BRAID_WARN("InfiniBand connection {} {}: no standby path on {}: {}", c->sending ? "to" : "from", c->peer,
               c->paths[1].dev->port.describe(&c->paths[1].gid), why.message());
    std::lock_guard<std::mutex> lock(events_mutex_);
    destroy_path(&c->paths[1]);
    c->npaths = 1;
  }
  int index_of(const IbDevice* d) const {
    for (size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i].get() == d) return int(i);
    return 0;
  }

  // Creates this end's paths with their receives posted, and fills its hello.
  Status create_paths(IbComm* c) {
    c->mine.magic = kHandleMagic;
    c->mine.npaths = uint32_t(c->npaths);
    c->mine.round_robin = c->round_robin;
    for (int p = 0; p < c->npaths; ++p) {
      BRAID_TRY(create_path(c, p));
      BRAID_TRY(post_initial_recvs(c, p));
    }
    return Status::ok();
  }
  // The peer's hello, checked; a standby it lacks, or whose
  // P_Keys cannot reach it, is dropped.
  Status take_hello(IbComm* c) {
    const IbHello& t = c->theirs;
    if (t.magic != kHandleMagic || t.npaths < 1 || t.npaths > uint32_t(kIbMaxPaths) ||
        t.round_robin != uint32_t(c->round_robin) || t.path[0].nqps != uint32_t(c->nqps) ||
        (t.npaths == 2 && t.path[1].nqps != uint32_t(c->nqps)))
      return BRAID_ERROR(ncclSystemError, "malformed setup message from the peer");
    if (c->npaths == 2 && t.npaths < 2) drop_standby(c, BRAID_ERROR(ncclSystemError, "the peer has none"));
    if (std::string why; c->npaths == 2 && !pkeys_reach(c->mine.path[1].pkey, t.path[1].pkey, &why))
      drop_standby(c, BRAID_ERROR(ncclSystemError, "{}", why));
    return Status::ok();
  }
  Status standby_ready(IbComm* c) {
    if (c->npaths < 2) return Status::ok();
    if (Status s = path_ready(c, 1); !s.is_ok()) drop_standby(c, s);
    return Status::ok();
  }
  void say_ready(IbComm* c) {
    if (c->npaths == 2)
      BRAID_INFO(kInit | kNet, "InfiniBand connection {} {}: {} queue pairs on {}, standby on {} "
                 "(NCCL_IB_RESILIENCY_PORT_FAILOVER)", c->sending ? "to" : "from", c->peer, c->nqps,
                 c->paths[0].dev->port.describe(), c->paths[1].dev->port.describe());
    else
      BRAID_TRACE(kNet, "InfiniBand connection {} {} ready: {} queue pairs on {}", c->sending ? "to" : "from",
                  c->peer, c->nqps, c->paths[0].dev->port.describe());
  }

  Status continue_connect(IbComm* c) {
    if (c->stage == Stage::Connecting) {
      pollfd p{c->fd, POLLOUT, 0};
      if (::poll(&p, 1, 0) <= 0) return Status::ok();
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err) return BRAID_ERROR(ncclSystemError, "connect: {}", std::strerror(err));
      BRAID_TRY(create_paths(c));
      BRAID_TRY(send_all(c->fd, &c->mine, sizeof(c->mine), setup_deadline(), nullptr));
      c->stage = Stage::AwaitReply;
    }
    if (c->stage == Stage::AwaitReply) {
      BRAID_TRY(read_some(c->fd, &c->theirs, sizeof(c->theirs), &c->theirs_got));
      if (c->theirs_got < sizeof(c->theirs)) return Status::ok();
      if (std::string why; !pkeys_reach(c->mine.path[0].pkey, c->theirs.path[0].pkey, &why))
        return BRAID_ERROR(ncclSystemError, "InfiniBand connection to {}: {}", c->peer, why);
      BRAID_TRY(take_hello(c));
      BRAID_TRY(path_ready(c, 0));
      BRAID_TRY(standby_ready(c));
      const char ready = char(c->npaths);  // the paths both ends use
      BRAID_TRY(send_all(c->fd, &ready, 1, setup_deadline(), nullptr));
      c->stage = Stage::Ready;
      say_ready(c);
    }
    return Status::ok();
  }

  Status continue_accept(IbComm* c) {
    if (c->stage == Stage::ReadInfo) {
      BRAID_TRY(read_some(c->fd, &c->theirs, sizeof(c->theirs), &c->theirs_got));
      if (c->theirs_got < sizeof(c->theirs)) return Status::ok();
      const IbHello& t = c->theirs;
      if (t.magic != kHandleMagic || t.path[0].nqps < 1 || t.path[0].nqps > uint32_t(kIbMaxQps))
        return BRAID_ERROR(ncclSystemError, "malformed connection request");
      const IbPort& port = c->paths[0].dev->port;
      if (std::string why; !pkeys_reach(port.pkey, t.path[0].pkey, &why)) {
        // Answered first, with this end's P_Key, so that the sender says why too.
        c->mine.magic = kHandleMagic;
        c->mine.npaths = 1;
        c->mine.path[0].nqps = t.path[0].nqps;
        c->mine.path[0].pkey = port.pkey;
        (void)send_all(c->fd, &c->mine, sizeof(c->mine), setup_deadline(), nullptr);
        return BRAID_ERROR(ncclSystemError, "InfiniBand connection from {}: {}", c->peer, why);
      }
      c->nqps = int(t.path[0].nqps);
      c->round_robin = t.round_robin == 1;
      c->receives = IbReceives(c->spread());
      if (t.npaths == 2) add_standby(c, index_of(c->paths[0].dev));
      BRAID_TRY(create_paths(c));
      BRAID_TRY(take_hello(c));
      BRAID_TRY(path_ready(c, 0));
      BRAID_TRY(standby_ready(c));
      c->mine.npaths = uint32_t(c->npaths);
      BRAID_TRY(send_all(c->fd, &c->mine, sizeof(c->mine), setup_deadline(), nullptr));
      c->stage = Stage::AwaitReady;
    }
    if (c->stage == Stage::AwaitReady) {
      char ready = 0;
      size_t got = 0;
      BRAID_TRY(read_some(c->fd, &ready, 1, &got));
      if (got == 0) return Status::ok();
      if (ready < c->npaths) drop_standby(c, BRAID_ERROR(ncclSystemError, "the sender could not ready its own"));
      c->stage = Stage::Ready;
      say_ready(c);
    }
    return Status::ok();
  }

  void destroy(IbComm* c) {
    {
      std::lock_guard<std::mutex> lock(events_mutex_);  // no event of its queues read and not yet acknowledged
      for (IbPath& path : c->paths) destroy_path(&path);
    }
    if (c->fd >= 0) ::close(c->fd);
    delete c;
  }

  std::vector<std::unique_ptr<IbDevice>> devices_;
  int epoll_ = -1;
  IbSpread spread_;  // of the connections this end sends on
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

// Port failover (ib_failover.h): the side channel's messages and the
// steps each end takes.
#include "src/transport/ibverbs/ib_failover.h"

#include <sys/socket.h>

#include <cstring>

#include "src/base/env.h"
#include "src/base/net.h"

namespace braid {
namespace {

constexpr uint32_t kSideMagic = 0x62666f31;  // "bfo1"
enum SideKind : uint32_t { kFail = 1, kResume = 2, kReady = 3 };

struct SideMessage {
  uint32_t magic;
  uint32_t kind;
  uint64_t value;
};
static_assert(sizeof(SideMessage) == sizeof(IbComm::side_in));

void send_side(IbComm* c, SideKind kind, uint64_t value) {
  const SideMessage m{kSideMagic, kind, value};
  const Deadline deadline = Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
  Status s = send_all(c->fd, &m, sizeof(m), deadline, nullptr);
  if (!s.is_ok()) c->fail(std::move(s).context("telling the peer of a port failover (is its process gone?)"));
}

std::string port_name(const IbComm* c, int p) { return c->paths[p].dev->port.describe(); }

// Stops path 0: its queue pairs to the error state (nothing more lands or
// leaves), then what completed on it is taken in.
void stop_first_path(IbComm* c) {
  IbPath& path = c->paths[0];
  for (ibv_qp* qp : path.qps) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(qp, &a, IBV_QP_STATE);
  }
  ibv_wc wcs[16];
  for (int n; (n = ibv_poll_cq(path.cq, 16, wcs)) > 0;)
    for (int i = 0; i < n; ++i) handle_completion(c, 0, wcs[i]);
}

// Both ends: the first sign of a failure (a local error, or the peer's word).
void start_failover(IbComm* c, const std::string& why) {
  c->failover = c->sending ? Failover::AwaitResume : Failover::AwaitReady;
  BRAID_WARN("InfiniBand connection {} {}: {}; failing over from {} to {} (NCCL_IB_RESILIENCY_PORT_FAILOVER)",
             c->sending ? "to" : "from", c->peer, why, port_name(c, 0), port_name(c, 1));
  stop_first_path(c);
  send_side(c, kFail, 0);
  if (!c->sending) {
    c->resend_next = c->receives.rewind();  // the receiver keeps it: where its credits start again
    send_side(c, kResume, c->resend_next);
  }
}

// The sender: the receiver has every message before `resume`.
void sender_resume(IbComm* c, uint64_t resume) {
  if (resume > c->next_send)
    return c->fail(BRAID_ERROR(ncclInternalError, "port failover: the receiver resumes at message {}, {} were sent",
                               resume, c->next_send));
  for (uint64_t seq = (c->next_send > kIbMaxRequests ? c->next_send - kIbMaxRequests : 0); seq < c->next_send; ++seq) {
    IbRequest& r = c->requests[seq % kIbMaxRequests];
    if (seq < resume) {
      if (r.busy && r.seq == seq) r.parts_left = 0;
      continue;
    }
    if (!r.busy || r.seq != seq)
      return c->fail(BRAID_ERROR(ncclRemoteError,
                                 "port failover: message {} completed here but did not arrive whole at the receiver "
                                 "(its buffer may have been reused): cannot write it again",
                                 seq));
    r.parts_left = uint32_t(c->nqps);
  }
  c->credits.restart(resume);
  c->resend_next = resume;
  c->resend_end = c->next_send;
  c->active = 1;
  c->failover = Failover::Done;
  send_side(c, kReady, 0);
  BRAID_INFO(kNet, "InfiniBand connection to {}: on {} now, writing messages {}..{} again", c->peer, port_name(c, 1),
             resume, c->next_send);
}

// The receiver: the sender is on the new path; credit again from where it resumes.
void receiver_ready(IbComm* c) {
  c->active = 1;
  c->failover = Failover::Done;
  for (uint64_t seq = c->resend_next; seq < c->receives.next() && c->error.is_ok(); ++seq) {
    Status s = post_credit(c, c->requests[seq % kIbMaxRequests]);
    if (!s.is_ok()) c->fail(std::move(s));
  }
  BRAID_INFO(kNet, "InfiniBand connection from {}: on {} now, receiving from message {} again", c->peer,
             port_name(c, 1), c->resend_next);
}

void handle_side(IbComm* c, const SideMessage& m) {
  if (m.magic != kSideMagic)
    return c->fail(BRAID_ERROR(ncclInternalError, "a malformed message on the connection's side channel"));
  if (m.kind == kFail) {
    if (c->failover == Failover::None) start_failover(c, "the peer's end of the path failed");
  } else if (m.kind == kResume && c->sending && c->failover == Failover::AwaitResume) {
    sender_resume(c, m.value);
  } else if (m.kind == kReady && !c->sending && c->failover == Failover::AwaitReady) {
    receiver_ready(c);
  } else {
    c->fail(BRAID_ERROR(ncclInternalError, "port failover: message {} out of turn", m.kind));
  }
}

// Whether the port of path 0 is no longer active (soft-RoCE fails a send on
// a netdev that went down with a local QP error, not a retry error).
bool port_down(const IbComm* c) {
  const IbPort& port = c->paths[0].dev->port;
  ibv_port_attr a{};
  return ibv_query_port(port.context, uint8_t(port.port), &a) != 0 || a.state != IBV_PORT_ACTIVE;
}

// The sender writes again, in order, each message the receiver lacks, as
// the new path's credits come.
void resend(IbComm* c) {
  while (c->error.is_ok() && c->resend_next < c->resend_end && !c->credits.empty()) {
    const IbRequest& r = c->requests[c->resend_next % kIbMaxRequests];
    IbCredit credit;
    Status s = c->credits.take(r.bytes, &credit);
    if (s.is_ok() && credit.seq != c->resend_next)
      s = BRAID_ERROR(ncclInternalError, "port failover: credit {} for message {}", credit.seq, c->resend_next);
    if (s.is_ok()) s = post_message(c, r, credit);
    if (!s.is_ok()) return c->fail(std::move(s));
    ++c->resend_next;
  }
}

}  // namespace

bool failover_wanted() { return env_nccl_int("NCCL_IB_RESILIENCY_PORT_FAILOVER").value_or(0) == 1; }

bool failover_takes(IbComm* c, const ibv_wc& wc) {
  if (c->npaths < 2 || c->failover != Failover::None) return false;
  // NCCL's two (the peer's port or the path is gone; flushed behind such an
  // error), or any error while the port itself is down.
  if (wc.status != IBV_WC_RETRY_EXC_ERR && wc.status != IBV_WC_WR_FLUSH_ERR && !port_down(c)) return false;
  if (c->path_failed == IBV_WC_SUCCESS) c->path_failed = wc.status;
  return true;
}

void failover_start(IbComm* c) {
  if (c->failover == Failover::None && c->error.is_ok())
    start_failover(c, fmt::format("a work request ended in {}", ibv_wc_status_str(c->path_failed)));
  c->path_failed = IBV_WC_SUCCESS;
}

void failover_progress(IbComm* c) {
  if (c->npaths < 2 || !c->error.is_ok()) return;
  while (c->error.is_ok()) {
    const ssize_t n = ::recv(c->fd, c->side_in + c->side_got, sizeof(c->side_in) - c->side_got, MSG_DONTWAIT);
    if (n <= 0) break;  // nothing yet, or the peer is gone (peer_gone says so)
    c->side_got += size_t(n);
    if (c->side_got < sizeof(c->side_in)) continue;
    SideMessage m;
    std::memcpy(&m, c->side_in, sizeof(m));
    c->side_got = 0;
    handle_side(c, m);
  }
  if (c->sending && c->failover == Failover::Done) resend(c);
}

bool failover_holds_sends(const IbComm* c) {
  return c->failover == Failover::AwaitResume || (c->failover == Failover::Done && c->resend_next < c->resend_end);
}

bool failover_holds_credits(const IbComm* c) { return c->failover == Failover::AwaitReady; }

bool path_is_live(const IbComm* c, int p) {
  return p == c->active && c->failover != Failover::AwaitResume && c->failover != Failover::AwaitReady;
}

}  // namespace braid

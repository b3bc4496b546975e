// One end of a connection of braid's InfiniBand net (ib_net.cc): its
// queue pairs on one port or, with NCCL_IB_RESILIENCY_PORT_FAILOVER=1, on
// two (a path each: the one in use and a standby on another port, ready to
// take over, ib_failover.h), its credits, its requests, and the TCP side
// channel both ends keep for the connection's life.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "src/base/log.h"
#include "src/base/status.h"
#include "src/transport/ibverbs/ib_device.h"
#include "src/transport/ibverbs/ib_mr_cache.h"
#include "src/transport/ibverbs/ib_protocol.h"

namespace braid {

constexpr int kIbMaxPaths = 2;

// One port of the net.  The device's event thread (ib_events.h) counts the
// port's events and notes a fatal event of the device (its ibv_event_type
// + 1; 0: none); connections read both on their owner's thread.
struct IbDevice {
  IbPort port;
  ibv_comp_channel* channel = nullptr;
  std::unique_ptr<IbMrCache> mrs;
  std::atomic<uint64_t> port_events{0};
  std::atomic<int> device_fatal{0};
};

// What one end says of one path's queue pairs in the setup exchange.
struct QpInfo {
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

// The setup exchange: the sender's offer, the receiver's answer.  npaths 2:
// a standby path follows the first (the sender asks; the receiver grants it
// where it has another port).
struct IbHello {
  uint64_t magic;
  uint32_t npaths;
  uint32_t round_robin;  // the sender's IbSpread (the receiver's answer repeats it)
  QpInfo path[kIbMaxPaths];
};

// A buffer registered on every path's device: the handle reg_mr gives.
struct IbMemory {
  IbMrCache::Entry* on[kIbMaxPaths] = {};
  uint32_t lkey(int path) const { return on[path] ? on[path]->mr->lkey : 0; }
  uint32_t rkey(int path) const { return on[path] ? on[path]->mr->rkey : 0; }
};

struct IbComm;

struct IbRequest {
  IbComm* comm = nullptr;
  bool busy = false;
  bool sending = false;
  uint64_t seq = 0;
  uint32_t parts_left = 0;
  uint64_t bytes = 0;  // a send's length; a receive's room, then its length
  // The buffer, kept for a failover: a send is written again from it, a
  // receive's credit given again.
  void* data = nullptr;
  const IbMemory* memory = nullptr;
};

// One path: a completion queue and the queue pairs on one port, and the
// credit buffers registered there.  What the ends say of it is the hellos'
// path[p] (IbComm::mine, theirs).
struct IbPath {
  IbDevice* dev = nullptr;
  ibv_cq* cq = nullptr;
  std::vector<ibv_qp*> qps;
  // RoCE: the GID its queue pairs use (the port's, else the one chosen when
  // they were last made anew: the table may change under a running job).
  GidEntry gid;
  // Credits: received into (sender) or sent from (receiver) these.
  IbCredit* credit_buf = nullptr;
  ibv_mr* credit_mr = nullptr;
  // Stopped (a failure, or a move off it): its queue pairs are in the error
  // state and nothing goes over it until port recovery makes it anew with
  // the peer.
  bool stopped = false;
  // Port recovery: made anew since it was last stopped, so an offer the peer
  // turned down is made again with the same queue pairs.
  bool made_anew = false;
  // Asynchronous events (ib_events.h): the first fatal event of its queue
  // pairs or completion queue (ibv_event_type + 1; 0: none), which the
  // device's event thread notes (they carry this path as their context),
  // and the port events of its port that the connection has taken in.
  std::atomic<int> fatal_event{0};
  uint64_t port_events_seen = 0;
  uint64_t port_events_at_make = 0;  // the port's events when its queue pairs were made
};

enum class Stage { Connecting, AwaitReply, ReadInfo, AwaitReady, Ready };

// Where a connection is in a port failover (ib_failover.h).
enum class Failover {
  None,         // on the active path, the other a ready standby
  AwaitResume,  // sender: the active path stopped, waiting for the receiver's first incomplete message
  AwaitReady,   // receiver: the active path stopped, waiting for the sender to be on the other
  Done,         // on the other path, none standing by: a failure now is the connection's end unless port
                // recovery may make a path anew (a port down, or a stopped path in use, is waited for, up to
                // BRAID_TIMEOUT)
  Rearming,     // sender, port recovery: a failed path made anew here, waiting for the receiver's
};

struct IbComm {
  IbComm(IbDevice* dev, bool sending, IbSpread spread)
      : sending(sending), nqps(spread.nqps), round_robin(spread.round_robin), receives(spread) {
    paths[0].dev = dev;
  }
  const bool sending;
  int nqps;
  bool round_robin;  // how messages are spread over the queue pairs (ib_protocol.h)
  IbSpread spread() const { return {nqps, round_robin}; }
  int npaths = 1;
  int active = 0;  // the path in use
  int fd = -1;
  std::string peer;  // ip:port of the other end's side channel, for messages
  Stage stage = Stage::Connecting;
  IbHello mine{}, theirs{};
  size_t theirs_got = 0;
  IbPath paths[kIbMaxPaths];
  IbCredits credits;    // sender
  IbReceives receives;  // receiver
  IbRequest requests[kIbMaxRequests];
  uint64_t next_send = 0;
  Status error;
  std::chrono::steady_clock::time_point next_liveness_check{};
  // Failover: its stage, the side channel's partial message, and (sender)
  // the messages to write again, [resend_next, resend_end) (the receiver
  // keeps where it resumes in resend_next).
  Failover failover = Failover::None;
  ibv_wc_status path_failed = IBV_WC_SUCCESS;  // the error a failover is to start for
  char side_in[16 + sizeof(QpInfo)] = {};  // a side message, and the QpInfo a rearm carries
  size_t side_got = 0;
  uint64_t resend_next = 0, resend_end = 0;
  // Port recovery (NCCL_IB_RESILIENCY_PORT_RECOVERY=1): when the failed
  // path's port is next looked at, and how many failures there were.
  std::chrono::steady_clock::time_point next_recovery_check{};
  int failures = 0;  // failovers for a failure (not moves back)
  // Stranded (both paths stopped), the sender: the receiver could not take
  // the other path back (its port there is down), so the next offer is the
  // path in use, made anew in place; the two then take turns.
  bool rearm_in_place = false;
  std::string recovery_said[kIbMaxPaths];  // per path, the last "not yet" of port recovery logged (say_once)
  // After a failover (nothing standing by): the active path's port here
  // was down when last looked at, or the peer says its end's port of path
  // p is down, so new sends and credits (and the sender's writing again)
  // wait for a port to come back instead of failing on it; the receiver's
  // first held credit (kNoneHeld: none).
  bool active_port_down = false;
  bool peer_port_down[kIbMaxPaths] = {};
  std::chrono::steady_clock::time_point held_until{};  // while held: when it fails instead
  static constexpr uint64_t kNoneHeld = UINT64_MAX;
  uint64_t credits_held_from = kNoneHeld;

  IbPath& path() { return paths[active]; }
  void fail(Status s) {
    if (error.is_ok())
      error = std::move(s).context(fmt::format("InfiniBand connection {} {}", sending ? "to" : "from", peer));
  }
};

// A work request's id: what it is, and which.
enum WrKind : uint64_t { kWrData = 1, kWrCredit = 2, kWrRecvData = 3, kWrRecvCredit = 4 };
inline uint64_t wr_id(WrKind kind, uint64_t value) { return (uint64_t(kind) << 56) | value; }

// ib_path.cc: a path's queue pairs, from creation to ready-to-send, and
// the receives each end keeps posted.
Status create_path(IbComm* c, int p);
// Path p anew on its port, after a failure (port recovery, ib_failover.h):
// its queue pairs destroyed and what its completion queue still held
// dropped, new ones to INIT, and this end's QpInfo for them; path_ready and
// post_initial_recvs follow once the peer's is known.
Status rebuild_path(IbComm* c, int p);
Status path_ready(IbComm* c, int p);
Status post_recv(ibv_qp* qp, uint64_t id, ibv_sge* sge);
Status post_credit_recv(IbComm* c, int p, int i);
Status post_initial_recvs(IbComm* c, int p);
void destroy_path(IbPath* path);

// ib_net.cc: takes in a completion of path `p`.
void handle_completion(IbComm* c, int p, const ibv_wc& wc);
// Sends message `r` (its data, length and sequence number in
// the request) with `credit`, on the active path.
Status post_message(IbComm* c, const IbRequest& r, const IbCredit& credit);
// Gives the credit for receive `r` on the active path.
Status post_credit(IbComm* c, const IbRequest& r);

}  // namespace braid

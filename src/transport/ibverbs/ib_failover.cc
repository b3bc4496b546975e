// Port failover (ib_failover.h): the side channel's messages and the
// steps each end takes.
#include "src/transport/ibverbs/ib_failover.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "src/base/env.h"
#include "src/base/net.h"

namespace braid {
namespace {

constexpr uint32_t kSideMagic = 0x62666f31;  // "bfo1"
enum SideKind : uint32_t {
  kFail = 1,
  kResume = 2,
  kReady = 3,
  kRearm = 4,
  kRearmed = 5,
  kRearmLater = 6,
  kPortDown = 7,  // this end's port of path `value` is down: hold what would go to it
  kPortUp = 8,    // ... is active
  kRebuilt = 9,   // the sender: path `value`, the one in use, made anew in place, is ready: credit on it
};

// kFail's value: why the sender of it leaves the path in use.
enum FailWhy : uint64_t {
  kFailed = 0,     // it failed
  kMovedBack = 1,  // port recovery moves back to a recovered port
  kStranded = 2,   // it failed, and the standby there was dropped before use (its GID went): stop this end's too
};

struct SideMessage {
  uint32_t magic;
  uint32_t kind;
  uint64_t value;
};
static_assert(sizeof(IbComm::side_in) == sizeof(SideMessage) + sizeof(QpInfo));
bool carries_qp_info(uint32_t kind) { return kind == kRearm || kind == kRearmed; }

void send_side(IbComm* c, SideKind kind, uint64_t value, const QpInfo* info = nullptr) {
  char message[sizeof(IbComm::side_in)];
  const SideMessage m{kSideMagic, kind, value};
  std::memcpy(message, &m, sizeof(m));
  if (info) std::memcpy(message + sizeof(m), info, sizeof(QpInfo));
  const Deadline deadline = Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
  Status s = send_all(c->fd, message, sizeof(m) + (info ? sizeof(QpInfo) : 0), deadline, nullptr);
  if (!s.is_ok()) c->fail(std::move(s).context("telling the peer of a port failover (is its process gone?)"));
}

int other(const IbComm* c) { return 1 - c->active; }
std::string port_name(const IbComm* c, int p) { return c->paths[p].dev->port.describe(&c->paths[p].gid); }
// Where a failover goes: the standby's port, or the same one (a host with one port).
std::string new_place(const IbComm* c) {
  const int p = other(c);
  return c->paths[p].dev == c->paths[c->active].dev ? "new queue pairs on the same port" : port_name(c, p);
}
const char* way(const IbComm* c) { return c->sending ? "to" : "from"; }

// Whether the port of the active path is no longer active (soft-RoCE fails
// a send on a netdev that went down with a local QP error, not a retry error).
bool port_down(const IbComm* c) { return !port_is_active(c->paths[c->active].dev->port); }

// Port recovery's settings, NCCL's names and defaults, read once: the
// sender looks at them on every poll after a failover.
struct RecoverySettings {
  bool wanted;
  std::chrono::milliseconds delay;
  int attempts_max;
};
const RecoverySettings& recovery() {
  static const RecoverySettings settings{
      env_nccl_int("NCCL_IB_RESILIENCY_PORT_RECOVERY").value_or(0) == 1,
      std::chrono::milliseconds(
          std::max<int64_t>(env_nccl_int("NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY").value_or(200), 1)),
      int(std::max<int64_t>(env_nccl_int("NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX").value_or(5), 0))};
  return settings;
}

// Why port recovery cannot make path p anew yet, at INFO: once, and again
// only when it changes (it is tried every delay while a port stays down,
// for as long as the job runs, and stranded, on both paths in turn).
void say_once(IbComm* c, int p, std::string line) {
  if (line == c->recovery_said[p]) return;
  BRAID_INFO(kNet, "{}", line);
  c->recovery_said[p] = std::move(line);
}
void forget_said(IbComm* c) {
  for (std::string& said : c->recovery_said) said.clear();
}

// Whether a failure of the path in use is taken: a standby stands ready,
// or the connection may strand.
bool failure_taken(const IbComm* c) { return failover_ready(c) || failover_may_strand(c); }

// Stops path p: its queue pairs to the error state (nothing more lands or
// leaves), then what completed on it is taken in.
void stop_path(IbComm* c, int p) {
  IbPath& path = c->paths[p];
  path.made_anew = false;
  path.stopped = true;
  for (ibv_qp* qp : path.qps) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(qp, &a, IBV_QP_STATE);
  }
  ibv_wc wcs[16];
  for (int n; (n = ibv_poll_cq(path.cq, 16, wcs)) > 0;)
    for (int i = 0; i < n; ++i) handle_completion(c, p, wcs[i]);
}

// Both ends: the first sign of a failure (a local error, or the peer's
// word), or (`planned`) the sender moving back to a recovered port.
void start_failover(IbComm* c, const std::string& why, bool planned = false) {
  // A standby whose GID left the table (its event not yet taken in) is dropped: the connection strands,
  // or without port recovery ends here rather than hang on it, as it does where the event dropped it.
  if (!planned) {
    (void)failover_drop_lost_standby(c);
    if (failover_standby_dropped(c) && !failover_may_strand(c))
      return c->fail(BRAID_ERROR(ncclSystemError, "{}{}", why, failover_lost_standby(c)));
  }
  // A standby dropped before use (its GID went): the peer still has its end of it ready.
  const bool dropped_standby = failover_standby_dropped(c);
  const FailWhy sent = planned ? kMovedBack : dropped_standby ? kStranded : kFailed;
  c->failover = c->sending ? Failover::AwaitResume : Failover::AwaitReady;
  if (planned) {
    BRAID_INFO(kNet, "InfiniBand connection {} {}: {}; moving from {} to {} (NCCL_IB_RESILIENCY_PORT_RECOVERY)",
               way(c), c->peer, why, port_name(c, c->active), new_place(c));
  } else if (c->paths[other(c)].stopped) {
    ++c->failures;
    BRAID_WARN("InfiniBand connection {} {}: {}; nothing stands by (the path on {} is stopped too): waiting for a "
               "path made anew (NCCL_IB_RESILIENCY_PORT_RECOVERY)", way(c), c->peer, why, port_name(c, other(c)));
  } else {
    ++c->failures;
    BRAID_WARN("InfiniBand connection {} {}: {}; failing over from {} to {} (NCCL_IB_RESILIENCY_PORT_FAILOVER)",
               way(c), c->peer, why, port_name(c, c->active), new_place(c));
  }
  stop_path(c, c->active);
  send_side(c, kFail, sent);
  if (!c->sending) {
    c->resend_next = c->receives.rewind();  // the receiver keeps it: where its credits start again
    send_side(c, kResume, c->resend_next);
  }
}

// Whether either end's port of the path in use is down (after a failover,
// with nothing standing by: only then do the ends look and tell).
bool port_holds(const IbComm* c) {
  return (c->failover == Failover::Done || c->failover == Failover::Rearming) &&
         (c->active_port_down || c->peer_port_down[c->active]);
}
// Whether the path in use is stopped with no move under way (both failed:
// port recovery makes one anew); what would go over it waits, as for a port
// down.
bool stranded(const IbComm* c) { return c->paths[c->active].stopped && !failover_under_way(c); }
bool held(const IbComm* c) { return port_holds(c) || stranded(c); }

// Back to a standby standing ready (port recovery): what the ends said of
// their ports no longer holds anything, and a port of the path in use that
// went down meanwhile (its event taken in already) fails over at once.
void standing_by_again(IbComm* c) {
  c->failover = Failover::None;
  c->active_port_down = false;
  for (bool& down : c->peer_port_down) down = false;
  if (!stranded(c) && port_down(c)) failover_now(c, fmt::format("{} went down", port_name(c, c->active)));
}

// Looks at the active path's port, and tells the peer what it found where
// that changed (or `always`): while either end's port is down, what would
// go over the path waits (a link that flaps, or a standby on the same port
// as the failed path: the host has one).
void look_at_port(IbComm* c, bool always) {
  const bool down = port_down(c);
  if (!always && down == c->active_port_down) return;
  if (down != c->active_port_down)
    BRAID_INFO(kNet, "InfiniBand connection {} {}: {} is {}", way(c), c->peer, port_name(c, c->active),
               down ? "down: waiting for it" : "active");
  c->active_port_down = down;
  send_side(c, down ? kPortDown : kPortUp, uint64_t(c->active));
}

// Where a move landed, for the log: a stopped path waits to be made anew.
std::string landed(const IbComm* c) {
  return stranded(c) ? fmt::format("waiting for a path made anew (on {}, stopped)", port_name(c, c->active))
                     : fmt::format("on {} now", port_name(c, c->active));
}

// Either end, after a failover: on the other path, none standing by.  The
// peer hears how this end's port of it is, as the peer's may be why.
void moved(IbComm* c) {
  c->active = other(c);
  c->failover = Failover::Done;
  c->rearm_in_place = false;
  forget_said(c);
  c->next_recovery_check = std::chrono::steady_clock::now() + recovery().delay;
  look_at_port(c, true);
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
    r.parts_left = uint32_t(c->spread().parts());
  }
  c->credits.restart(resume);
  c->resend_next = resume;
  c->resend_end = c->next_send;
  moved(c);
  send_side(c, kReady, 0);
  BRAID_INFO(kNet, "InfiniBand connection to {}: {}, writing messages {}..{} again", c->peer, landed(c), resume,
             c->next_send);
}

// The receiver: credit for every receive from `first` on.
void credit_from(IbComm* c, uint64_t first) {
  for (uint64_t seq = first; seq < c->receives.next() && c->error.is_ok(); ++seq) {
    Status s = post_credit(c, c->requests[seq % kIbMaxRequests]);
    if (!s.is_ok()) c->fail(std::move(s));
  }
}

// The receiver: the sender is on the new path; credit again from where it
// resumes (once both ends' ports of it are up).
void receiver_ready(IbComm* c) {
  moved(c);
  c->credits_held_from = IbComm::kNoneHeld;  // among those given again here
  if (failover_holds_credits(c)) failover_hold_credit(c, c->resend_next);
  else credit_from(c, c->resend_next);
  BRAID_INFO(kNet, "InfiniBand connection from {}: {}, receiving from message {} again", c->peer, landed(c),
             c->resend_next);
}

// --- port recovery --------------------------------------------------------

// Path p, made anew here, to ready-to-send toward the peer's `theirs`, its receives posted.
Status ready_rebuilt(IbComm* c, int p, const QpInfo& theirs) {
  if (theirs.nqps != uint32_t(c->nqps))
    return BRAID_ERROR(ncclInternalError, "port recovery: the peer made {} queue pairs, not {}", theirs.nqps, c->nqps);
  c->theirs.path[p] = theirs;
  BRAID_TRY(path_ready(c, p));
  forget_said(c);  // it went on: a later wait is news again
  return post_initial_recvs(c, p);
}

// The sender, on one path after a failover: once the failed path's port
// here is active again, makes that path anew and offers it to the receiver.
// Where the path in use failed too, that one is made anew in place while
// the other's port is still down.
void rearm(IbComm* c) {
  int p = other(c);
  if (stranded(c) && (c->rearm_in_place || !port_is_active(c->paths[p].dev->port))) p = c->active;
  if (!port_is_active(c->paths[p].dev->port)) return;
  if (!c->paths[p].made_anew) {
    if (Status s = rebuild_path(c, p); !s.is_ok()) {
      say_once(c, p, fmt::format("InfiniBand connection to {}: cannot make the path on {} anew ({}); trying again "
                              "every {} ms", c->peer, port_name(c, p), s.message(), recovery().delay.count()));
      return;
    }
    c->paths[p].made_anew = true;
  }
  c->failover = Failover::Rearming;
  send_side(c, kRearm, uint64_t(p), &c->mine.path[p]);
}

// The receiver: credits held while no failover is under way to give them
// go out once the hold ends (receiver_ready gives them with the others).
void release_held_credits(IbComm* c) {
  if (c->credits_held_from == IbComm::kNoneHeld || failover_holds_credits(c)) return;
  credit_from(c, c->credits_held_from);
  c->credits_held_from = IbComm::kNoneHeld;
}

// The receiver: the sender offers path p anew: the other one, to stand by,
// or the one in use (both failed), on which it credits once the sender
// says its end is ready too (kRebuilt).
void receiver_rearm(IbComm* c, int p, const QpInfo& theirs) {
  Status s = port_is_active(c->paths[p].dev->port) ? rebuild_path(c, p)
                                                 : BRAID_ERROR(ncclSystemError, "its port here is not active");
  if (s.is_ok()) s = ready_rebuilt(c, p, theirs);
  if (!s.is_ok()) {
    say_once(c, p, fmt::format("InfiniBand connection from {}: not yet standing by on {}: {} (the sender offers it "
                            "again every {} ms)", c->peer, port_name(c, p), s.message(), recovery().delay.count()));
    return send_side(c, kRearmLater, uint64_t(p));
  }
  send_side(c, kRearmed, uint64_t(p), &c->mine.path[p]);
  if (p == c->active) {
    c->paths[p].made_anew = true;
    BRAID_INFO(kNet, "InfiniBand connection from {}: {} made anew (NCCL_IB_RESILIENCY_PORT_RECOVERY)", c->peer,
               port_name(c, p));
    return;
  }
  c->paths[p].stopped = false;
  BRAID_INFO(kNet, "InfiniBand connection from {}: standby on {} again (NCCL_IB_RESILIENCY_PORT_RECOVERY)", c->peer,
             port_name(c, p));
  standing_by_again(c);
}

// The receiver: the sender's end of the path in use, made anew, is ready.
void receiver_rebuilt(IbComm* c) {
  c->paths[c->active].stopped = false;
  BRAID_INFO(kNet, "InfiniBand connection from {}: on {} again, receiving from message {} (NCCL_IB_RESILIENCY_PORT_"
             "RECOVERY)", c->peer, port_name(c, c->active), c->resend_next);
}

// The sender: the receiver's end of path p, made anew, is ready too.  A
// failover under way here lands on it; the stopped path in use, made anew
// in place, takes the writing again; a standby again takes the traffic at
// once where it is path 0 (the connection's own port) or the path in use
// is stopped.
void sender_rearmed(IbComm* c, int p, const QpInfo& theirs) {
  if (Status s = ready_rebuilt(c, p, theirs); !s.is_ok())
    return c->fail(std::move(s).context(fmt::format("port recovery on {}", port_name(c, p))));
  c->paths[p].stopped = false;
  if (c->failover == Failover::AwaitResume) return;  // the peer's failover was under way
  if (p == c->active) {
    c->failover = Failover::Done;
    send_side(c, kRebuilt, uint64_t(p));
    BRAID_INFO(kNet, "InfiniBand connection to {}: on {} again, writing messages {}..{} again "
               "(NCCL_IB_RESILIENCY_PORT_RECOVERY)", c->peer, port_name(c, p), c->resend_next, c->resend_end);
    return;
  }
  BRAID_INFO(kNet, "InfiniBand connection to {}: standby on {} again (NCCL_IB_RESILIENCY_PORT_RECOVERY)", c->peer,
             port_name(c, p));
  const bool was_stranded = stranded(c);
  standing_by_again(c);
  if ((p == 0 || was_stranded) && c->failover == Failover::None)
    start_failover(c, fmt::format("{} is back", port_name(c, p)), true);
}

void handle_side(IbComm* c, const SideMessage& m, const QpInfo& info) {
  if (m.magic != kSideMagic)
    return c->fail(BRAID_ERROR(ncclInternalError, "a malformed message on the connection's side channel"));
  const bool offers_other = m.value == uint64_t(other(c));
  // Path `value` made anew: the other one, or (both failed) the one in use.
  const bool offers_either = offers_other || (m.value == uint64_t(c->active) && stranded(c));
  if (m.kind == kPortDown || m.kind == kPortUp) {  // in any stage: it applies to path `value` whenever in use
    if (m.value < uint64_t(kIbMaxPaths)) c->peer_port_down[m.value] = m.kind == kPortDown;
  } else if (m.kind == kFail) {
    // The peer dropped its standby (its GID went, on the same port): so does this end, before a move lands on it.
    if (m.value == kStranded && (c->failover == Failover::None || failover_under_way(c)) &&
        !c->paths[other(c)].stopped)
      stop_path(c, other(c));
    if (c->failover == Failover::None || (m.value != kMovedBack && failover_may_strand(c))) {
      start_failover(c, m.value == kMovedBack ? "the peer moves back to a recovered port"
                                              : "the peer's end of the path failed",
                     m.value == kMovedBack);
    } else if (c->failover == Failover::Done || c->failover == Failover::Rearming) {
      c->fail(BRAID_ERROR(ncclSystemError, "the peer's end of the path in use failed, and nothing stands by"));
    }
  } else if (m.kind == kResume && c->sending && c->failover == Failover::AwaitResume) {
    sender_resume(c, m.value);
  } else if (m.kind == kReady && !c->sending && c->failover == Failover::AwaitReady) {
    receiver_ready(c);
  } else if (m.kind == kRebuilt && !c->sending && c->failover == Failover::Done && m.value == uint64_t(c->active) &&
             c->paths[c->active].made_anew) {
    receiver_rebuilt(c);
  } else if (m.kind == kRearm && !c->sending && c->failover == Failover::Done && offers_either) {
    receiver_rearm(c, int(m.value), info);
  } else if (m.kind == kRearm && !c->sending && c->failover == Failover::AwaitReady) {
    send_side(c, kRearmLater, m.value);  // offered as this end failed over: later, on the path it is then
  } else if (m.kind == kRearmed && c->sending && c->failover == Failover::Rearming && offers_either) {
    sender_rearmed(c, int(m.value), info);
  } else if (m.kind == kRearmed && c->sending && c->failover == Failover::AwaitResume && offers_other) {
    sender_rearmed(c, other(c), info);  // the failover lands on it
  } else if (m.kind == kRearmLater && c->sending) {
    if (c->failover == Failover::Rearming) c->failover = Failover::Done;  // rearm tries again after the delay
    // Stranded, the receiver's port may be down on one path and up on the
    // other, which the sender cannot see from its own ports: the next offer
    // is the path it did not offer now.
    c->rearm_in_place = m.value == uint64_t(other(c));
  } else {
    c->fail(BRAID_ERROR(ncclInternalError, "port failover: message {} out of turn", m.kind));
  }
}

// The sender writes again, in order, each message the receiver lacks, as
// the new path's credits come.
void resend(IbComm* c) {
  if (held(c)) return;
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

void failover_look(IbComm* c) {
  if (c->failover != Failover::Done && c->failover != Failover::Rearming) {
    c->active_port_down = false;  // a move under way looks again when it lands (moved)
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  // A port that stays down ends the connection after BRAID_TIMEOUT, also
  // where nothing above braid's net would (NCCL with braid's net plugin).
  if (!held(c)) {
    c->held_until = {};
  } else if (c->held_until == std::chrono::steady_clock::time_point{}) {
    c->held_until = now + std::chrono::seconds(env_int("BRAID_TIMEOUT"));
  } else if (now > c->held_until) {
    if (!port_holds(c))
      return c->fail(BRAID_ERROR(ncclSystemError, "both paths failed, and port recovery made none anew within "
                                 "BRAID_TIMEOUT ({} s)", env_int("BRAID_TIMEOUT")));
    return c->fail(BRAID_ERROR(ncclSystemError, "{} of the path in use has been down for BRAID_TIMEOUT ({} s)",
                               c->active_port_down ? port_name(c, c->active) : "the peer's port",
                               env_int("BRAID_TIMEOUT")));
  }
  if (now < c->next_recovery_check) return;
  c->next_recovery_check = now + recovery().delay;
  look_at_port(c, false);
  // Writing again waits for it too, unless the port in use is down: the
  // move back then counts again what the receiver lacks (sender_resume).
  if (recovery().wanted && c->failures <= recovery().attempts_max && c->sending &&
      c->failover == Failover::Done && (c->resend_next >= c->resend_end || held(c)))
    rearm(c);
}

bool failover_takes(IbComm* c, const ibv_wc& wc) {
  if (!failure_taken(c)) return false;
  // NCCL's two (the peer's port or the path is gone; flushed behind such an
  // error), or any error while the port itself is down or after it was
  // (a queue pair can break while its port is down, and fail its next
  // send once the port is back).
  const IbPath& path = c->paths[c->active];
  const bool port_went_down = port_down(c) || path.dev->port_events.load() != path.port_events_at_make;
  if (wc.status != IBV_WC_RETRY_EXC_ERR && wc.status != IBV_WC_WR_FLUSH_ERR && !port_went_down) return false;
  if (c->path_failed == IBV_WC_SUCCESS) c->path_failed = wc.status;
  return true;
}

bool failover_ready(const IbComm* c) {
  return c->npaths >= 2 && c->failover == Failover::None && !c->paths[0].stopped && !c->paths[1].stopped;
}

bool failover_standby_dropped(const IbComm* c) {
  return c->npaths >= 2 && c->failover == Failover::None && c->paths[other(c)].stopped;
}

std::string failover_lost_standby(const IbComm* c) {
  if (!failover_standby_dropped(c)) return "";
  return fmt::format("; the standby on {} was stopped when its GID left the port's table, and nothing else stands by",
                     port_name(c, other(c)));
}

bool failover_drop_lost_standby(IbComm* c) {
  if (!failover_ready(c) || gid_still_there(c->paths[other(c)].dev->port, c->paths[other(c)].gid)) return false;
  stop_path(c, other(c));
  return true;
}

// (Also with a standby stopped before it was used: its GID went with the
// one in use, on the same port.)  A strand counts as a failure.
bool failover_may_strand(const IbComm* c) {
  const bool none_standing_by =
      c->failover == Failover::Done || c->failover == Failover::Rearming || failover_standby_dropped(c);
  return c->npaths >= 2 && none_standing_by && recovery().wanted && c->failures < recovery().attempts_max;
}

bool failover_under_way(const IbComm* c) {
  return c->failover == Failover::AwaitResume || c->failover == Failover::AwaitReady;
}

void failover_now(IbComm* c, const std::string& why) {
  if (failure_taken(c) && c->error.is_ok()) start_failover(c, why);
}

void failover_start(IbComm* c) {
  if (failure_taken(c) && c->error.is_ok())
    start_failover(c, fmt::format("a work request ended in {}", ibv_wc_status_str(c->path_failed)));
  c->path_failed = IBV_WC_SUCCESS;
}

void failover_progress(IbComm* c) {
  if (c->npaths < 2 || !c->error.is_ok()) return;
  while (c->error.is_ok()) {
    SideMessage m;
    size_t want = sizeof(m);
    if (c->side_got >= sizeof(m)) {
      std::memcpy(&m, c->side_in, sizeof(m));
      if (carries_qp_info(m.kind)) want += sizeof(QpInfo);
    }
    const ssize_t n = ::recv(c->fd, c->side_in + c->side_got, want - c->side_got, MSG_DONTWAIT);
    if (n <= 0) break;  // nothing yet, or the peer is gone (peer_gone says so)
    c->side_got += size_t(n);
    if (c->side_got < want) continue;
    std::memcpy(&m, c->side_in, sizeof(m));
    if (carries_qp_info(m.kind) && want == sizeof(m)) continue;  // its QpInfo follows
    QpInfo info{};
    if (want > sizeof(m)) std::memcpy(&info, c->side_in + sizeof(m), sizeof(info));
    c->side_got = 0;
    handle_side(c, m, info);
  }
  if (c->sending && c->failover != Failover::AwaitResume) resend(c);
  failover_look(c);
  if (!c->sending) release_held_credits(c);
}

bool failover_holds_sends(const IbComm* c) {
  return c->failover == Failover::AwaitResume || c->resend_next < c->resend_end || held(c);
}

bool failover_holds_credits(const IbComm* c) { return c->failover == Failover::AwaitReady || held(c); }

void failover_hold_credit(IbComm* c, uint64_t seq) {
  if (c->credits_held_from == IbComm::kNoneHeld) c->credits_held_from = seq;
}

bool path_is_live(const IbComm* c, int p) {
  return p == c->active && !failover_under_way(c) && !c->paths[p].stopped;
}

}  // namespace braid

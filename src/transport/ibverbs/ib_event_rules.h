// What a connection of braid's InfiniBand net does with the asynchronous
// events of its ports and devices (ib_events.h reads them): the rules
// alone, apart from verbs, so that they are tested where no device is.
//
// NCCL (2.23's NCCL_IB_RETURN_ASYNC_EVENTS, default 1) warns of every
// event and stops a connection on a fatal one (a queue pair or completion
// queue in error, the device lost) instead of letting it wait.  braid does
// so too, and puts the events to work for port failover: a fatal event on
// the path in use, or its port going down, moves the connection to its
// standby path at once, where one stands ready, rather than when the
// completions show it (on InfiniBand, a link that went down shows only
// once a send has run out of retries: NCCL_IB_RETRY_CNT tries of
// 4.096 us * 2^NCCL_IB_TIMEOUT, 8.6 s at braid's default and 34 s at
// NCCL's); and any port event makes port recovery's next look at the
// ports due at once, not after its delay.  A port going down fails no
// connection by itself: where nothing stands by, a link back within the
// retries loses nothing, so the completions decide.  A RoCE GID that left
// its port's table (the address removed or changed: IBV_EVENT_GID_CHANGE)
// leaves queue pairs that use it reaching nothing: that path is left at
// once for a ready standby or, with port recovery, for a path made anew
// with the GID the table has now; a standby whose GID went (the same port,
// or the other) is stopped before it is used, and the path in use, should
// its port then go down, strands at once (port recovery makes one anew).
// With 0 the events are only logged, as NCCL's; the port's event count
// still tells port failover that an error on a path came after its port
// went down (ib_failover.h).
#pragma once

namespace braid {

// What a connection has seen since it last looked (on its owner's thread).
struct IbEventsSeen {
  bool path_fatal = false;        // a fatal event on the path in use: its queue pairs, completion queue or device
  bool port_changed = false;      // a port event on the port of one of its paths
  bool active_port_down = false;  // the port of the path in use is not active (looked at after a port event)
  bool active_gid_gone = false;   // the GID of the path in use left its port's table (RoCE: its address went)
  bool standby_ready = false;     // a standby path stands ready, on an active port of a device in no fatal state
  bool can_remake = false;        // none does, but port recovery may make a path anew: the connection waits for it
  bool standby_dropped = false;   // no failover yet, but the standby was stopped before use (its GID went)
  bool moving = false;            // a failover is under way (it leaves the path in use already)
};

enum class IbEventStep {
  None,
  LookNow,   // port recovery looks at the ports at once (ib_failover.h)
  FailOver,  // to the standby path now (or, none ready, stop the path and wait for one made anew)
  Fail,      // the connection ends with the event's error
};

inline IbEventStep step_for(const IbEventsSeen& seen) {
  if (seen.moving) return IbEventStep::None;
  if (seen.path_fatal) return seen.standby_ready || seen.can_remake ? IbEventStep::FailOver : IbEventStep::Fail;
  if (!seen.port_changed) return IbEventStep::None;
  if (seen.active_port_down && seen.standby_ready) return IbEventStep::FailOver;
  // Nothing waits for a port before the first failover: with the standby dropped, only a strand
  // (port recovery) moves the connection off a port that is down.
  if (seen.active_port_down && seen.standby_dropped && seen.can_remake) return IbEventStep::FailOver;
  if (seen.active_gid_gone && (seen.standby_ready || seen.can_remake)) return IbEventStep::FailOver;
  return IbEventStep::LookNow;
}

}  // namespace braid

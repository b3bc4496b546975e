// Port failover for braid's InfiniBand connections: NCCL 2.29.7's
// NCCL_IB_RESILIENCY_PORT_FAILOVER=1 ("traffic continues on the surviving
// ports when a local link fails").
//
// With it set (and a second port on each end), every connection also sets
// up a standby path: queue pairs on another port, ready-to-send, their
// receives posted, idle.  When a work request on the path in use completes
// with a transport error (retries exhausted, or flushed behind such an
// error; any error while its port is down, or after it went down since the
// path's queue pairs were made), that end stops the path (its queue pairs
// to the error state, so nothing more lands), drains what completed on it,
// and tells the other end over the connection's TCP side channel, which
// does the same.  Then:
//  - the receiver rewinds to its first receive not complete (each queue
//    pair delivers in order, so every earlier one is: ib_protocol.h) and
//    sends that sequence number;
//  - the sender counts every message before it as delivered, moves to the
//    standby path, and says it is there;
//  - the receiver moves too and gives credit again, on the new path, for
//    every receive from that number on; the sender writes those messages
//    again, whole, from its buffers, before any new one.
// Writing a message again is harmless: it goes to the same place, and the
// receiver forgot its parts.  A failure while no standby is ready (unless
// port recovery may still make a path anew: "stranded", below), a peer
// that is gone (the side channel closes), or a send that completed though
// the receiver says it did not arrive (a completion the receiver's drain
// did not see yet) end the connection with an error, as without failover.
//
// Port recovery, NCCL 2.30's NCCL_IB_RESILIENCY_PORT_RECOVERY=1: after a
// failover the sender looks at the failed path's port every
// NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY ms (200) while the
// connection is used; once it is active again it makes that path anew
// (new queue pairs on the same completion queue and registrations) and
// offers them over the side channel (kRearm, with its QpInfo).  The
// receiver, if its own port is active too, does the same and answers with
// its own (kRearmed; else kRearmLater, and the sender offers the same
// queue pairs again later): the path stands by again, so a later failure
// fails over too.  When the path made anew is the connection's own (path
// 0), the sender then moves the traffic back to it, by the failover's
// steps with no failure behind them (INFO, not WARN), and the path it
// leaves is made anew as standby in turn.  A connection recovers from at
// most NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX failures (5); after
// that a failover is its last, as without recovery.
//
// Stranded (braid's addition: both ports of a host down, its switch gone):
// with recovery attempts left, a failure of the path in use with nothing
// standing by runs the failover's steps too (kFail says kStranded: the
// peer stops its other path as well), and the move lands on the other,
// stopped path.  Sends, credits and the writing again then wait, for at
// most BRAID_TIMEOUT, until the sender makes a path anew on a port that is
// active again: the other one (it stands by, and the traffic moves to it
// at once), or, while that port is still down, the stopped path in use in
// place (kRearm naming it; the receiver credits on it once the sender says
// its end is ready, kRebuilt).  The sender sees only its own ports: where
// the receiver declines the other path (its port there is down), the next
// offer is the path in use, and the two take turns until one is taken.
// Paths made anew take the port's GID as it is then (ib_path.cc): a RoCE
// address that changed, or came back at another index, is followed; a
// path whose GID left the table is left at once, and a standby whose GID
// went is stopped before it is used (ib_event_rules.h); without port
// recovery a failure then ends the connection, saying so.
//
// Side-channel messages that cross one the other end sent are taken in
// where they land: a kRearm that meets this end's failover is answered
// kRearmLater, a kRearmed that meets it readies that path for the move
// under way, and a kRearmLater that comes late changes nothing.
//
// After a failover each end looks at its active path's port: when it
// lands on the path, and then every delay (at once after a port event:
// ib_events.h) while the connection is used or awaited.  It tells the peer
// what it found when that changes (kPortDown, kPortUp, naming the path).
// While either end's port of the path in use is down, new sends, credits
// and the sender's writing again wait there instead of failing on a dead
// port (a send into a dead port ends the connection, there being nothing
// standing by; a credit into the peer's would run out of retries).  So:
//  - a connection idle while its ports flip (its port fails, comes back,
//    then the port it failed over to fails, all between two of its
//    messages) waits, the sender makes the failed path anew and moves back
//    to it as above, and the credits held go out on it (or on the active
//    path, should its port come back first);
//  - a host with one port keeps the standby on that port (new queue pairs
//    beside the first): a link down for longer than the retries last fails
//    the first path, the connection moves to the standby and waits for the
//    port, then goes on (with recovery, the first is made anew and the
//    traffic moves back to it, so it stands by again).  Without failover a
//    link survives only what the retries last: NCCL_IB_RETRY_CNT tries of
//    4.096 us * 2^NCCL_IB_TIMEOUT.  BRAID_TIMEOUT still bounds the wait.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "src/transport/ibverbs/ib_comm.h"

namespace braid {

// NCCL_IB_RESILIENCY_PORT_FAILOVER=1: connections set up a standby path.
bool failover_wanted();
// An error completion on the path in use: whether a failover takes it
// (it is noted in path_failed; false: the connection fails with it).  The
// caller takes in the rest of its batch of completions, then starts the
// failover: the receiver's rewind must count every part that landed.
bool failover_takes(IbComm* c, const ibv_wc& wc);
void failover_start(IbComm* c);
// Reads the side channel and moves a failover on; the sender then writes
// again what it can.  Called with every poll of the completions.
void failover_progress(IbComm* c);
// After a failover, at most every delay (at once after a port event): looks
// at the active path's port and tells the peer (new sends and credits wait
// while either end's is down, for at most BRAID_TIMEOUT); while recovery is
// possible, the sender makes the failed path anew once its port is up.
// Called with every poll, and before each new send or credit (the
// connection may have been idle since the last look).
void failover_look(IbComm* c);
// Whether a standby path stands ready (two paths, no failover since), and
// whether a failover is under way (its path stopped, the other not yet in
// use).
bool failover_ready(const IbComm* c);
bool failover_under_way(const IbComm* c);
// Whether a failure of the path in use with nothing standing by is still
// taken: port recovery is on and has attempts left, so the connection
// stops the path and waits for one made anew ("stranded").
bool failover_may_strand(const IbComm* c);
// Stops a ready standby whose GID left its port's table, before it is used
// (a failover onto it would write from an address that is gone); a failure
// of the path in use then strands the connection, where port recovery may
// make a path anew.  Whether it stopped one.
bool failover_drop_lost_standby(IbComm* c);
// Whether that happened, with no failover since; and then "; the standby
// on ... was stopped ...", for the error of a failure nothing takes (else "").
bool failover_standby_dropped(const IbComm* c);
std::string failover_lost_standby(const IbComm* c);
// Starts a failover to the standby path for a failure the completions did
// not show (an asynchronous event: ib_events.h), where one stands ready.
void failover_now(IbComm* c, const std::string& why);
// Whether a new send must wait: the sender is between paths, writes
// messages again first, or waits for its failed path made anew.
bool failover_holds_sends(const IbComm* c);
// Whether a new receive's credit waits (the receiver gives it with the
// others once the sender is on the new path, or once a port is up again);
// irecv notes the first one held.
bool failover_holds_credits(const IbComm* c);
void failover_hold_credit(IbComm* c, uint64_t seq);
// Whether completions on path `p` are those of the path in use (a stopped
// path's are drained for what landed, and nothing is posted on it again).
bool path_is_live(const IbComm* c, int p);

}  // namespace braid

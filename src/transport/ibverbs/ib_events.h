// The asynchronous events of braid's InfiniBand devices: a port that went
// down or came back, a queue pair or completion queue in error, a device
// lost.  One thread per opened device reads them (as NCCL's IbAsync
// thread), logs each and notes it where the connections look
// (IbDevice::port_events and device_fatal, IbPath::fatal_event); each
// connection takes them in on its owner's thread, with every poll and
// before each send or credit, by the rules of ib_event_rules.h.
#pragma once

#include <vector>

#include "src/transport/ibverbs/ib_comm.h"

namespace braid {

// Starts the thread that reads the events of one device context, whose
// ports are `ports` (the net's, which live as long as the process, as does
// the thread).
void watch_async_events(std::vector<IbDevice*> ports);

// Connection c takes in the events since it last did: it may fail over,
// fail, or make port recovery's next look due (ib_event_rules.h).  A few
// atomic loads while nothing happened.  Nothing under
// NCCL_IB_RETURN_ASYNC_EVENTS=0.
void take_async_events(IbComm* c);

}  // namespace braid

// Asynchronous events (ib_events.h): the reading thread, and what a
// connection does with what it noted.
#include "src/transport/ibverbs/ib_events.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/thread_name.h"
#include "src/transport/ibverbs/ib_event_rules.h"
#include "src/transport/ibverbs/ib_failover.h"

namespace braid {
namespace {

bool events_act() {
  static const bool act = env_nccl_int("NCCL_IB_RETURN_ASYNC_EVENTS").value_or(1) != 0;
  return act;
}

// Notes the first fatal event of a path or device: a later one says no more.
void note_fatal(std::atomic<int>* slot, ibv_event_type type) {
  int none = 0;
  slot->compare_exchange_strong(none, int(type) + 1);
}

const char* event_name(int noted) { return ibv_event_type_str(ibv_event_type(noted - 1)); }

void take_event(const std::vector<IbDevice*>& ports, const ibv_async_event& e) {
  const char* what = ibv_event_type_str(e.event_type);
  const std::string& device = ports.front()->port.device;
  switch (e.event_type) {
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_GID_CHANGE:  // a RoCE address added or removed: connections look at their GIDs
      for (IbDevice* d : ports) {
        if (d->port.port != int(e.element.port_num)) continue;
        d->port_events.fetch_add(1);
        if (e.event_type == IBV_EVENT_PORT_ERR) BRAID_WARN("InfiniBand port {}: {}", d->port.describe(), what);
        else BRAID_INFO(kNet, "InfiniBand port {}: {}", d->port.describe(), what);
      }
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_CQ_ERR: {
      const bool cq = e.event_type == IBV_EVENT_CQ_ERR;
      void* context = cq ? e.element.cq->cq_context : e.element.qp->qp_context;
      if (context) note_fatal(&static_cast<IbPath*>(context)->fatal_event, e.event_type);
      BRAID_WARN("InfiniBand device {}: {} (asynchronous event on a connection's {} {})", device, what,
                 cq ? "completion queue" : "queue pair", cq ? e.element.cq->handle : e.element.qp->qp_num);
      break;
    }
    case IBV_EVENT_DEVICE_FATAL:
      for (IbDevice* d : ports) note_fatal(&d->device_fatal, e.event_type);
      BRAID_WARN("InfiniBand device {}: {} (asynchronous event)", device, what);
      break;
    default:  // LID, P_Key or SM changes, path migration, ...: nothing for braid to do
      BRAID_INFO(kNet, "InfiniBand device {}: {} (asynchronous event)", device, what);
  }
}

void read_events(const std::vector<IbDevice*>& ports) {
  ibv_context* context = ports.front()->port.context;
  for (;;) {
    ibv_async_event e{};
    if (ibv_get_async_event(context, &e) != 0) {
      if (errno == EINTR) continue;
      BRAID_WARN("InfiniBand device {}: reading its asynchronous events failed ({}); its port and fatal events go "
                 "unseen from now on", ports.front()->port.device, std::strerror(errno));
      return;
    }
    take_event(ports, e);
    ibv_ack_async_event(&e);  // lets a queue pair or completion queue named in it be destroyed
  }
}

}  // namespace

void watch_async_events(std::vector<IbDevice*> ports) {
  if (ports.empty()) return;
  named_thread("braid ib events", with_caller_env([ports = std::move(ports)] { read_events(ports); })).detach();
}

void take_async_events(IbComm* c) {
  if (!events_act() || !c->error.is_ok()) return;
  IbPath& active = c->path();
  int fatal = active.stopped ? 0 : active.fatal_event.load();  // a stopped path's is moot: it is made anew
  if (!fatal && !active.stopped) fatal = active.dev->device_fatal.load();
  IbEventsSeen seen;
  seen.path_fatal = fatal != 0;
  for (int p = 0; p < c->npaths; ++p) {
    IbPath& path = c->paths[p];
    const uint64_t events = path.dev->port_events.load();
    seen.port_changed |= events != path.port_events_seen;
    path.port_events_seen = events;
  }
  if (!seen.path_fatal && !seen.port_changed) return;
  seen.moving = failover_under_way(c);
  const IbPath& standby = c->paths[1 - c->active];  // with two paths
  if (seen.port_changed && !seen.moving && !active.stopped) {
    seen.active_gid_gone = !gid_still_there(active.dev->port, active.gid);
    failover_drop_lost_standby(c);  // on the same port, or the other
  }
  if (failover_ready(c)) {
    seen.standby_ready = standby.fatal_event.load() == 0 && standby.dev->device_fatal.load() == 0 &&
                         port_is_active(standby.dev->port);
  }
  seen.can_remake = failover_may_strand(c);
  seen.standby_dropped = failover_standby_dropped(c);
  seen.active_port_down = seen.port_changed && !port_is_active(active.dev->port);
  const std::string port = active.dev->port.describe(&active.gid);
  switch (step_for(seen)) {
    case IbEventStep::None: return;
    case IbEventStep::LookNow: c->next_recovery_check = {}; return;
    case IbEventStep::FailOver:
      return failover_now(c, fatal                  ? fmt::format("{} (asynchronous event)", event_name(fatal))
                             : seen.active_gid_gone ? fmt::format("GID {} {} left {}:{} (asynchronous event)",
                                                                  active.gid.index, gid_to_string(active.gid.raw),
                                                                  active.dev->port.device, active.dev->port.port)
                                                    : fmt::format("{} went down (asynchronous event)", port));
    case IbEventStep::Fail:
      return c->fail(BRAID_ERROR(ncclSystemError,
                                 "{} on {} (an asynchronous event; NCCL_IB_RETURN_ASYNC_EVENTS=0 leaves such events to "
                                 "the completions)", event_name(fatal), port));
  }
}

}  // namespace braid

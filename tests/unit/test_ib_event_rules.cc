// What a connection does with its devices' asynchronous events
// (ib_event_rules.h).  The port events run for real in the rdma guests
// (rdma.failover); soft-RoCE raises no fatal event, so the fatal rules are
// tested only here.
#include <catch2/catch.hpp>

#include "src/transport/ibverbs/ib_event_rules.h"

using namespace braid;

namespace {

IbEventsSeen seen(bool path_fatal, bool port_changed, bool active_port_down, bool standby_ready, bool moving = false) {
  IbEventsSeen s;
  s.path_fatal = path_fatal;
  s.port_changed = port_changed;
  s.active_port_down = active_port_down;
  s.standby_ready = standby_ready;
  s.moving = moving;
  return s;
}

}  // namespace

TEST_CASE("InfiniBand events: a fatal event fails over where a standby stands ready, else ends the connection",
          "[unit][ib]") {
  CHECK(step_for(seen(true, false, false, true)) == IbEventStep::FailOver);
  CHECK(step_for(seen(true, true, true, true)) == IbEventStep::FailOver);
  CHECK(step_for(seen(true, false, false, false)) == IbEventStep::Fail);
  CHECK(step_for(seen(true, true, false, false)) == IbEventStep::Fail);
}

TEST_CASE("InfiniBand events: a fatal event with nothing standing by waits for a path made anew where port recovery "
          "may make one", "[unit][ib]") {
  IbEventsSeen s = seen(true, false, false, false);
  s.can_remake = true;
  CHECK(step_for(s) == IbEventStep::FailOver);
  // A port down alone still waits for the port (the completions decide), fatal or not.
  s.path_fatal = false;
  s.port_changed = s.active_port_down = true;
  CHECK(step_for(s) == IbEventStep::LookNow);
  s.moving = true;
  CHECK(step_for(s) == IbEventStep::None);
}

TEST_CASE("InfiniBand events: a port down moves to a ready standby, and never fails a connection by itself",
          "[unit][ib]") {
  CHECK(step_for(seen(false, true, true, true)) == IbEventStep::FailOver);
  // Nothing stands by (one port, or after a failover): a link back within the retries loses nothing,
  // and port recovery looks at once.
  CHECK(step_for(seen(false, true, true, false)) == IbEventStep::LookNow);
  // The port in use is up: the event was the standby's, or a port coming back.
  CHECK(step_for(seen(false, true, false, true)) == IbEventStep::LookNow);
  CHECK(step_for(seen(false, true, false, false)) == IbEventStep::LookNow);
}

TEST_CASE("InfiniBand events: a GID gone from the port leaves the path for a ready standby or one made anew",
          "[unit][ib]") {
  IbEventsSeen s = seen(false, true, false, true);
  s.active_gid_gone = true;
  CHECK(step_for(s) == IbEventStep::FailOver);
  s.standby_ready = false;  // none, or its GID went too (the same port)
  CHECK(step_for(s) == IbEventStep::LookNow);  // without port recovery the completions decide
  s.can_remake = true;
  CHECK(step_for(s) == IbEventStep::FailOver);
  s.moving = true;
  CHECK(step_for(s) == IbEventStep::None);
}

TEST_CASE("InfiniBand events: a port down with the standby dropped before use (its GID went) strands the "
          "connection where port recovery may make a path anew", "[unit][ib]") {
  IbEventsSeen s = seen(false, true, true, false);
  s.standby_dropped = true;
  CHECK(step_for(s) == IbEventStep::LookNow);  // without port recovery the completions decide
  s.can_remake = true;
  CHECK(step_for(s) == IbEventStep::FailOver);
  s.active_port_down = false;  // the event was another port's
  CHECK(step_for(s) == IbEventStep::LookNow);
  s.active_port_down = s.moving = true;
  CHECK(step_for(s) == IbEventStep::None);
}

TEST_CASE("InfiniBand events: nothing while none came, or while a failover already leaves the path", "[unit][ib]") {
  CHECK(step_for(seen(false, false, false, true)) == IbEventStep::None);
  CHECK(step_for(seen(false, false, false, false)) == IbEventStep::None);
  CHECK(step_for(seen(true, true, true, true, true)) == IbEventStep::None);
  CHECK(step_for(seen(true, false, false, false, true)) == IbEventStep::None);
}

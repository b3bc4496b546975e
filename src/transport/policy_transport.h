// A communicator's transports as its TransportPolicy says
// (transport_policy.h): shared memory to the ranks of this host where the
// policy allows it; to the others, and to this host's ranks where it does
// not, the net the ranks agree on (net/net_choice.h) or TCP sockets.  One
// routing transport (router.h) over them.  The communicator's own transport,
// one-sided RMA's and GIN's sockets are all made this way, so they take the
// same paths.
#pragma once

#include <memory>

#include "src/base/status.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/transport.h"

namespace braid {

// Whether the policy may need sockets, so a listener must be made (and
// its address published in PeerInfo::socket_addr) before this is called.
bool policy_may_use_sockets(const TransportPolicy& policy);

// Every rank of the communicator calls it (choose_net agrees through
// `bootstrap`).  `listener` serves the sockets; null where
// policy_may_use_sockets is false.
Status make_policy_transport(const TransportContext& ctx, Bootstrap* bootstrap,
                             std::unique_ptr<SocketListener> listener, std::unique_ptr<Transport>* out);

}  // namespace braid

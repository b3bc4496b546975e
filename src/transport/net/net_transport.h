// The net transport: braid's pipes (transport.h) over a Net (net.h), that
// is over InfiniBand verbs, an external NCCL net plugin, or braid's TCP net.
#pragma once

#include <memory>
#include <vector>

#include "src/base/status.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/net/net.h"
#include "src/transport/transport.h"

namespace braid {

// Connects this rank with every peer r where serves[r] (itself included if
// asked), through `bootstrap`: a collective call, every rank of the
// communicator makes it with the same `serves` pattern as seen from it
// (serves[r] on rank q <=> serves[q] on rank r).  Fragments are
// BRAID_NET_SLOT_BYTES, BRAID_NET_SLOTS per connection.
Status make_net_transport(const TransportContext& ctx, Bootstrap* bootstrap, Net* net, const std::vector<bool>& serves,
                          std::unique_ptr<Transport>* out);

}  // namespace braid

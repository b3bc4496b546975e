// The routing transport a communicator uses: shared memory to the ranks on
// this host, the remote transport (sockets or a net) to the others
// (BRAID_TRANSPORT may force one; either may be absent).
#pragma once

#include <memory>

#include "src/base/status.h"
#include "src/transport/transport.h"

namespace braid {

Status make_router_transport(const TransportContext& ctx, std::unique_ptr<Transport> shm,
                             std::unique_ptr<Transport> socket, std::unique_ptr<Transport>* out);

}  // namespace braid

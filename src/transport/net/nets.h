// The networks a net transport (net_transport.h) can run on, each one
// object per process, made on first use.
#pragma once

#include <memory>
#include <string>

#include "src/base/status.h"
#include "src/transport/net/net.h"

namespace braid {

// InfiniBand/RoCE verbs (src/transport/ibverbs): an error saying why where
// there is no usable port (or braid was built without libibverbs).
Status braid_ib_net(Net** out);
// TCP.
Status braid_socket_net(Net** out);

// The NCCL net plugin BRAID_NET_PLUGIN (else NCCL_NET_PLUGIN) names, loaded
// and initialised (plugin_net.cc).  *out is nullptr, with ok, where none is
// configured (or "none", or the default libnccl-net.so is absent); a
// configured plugin that cannot be loaded, has no ncclNet braid knows, or
// fails init is an error saying which.
Status plugin_net(Net** out);
// One ncclNetPlugin_v`version` table (v8..v11) as a Net, initialised; for
// tests of every version's calls.
Status open_plugin_table(int version, const void* table, const std::string& library, std::unique_ptr<Net>* out);

}  // namespace braid

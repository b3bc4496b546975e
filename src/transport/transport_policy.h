// Which transports a communicator's ranks may use, read once at init from
// braid's variable and NCCL's, and agreed by the ranks.
//
// BRAID_TRANSPORT, where it is set to anything but auto, decides alone:
//   shm                   shared memory only (every rank on one host)
//   socket | ib | plugin  that one transport for every peer, also on one host
// Under auto, NCCL's variables apply as NCCL applies them:
//   NCCL_SHM_DISABLE=1    ranks of one host reach each other over the net
//                         too (no shared-memory segments, no boards), as
//                         NCCL then connects them over its network
//   NCCL_NET=name         between hosts only the net of that name, case
//                         aside: IB (braid's verbs), Socket (braid's TCP
//                         sockets) or a loaded net plugin's name; the
//                         communicator's config netName where it is unset
//   NCCL_IB_DISABLE=1     braid's InfiniBand is not a candidate (nor is
//                         libibverbs opened)
// A name no rank's nets answer to fails init on every rank, as NCCL's
// "Failed to initialize any NET plugin" does.
#pragma once

#include <cstdint>
#include <string>

#include "src/base/status.h"

namespace braid {

struct TransportPolicy {
  std::string mode = "auto";  // BRAID_TRANSPORT: auto, shm, socket, ib or plugin
  bool shm = true;            // ranks of one host over shared memory
  bool ib = true;             // auto may take braid's InfiniBand net
  std::string net_name;       // NCCL_NET (else config netName): only the net of this name

  // socket, ib and plugin: one transport for every peer.
  bool forced_net() const { return mode == "socket" || mode == "ib" || mode == "plugin"; }
  // What the ranks must agree on (the name and NCCL_IB_DISABLE need not:
  // the ranks' nets are intersected, net_choice.h).
  int32_t agreement_code() const;
  // Whether `net` (a Net's name, or "Socket") may carry traffic between hosts.
  bool admits(const std::string& net) const;
};

// NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, bounded as NCCL bounds them
// (threads 1..16, the product at most 64, a value below 1 or malformed is
// 1): NCCL's sockets per connection, braid's slices of a large call between
// hosts over TCP, each slice on connections (TCP streams) of its own
// (src/plan/host_path.h, slices_for).  braid drives them from its executor
// and the transport's progress thread: it makes no helper threads.
int tcp_slices_from_env();

// Reads BRAID_TRANSPORT, NCCL_SHM_DISABLE, NCCL_NET and NCCL_IB_DISABLE;
// `config_net_name` is the communicator's config netName ("" if none).
// A BRAID_TRANSPORT that is not one of its words is ncclInvalidArgument.
Status read_transport_policy(const std::string& config_net_name, TransportPolicy* out);

}  // namespace braid

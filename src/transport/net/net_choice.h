// Which network carries a communicator's traffic between hosts.
//
// BRAID_TRANSPORT=auto: an NCCL net plugin where one is configured (or
// libnccl-net.so exists) and loads on every rank, else braid's InfiniBand
// verbs net where every rank has a usable port, else braid's sockets; each
// step down is logged at INFO with the reason.  NCCL_NET and
// NCCL_IB_DISABLE take nets out of that list (transport_policy.h).  =ib and =plugin force that
// net (for every peer, also on one host): a rank without it fails init,
// with the reason.  Ranks agree through one bootstrap allgather of what
// each can use, so all take the same.  TLS (ncclSetEncryption) covers the
// bootstrap and sockets only, as NCCL's does: a net is used unencrypted,
// with a warning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/net/net.h"
#include "src/transport/transport_policy.h"

namespace braid {

enum NetKind : uint32_t { kNetSocket = 0, kNetIb = 1u << 0, kNetPlugin = 1u << 1 };
// A capability bit beside the kinds: this rank's NCCL_NET names another net.
constexpr uint32_t kNetNoSocket = 1u << 2;

// What the ranks' capability bits (kNetIb | kNetPlugin | kNetNoSocket, one
// word per rank) decide for `mode` ("auto", "ib" or "plugin").  `my_reasons`
// says why this rank lacks what it lacks ("" where it has it).  *kind is
// kNetSocket, kNetIb or kNetPlugin; *why tells, for the log, why a preferred
// net was not taken.  A forced net some rank lacks is ncclSystemError naming
// the rank (this rank's own reason when it is the one); under auto, no net
// every rank may use (NCCL_NET named one some rank lacks) is
// ncclInvalidUsage with every reason.
struct NetReasons {
  std::string ib, plugin, socket;
};
Status decide_net(const std::string& mode, int rank, const std::vector<uint32_t>& caps, const NetReasons& my_reasons,
                  NetKind* kind, std::string* why);

// Probes this rank's nets as `policy` admits them (transport_policy.h),
// agrees with the others, and gives the chosen net (nullptr: sockets).
// Every rank of the communicator calls it.
Status choose_net(const TransportPolicy& policy, Bootstrap* bootstrap, Net** out);

}  // namespace braid

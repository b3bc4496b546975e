#include "src/transport/policy_transport.h"

#include "src/transport/net/net_choice.h"
#include "src/transport/net/net_transport.h"
#include "src/transport/router.h"

namespace braid {

bool policy_may_use_sockets(const TransportPolicy& policy) { return policy.mode != "shm"; }

Status make_policy_transport(const TransportContext& ctx, Bootstrap* bootstrap,
                             std::unique_ptr<SocketListener> listener, std::unique_ptr<Transport>* out) {
  const TransportPolicy& policy = ctx.policy;
  const std::string& mode = policy.mode;
  const uint64_t my_host = ctx.peers[size_t(ctx.rank)].host_hash;
  bool remote_peer = false;
  for (const PeerInfo& p : ctx.peers) remote_peer |= p.host_hash != my_host;
  if (mode == "shm" && remote_peer)
    return BRAID_ERROR(ncclInvalidUsage, "BRAID_TRANSPORT=shm but some ranks are on other hosts");
  const bool needs_remote = remote_peer || !policy.shm;
  std::unique_ptr<Transport> shm, remote;
  if (policy.shm) BRAID_TRY(make_shm_transport(ctx, &shm));
  Net* net = nullptr;
  if (mode == "ib" || mode == "plugin" || (mode == "auto" && needs_remote))
    BRAID_TRY(choose_net(policy, bootstrap, &net));
  if (net) {
    std::vector<bool> serves(size_t(ctx.nranks));
    for (int r = 0; r < ctx.nranks; ++r) serves[size_t(r)] = !shm || ctx.peers[size_t(r)].host_hash != my_host;
    BRAID_TRY(make_net_transport(ctx, bootstrap, net, serves, &remote));
  } else if (mode == "socket" || needs_remote) {
    BRAID_TRY(make_socket_transport(ctx, std::move(listener), &remote));
  }
  return make_router_transport(ctx, std::move(shm), std::move(remote), out);
}

}  // namespace braid

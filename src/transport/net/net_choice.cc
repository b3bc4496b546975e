#include "src/transport/net/net_choice.h"

#include "src/base/log.h"
#include "src/base/tls.h"
#include "src/transport/net/nets.h"

namespace braid {
namespace {

// A rank whose word `has` refuses, this one first (its own reason is the
// best there is), else the first, else -1.
template <class Has>
int first_lacking(const std::vector<uint32_t>& caps, int rank, Has has) {
  if (!has(caps[size_t(rank)])) return rank;
  for (size_t r = 0; r < caps.size(); ++r)
    if (!has(caps[r])) return int(r);
  return -1;
}

int first_without(const std::vector<uint32_t>& caps, uint32_t bit, int rank) {
  return first_lacking(caps, rank, [bit](uint32_t word) { return (word & bit) != 0; });
}

std::string lack(int rank, int who, const char* what, const std::string& my_reason) {
  if (who == rank) return my_reason.empty() ? fmt::format("this rank has no {}", what)
                                            : fmt::format("this rank has no {}: {}", what, my_reason);
  return fmt::format("rank {} has no {}", who, what);
}

}  // namespace

Status decide_net(const std::string& mode, int rank, const std::vector<uint32_t>& caps, const NetReasons& my_reasons,
                  NetKind* kind, std::string* why) {
  why->clear();
  const int no_plugin = first_without(caps, kNetPlugin, rank);
  const int no_ib = first_without(caps, kNetIb, rank);
  if (mode == "plugin") {
    if (no_plugin >= 0)
      return BRAID_ERROR(ncclSystemError, "BRAID_TRANSPORT=plugin: {}",
                         lack(rank, no_plugin, "usable net plugin", my_reasons.plugin));
    *kind = kNetPlugin;
    return Status::ok();
  }
  if (mode == "ib") {
    if (no_ib >= 0)
      return BRAID_ERROR(ncclSystemError, "BRAID_TRANSPORT=ib: {}",
                         lack(rank, no_ib, "usable InfiniBand/RoCE port", my_reasons.ib));
    *kind = kNetIb;
    return Status::ok();
  }
  if (mode != "auto") return BRAID_ERROR(ncclInternalError, "decide_net: mode {}", mode);
  if (no_plugin < 0) {
    *kind = kNetPlugin;
    return Status::ok();
  }
  // Say why the plugin is not used only where one was asked for or found.
  const std::string plugin_lack = lack(rank, no_plugin, "net plugin", my_reasons.plugin);
  if (!my_reasons.plugin.empty() || (caps[size_t(rank)] & kNetPlugin))
    *why = fmt::format("no net plugin ({}); ", plugin_lack);
  if (no_ib < 0) {
    *kind = kNetIb;
    return Status::ok();
  }
  const std::string ib_lack = lack(rank, no_ib, "usable InfiniBand/RoCE port", my_reasons.ib);
  // A rank whose NCCL_NET names another net.
  const int no_socket = first_lacking(caps, rank, [](uint32_t word) { return !(word & kNetNoSocket); });
  if (no_socket >= 0)
    return BRAID_ERROR(ncclInvalidUsage, "no network every rank may use between hosts: no net plugin ({}), no "
                       "InfiniBand ({}), no sockets ({})", plugin_lack, ib_lack,
                       lack(rank, no_socket, "sockets", my_reasons.socket));
  *why += fmt::format("no InfiniBand ({}): sockets", ib_lack);
  *kind = kNetSocket;
  return Status::ok();
}

Status choose_net(const TransportPolicy& policy, Bootstrap* bootstrap, Net** out) {
  *out = nullptr;
  const std::string& mode = policy.mode;
  const bool automatic = mode == "auto";
  uint32_t mine = 0;
  NetReasons reasons;
  Net* plugin = nullptr;
  Net* ib = nullptr;
  if (automatic || mode == "plugin") {
    Status s = plugin_net(&plugin);
    if (plugin && automatic && !policy.admits(plugin->net_name())) {
      reasons.plugin = fmt::format("the one loaded is {}, and NCCL_NET names {}", plugin->net_name(), policy.net_name);
      plugin = nullptr;
    }
    if (plugin) mine |= kNetPlugin;
    else if (!s.is_ok()) reasons.plugin = s.message();
    else if (mode == "plugin") reasons.plugin = "none configured (BRAID_NET_PLUGIN, NCCL_NET_PLUGIN) nor libnccl-net.so";
  }
  if (mode == "ib" || (automatic && policy.admits("IB"))) {
    Status s = braid_ib_net(&ib);
    if (ib) mine |= kNetIb;
    else reasons.ib = s.message();
  } else if (automatic) {
    reasons.ib = policy.ib ? fmt::format("NCCL_NET names {}", policy.net_name) : "NCCL_IB_DISABLE=1";
  }
  if (automatic && !policy.admits("Socket")) {
    mine |= kNetNoSocket;
    reasons.socket = fmt::format("NCCL_NET names {}", policy.net_name);
  }
  std::vector<uint32_t> caps(size_t(bootstrap->nranks()));
  caps[size_t(bootstrap->rank())] = mine;
  BRAID_TRY(bootstrap->allgather(caps.data(), sizeof(uint32_t)));
  NetKind kind = kNetSocket;
  std::string why;
  BRAID_TRY(decide_net(mode, bootstrap->rank(), caps, reasons, &kind, &why));
  if (!why.empty()) BRAID_INFO(kNet | kInit, "rank {}: between hosts: {}", bootstrap->rank(), why);
  *out = kind == kNetPlugin ? plugin : kind == kNetIb ? ib : nullptr;
  // As NCCL's: ncclSetEncryption covers the bootstrap and sockets only.
  if (*out && tls_enabled() && bootstrap->rank() == 0)
    BRAID_WARN("TLS is on, but traffic between hosts takes {}, which is not encrypted "
               "(BRAID_TRANSPORT=socket encrypts it)", kind == kNetPlugin ? "the net plugin" : "InfiniBand");
  return Status::ok();
}

}  // namespace braid

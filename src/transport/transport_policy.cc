#include "src/transport/transport_policy.h"

#include <strings.h>

#include <algorithm>

#include "src/base/env.h"
#include "src/base/log.h"

namespace braid {
namespace {

constexpr const char* kModes[] = {"auto", "shm", "socket", "ib", "plugin"};

// NCCL's flags are integers: set and not 0 (a malformed value is unset).
bool nccl_flag(const char* name) { return env_nccl_int(name).value_or(0) != 0; }

}  // namespace

int32_t TransportPolicy::agreement_code() const {
  int32_t index = 0;
  for (int32_t i = 0; i < int32_t(std::size(kModes)); ++i)
    if (mode == kModes[i]) index = i;
  return index | (shm ? 0 : 8);
}

bool TransportPolicy::admits(const std::string& net) const {
  if (net == "IB" && !ib) return false;
  return net_name.empty() || strcasecmp(net_name.c_str(), net.c_str()) == 0;
}

int tcp_slices_from_env() {
  constexpr int64_t kMaxThreads = 16, kMaxSockets = 64;  // NCCL's MAX_THREADS, MAX_SOCKETS
  const int64_t threads = std::clamp<int64_t>(env_nccl_int("NCCL_SOCKET_NTHREADS").value_or(1), 1, kMaxThreads);
  const int64_t per_thread = std::max<int64_t>(env_nccl_int("NCCL_NSOCKS_PERTHREAD").value_or(1), 1);
  return int(std::min(threads * std::min(per_thread, kMaxSockets), kMaxSockets / threads * threads));
}

Status read_transport_policy(const std::string& config_net_name, TransportPolicy* out) {
  *out = TransportPolicy();
  int index = 0;
  BRAID_TRY(env_choice("BRAID_TRANSPORT", {"auto", "shm", "socket", "ib", "plugin"}, &index));
  out->mode = kModes[index];
  if (out->mode != "auto") {
    out->shm = !out->forced_net();
    if (!env_raw("NCCL_NET").empty() || nccl_flag("NCCL_SHM_DISABLE") || nccl_flag("NCCL_IB_DISABLE"))
      BRAID_INFO(kInit | kEnv, "BRAID_TRANSPORT={} decides the transports: NCCL_NET, NCCL_SHM_DISABLE and "
                 "NCCL_IB_DISABLE are not read", out->mode);
    return Status::ok();
  }
  out->shm = !nccl_flag("NCCL_SHM_DISABLE");
  out->ib = !nccl_flag("NCCL_IB_DISABLE");
  out->net_name = env_raw("NCCL_NET");
  if (out->net_name.empty()) out->net_name = config_net_name;
  return Status::ok();
}

}  // namespace braid

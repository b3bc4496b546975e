#include "src/transport/ibverbs/ib_device.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/transport/ibverbs/ib_verbs_loader.h"
#include "src/transport/net/net.h"

namespace braid {

std::string IbPort::describe(const GidEntry* path_gid) const {
  if (!roce) return fmt::format("{}:{} InfiniBand LID {}", device, port, lid);
  const GidEntry& g = path_gid ? *path_gid : gid;
  return fmt::format("{}:{} RoCE GID {} {} ({})", device, port, g.index, gid_to_string(g.raw),
                     g.type == GidType::RoceV2 ? "v2" : "v1");
}

namespace {

int speed_mbps(const ibv_port_attr& a) {
  int lane_mbps = 0;
  switch (a.active_speed) {
    case 1: lane_mbps = 2500; break;
    case 2: lane_mbps = 5000; break;
    case 4: case 8: lane_mbps = 10000; break;
    case 16: lane_mbps = 14000; break;
    case 32: lane_mbps = 25000; break;
    case 64: lane_mbps = 50000; break;
    case 128: lane_mbps = 100000; break;
    default: lane_mbps = 200000; break;
  }
  int lanes = a.active_width == 2 ? 4 : a.active_width == 4 ? 8 : a.active_width == 8 ? 12 : a.active_width == 16 ? 2 : 1;
  return lane_mbps * lanes;
}

std::vector<GidEntry> read_gids(ibv_context* ctx, int port, int table_len) {
  std::vector<GidEntry> out;
  for (int i = 0; i < table_len; ++i) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(ctx, uint32_t(port), uint32_t(i), &entry, 0) != 0) continue;  // empty slots fail
    GidEntry g;
    g.index = i;
    std::memcpy(g.raw, entry.gid.raw, 16);
    if (gid_is_empty(g.raw)) continue;
    g.type = entry.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::RoceV2
             : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::RoceV1
                                                      : GidType::IB;
    out.push_back(g);
  }
  return out;
}

// NCCL_IB_PKEY's entry of the port's P_Key table, into port->pkey_index
// and port->pkey.  Unset, NCCL's index 0 is taken as NCCL takes it, whatever
// the table says: a port whose table cannot be read (iWARP has none) stays
// usable, with the default key.
Status read_pkey(ibv_context* ctx, int port_num, std::optional<int64_t> setting, int table_length, IbPort* port) {
  const int64_t index = setting.value_or(0);
  const bool in_table = index >= 0 && index < table_length;
  __be16 raw = 0;
  const bool read = in_table && ibv_query_pkey(ctx, uint8_t(port_num), int(index), &raw) == 0;
  const Status s = in_table && !read ? BRAID_ERROR(ncclSystemError, "NCCL_IB_PKEY={}: ibv_query_pkey: {}", index,
                                                   std::strerror(errno))
                                     : check_pkey(index, table_length, ntohs(raw));
  if (!s.is_ok() && setting) return s;
  port->pkey_index = s.is_ok() ? uint16_t(index) : 0;
  port->pkey = s.is_ok() ? ntohs(raw) : 0xffff;
  return Status::ok();
}

// Fork safety: registered memory must not be copied-on-write into a child
// while a NIC writes it.  ibv_fork_init marks it MADV_DONTFORK where the
// kernel needs that (kernels from 5.13 do not, and it is then a no-op).  It
// must come before any other verbs call of the process; if the application
// made one first, it fails and says so.
void init_fork_safety() {
  static std::once_flag once;
  std::call_once(once, [] {
    int rc = ibv_fork_init();
    if (rc != 0)
      BRAID_INFO(kNet | kInit, "ibv_fork_init: {} (verbs already in use by the application?); forked children must "
                 "not touch braid's registered buffers", std::strerror(rc));
    else if (ibv_is_fork_initialized() == IBV_FORK_UNNEEDED)
      BRAID_TRACE(kNet, "ibv_fork_init: the kernel keeps registered memory safe across fork");
  });
}

// How a port's GID is chosen: BRAID_IB_GID_INDEX (else NCCL's) forces an
// index, else NCCL's address family, range and RoCE version rank them.
struct GidSettings {
  int forced;
  std::string setting;
  GidPreference preference;
  std::string ignored;  // the variables ignored, and why
};
GidSettings gid_settings() {
  GidSettings g;
  g.forced = int(env_int_or_nccl("BRAID_IB_GID_INDEX", "NCCL_IB_GID_INDEX"));
  g.setting = env_is_set("BRAID_IB_GID_INDEX") ? "BRAID_IB_GID_INDEX" : "NCCL_IB_GID_INDEX";
  g.preference = parse_gid_preference(env_raw("NCCL_IB_ADDR_FAMILY"), env_raw("NCCL_IB_ADDR_RANGE"),
                                      env_raw("NCCL_IB_ROCE_VERSION_NUM"), &g.ignored);
  return g;
}

}  // namespace

Status open_ib_ports(std::vector<IbPort>* out) {
  out->clear();
  BRAID_TRY(load_ibverbs());
  init_fork_safety();
  HcaFilter filter;
  const std::string hca = env_string_or_nccl("BRAID_IB_HCA", "NCCL_IB_HCA");
  const std::string hca_setting = env_is_set("BRAID_IB_HCA") ? "BRAID_IB_HCA" : "NCCL_IB_HCA";
  BRAID_TRY(parse_hca_filter(hca_setting, hca, &filter));
  const GidSettings gids = gid_settings();
  if (!gids.ignored.empty()) BRAID_INFO(kNet | kInit | kEnv, "{}: ignored, as NCCL ignores it", gids.ignored);
  // NCCL's ranges; a value outside one is NCCL's default, 0.
  const int64_t sl = env_nccl_int("NCCL_IB_SL").value_or(0), tc = env_nccl_int("NCCL_IB_TC").value_or(-1);
  const uint8_t service_level = uint8_t(sl >= 0 && sl <= 15 ? sl : 0);
  const int traffic_class = int(tc >= 0 && tc <= 255 ? tc : -1);
  const std::optional<int64_t> pkey_setting = env_nccl_int("NCCL_IB_PKEY");
  bool relaxed_ordering = false;
  BRAID_TRY(relaxed_ordering_setting(env_nccl_int("NCCL_IB_PCI_RELAXED_ORDERING"), ibverbs_has_reg_mr_iova2(),
                                     &relaxed_ordering));

  int ndev = 0;
  ibv_device** list = ibv_get_device_list(&ndev);
  if (!list || ndev == 0) {
    if (list) ibv_free_device_list(list);
    return BRAID_ERROR(ncclSystemError, "no InfiniBand/RoCE device (libibverbs found none)");
  }
  std::vector<std::string> seen;  // "dev:port state" for the error message
  Status first_error;
  for (int d = 0; d < ndev; ++d) {
    const std::string name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) {
      seen.push_back(fmt::format("{} (cannot open: {})", name, std::strerror(errno)));
      continue;
    }
    ibv_device_attr dattr{};
    bool used = false;
    ibv_pd* pd = nullptr;
    if (ibv_query_device(ctx, &dattr) == 0) {
      for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
        ibv_port_attr pattr{};
        if (ibv_query_port(ctx, uint8_t(p), &pattr) != 0) continue;
        const bool active = pattr.state == IBV_PORT_ACTIVE;
        seen.push_back(fmt::format("{}:{}{}", name, p, active ? "" : " (not active)"));
        if (!active || !filter.passes(name, p)) continue;
        IbPort port;
        port.device = name;
        port.port = p;
        port.roce = pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
        port.lid = pattr.lid;
        port.mtu = int(pattr.active_mtu);
        port.speed_mbps = speed_mbps(pattr);
        port.guid = dattr.node_guid;
        if (const HcaEntry* entry = filter.entry_for(name, p)) {
          port.rail = entry->rail;
          port.plane = entry->plane;
        }
        if (port.roce || gids.forced >= 0) {
          Status s = choose_gid(read_gids(ctx, p, pattr.gid_tbl_len), gids.forced, gids.setting, gids.preference,
                                &port.gid);
          if (!s.is_ok()) {
            if (first_error.is_ok()) first_error = std::move(s).context(fmt::format("{}:{}", name, p));
            continue;
          }
          port.use_gid = true;
        }
        if (Status s = read_pkey(ctx, p, pkey_setting, pattr.pkey_tbl_len, &port); !s.is_ok()) {
          BRAID_WARN("InfiniBand port {}:{} not used: {}", name, p, s.message());
          if (first_error.is_ok()) first_error = std::move(s).context(fmt::format("{}:{}", name, p));
          continue;
        }
        char path[PATH_MAX];
        if (realpath(fmt::format("/sys/class/infiniband/{}/device", name).c_str(), path)) port.pci_path = path;
        if (!pd && !(pd = ibv_alloc_pd(ctx))) {
          if (first_error.is_ok())
            first_error = BRAID_ERROR(ncclSystemError, "{}: ibv_alloc_pd: {}", name, std::strerror(errno));
          break;
        }
        port.context = ctx;
        port.pd = pd;
        port.service_level = service_level;
        port.traffic_class = traffic_class;
        port.relaxed_ordering = relaxed_ordering;
        used = true;
        BRAID_INFO(kNet | kInit, "InfiniBand port {}, {} Mbps, service level {}, traffic class {}, P_Key {:#06x} "
                   "(index {}), {} ordering{}", port.describe(), port.speed_mbps, service_level,
                   traffic_class >= 0 ? std::to_string(traffic_class) : "the communicator's, else 0", port.pkey,
                   port.pkey_index, relaxed_ordering ? "relaxed" : "strict", rail_text(port.rail, port.plane));
        out->push_back(std::move(port));
      }
    }
    if (!used) {
      if (pd) ibv_dealloc_pd(pd);
      ibv_close_device(ctx);
    }
  }
  ibv_free_device_list(list);
  if (!out->empty()) return Status::ok();
  if (!first_error.is_ok()) return first_error;
  std::string ports;
  for (const std::string& s : seen) ports += (ports.empty() ? "" : ", ") + s;
  if (!hca.empty())
    return BRAID_ERROR(ncclSystemError, "{}={} matches no active port (ports: {})", hca_setting, hca,
                       ports.empty() ? "none" : ports);
  return BRAID_ERROR(ncclSystemError, "no active InfiniBand/RoCE port (ports: {})", ports.empty() ? "none" : ports);
}

bool port_is_active(const IbPort& port) {
  ibv_port_attr a{};
  return ibv_query_port(port.context, uint8_t(port.port), &a) == 0 && a.state == IBV_PORT_ACTIVE;
}

Status current_gid(const IbPort& port, const GidEntry& before, GidEntry* out) {
  ibv_port_attr a{};
  if (ibv_query_port(port.context, uint8_t(port.port), &a) != 0)
    return BRAID_ERROR(ncclSystemError, "ibv_query_port: {}", std::strerror(errno));
  const GidSettings gids = gid_settings();
  return choose_gid_again(read_gids(port.context, port.port, a.gid_tbl_len), gids.forced, gids.setting,
                          gids.preference, before, out);
}

bool gid_still_there(const IbPort& port, const GidEntry& gid) {
  if (!port.use_gid) return true;
  ibv_gid_entry entry{};
  return ibv_query_gid_ex(port.context, uint32_t(port.port), uint32_t(gid.index), &entry, 0) == 0 &&
         std::memcmp(entry.gid.raw, gid.raw, 16) == 0;
}

void close_ib_ports(std::vector<IbPort>* ports) {
  // Ports of one device share its context and protection domain.
  for (size_t i = 0; i < ports->size(); ++i) {
    IbPort& p = (*ports)[i];
    bool last_of_device = true;
    for (size_t j = i + 1; j < ports->size(); ++j) last_of_device &= (*ports)[j].context != p.context;
    if (last_of_device) {
      ibv_dealloc_pd(p.pd);
      ibv_close_device(p.context);
    }
  }
  ports->clear();
}

}  // namespace braid

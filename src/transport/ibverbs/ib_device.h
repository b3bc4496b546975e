// Opening the InfiniBand/RoCE ports braid's verbs network uses: every
// active port of every device that BRAID_IB_HCA (else NCCL_IB_HCA) passes,
// with its GID chosen (ib_select.h).  An InfiniBand port is addressed by
// its LID, a RoCE (Ethernet) one by its GID.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/transport/ibverbs/ib_select.h"

struct ibv_context;
struct ibv_pd;

namespace braid {


struct IbPort {
  std::string device;
  int port = 0;
  bool roce = false;     // Ethernet link layer: addressed by GID
  GidEntry gid;          // RoCE: the chosen GID; InfiniBand: index 0 (used with a forced index only)
  bool use_gid = false;  // send a global route header
  uint16_t lid = 0;
  int mtu = 0;           // enum ibv_mtu of the port's active MTU
  int speed_mbps = 0;
  uint64_t guid = 0;
  std::string pci_path;
  int rail = -1, plane = -1;  // NCCL_IB_HCA's name:port:rail:plane (-1: none given)
  // NCCL_IB_SL (NCCL's default 0): every queue pair's service level.
  // NCCL_IB_TC (-1: unset): on RoCE every queue pair's traffic class (the IP
  // header's DSCP and ECN bits, which lossless RoCE fabrics map to their PFC
  // priority); unset, the sending communicator's trafficClass, else 0.
  uint8_t service_level = 0;
  int traffic_class = -1;
  // NCCL_IB_PKEY: the index of every queue pair's P_Key, and its value
  // (host order), which travels to the peer (ib_select.h).
  uint16_t pkey_index = 0, pkey = 0xffff;
  // NCCL_IB_PCI_RELAXED_ORDERING (relaxed_ordering_setting): data buffers
  // are registered with relaxed ordering.
  bool relaxed_ordering = false;
  uint8_t traffic_class_for(int config_traffic_class) const {
    return uint8_t(traffic_class >= 0 ? traffic_class : config_traffic_class >= 0 ? config_traffic_class : 0);
  }
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  // "rxe0:1 RoCE GID 1 ::ffff:10.77.0.1 (v2)": the port's GID, or `gid` (a
  // path's, which port recovery may have chosen anew since).
  std::string describe(const GidEntry* gid = nullptr) const;
};

// Opens the selected ports (fork safety first: ibv_fork_init).  None usable
// is ncclSystemError saying why (no device, none active, the filter matched
// none, a bad GID index).
Status open_ib_ports(std::vector<IbPort>* out);
void close_ib_ports(std::vector<IbPort>* ports);
// Whether the port is active now (ibv_query_port).
bool port_is_active(const IbPort& port);
// Whether `gid` is still at its index in the port's table (a RoCE address
// removed or changed: the queue pairs using it reach nothing); always, on a
// port addressed by LID.
bool gid_still_there(const IbPort& port, const GidEntry& gid);
// Where it is not: the GID queue pairs made on the port take now, `before`
// the one the old ones had, from the table read again (ib_select.h's
// choose_gid_again: an error while it has none like `before`).
Status current_gid(const IbPort& port, const GidEntry& before, GidEntry* out);

}  // namespace braid

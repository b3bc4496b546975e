// Which of a host's network devices a rank uses: the ones nearest it, as
// NCCL gives each GPU the NICs nearest it on the PCI tree (a rail per GPU on
// machines with a NIC per GPU), instead of taking them in the order the
// driver lists them (which puts a GPU's traffic through a far PCI switch, or
// across the socket link, or onto a storage NIC).
//
// What sysfs says decides, in this order:
//  1. A rank with a GPU (the CUDA backend): the devices fewest PCI hops from
//     it.  Hops count the components of both sysfs device paths below their
//     common ancestor; a device under another root complex is farther than
//     any under the GPU's own, and one on another NUMA node farther still.
//  2. A rank without one, whose allowed CPUs all lie in one NUMA node (bound
//     by mpirun --bind-to core/socket/numa, numactl, taskset): the devices on
//     that node, where any is.
//  3. Otherwise, or where sysfs knows nothing of the devices: every device.
// The m ranks of one host that end with the same devices share them out in
// rank order: where ranks outnumber devices the k-th takes the (k mod
// count)-th (without any locality, the host's k-th rank on device k mod
// devices); where devices outnumber ranks the k-th takes every m-th from
// the k-th, so that a rank alone on a host with two NICs (or a GPU with two
// NICs on its switch) uses both.  NCCL_NETDEVS_POLICY (NCCL 2.24) widens
// that share: ALL every device, MAX:N up to N, nearest first.  A rank's
// channels take its devices in turn (net_transport.h).
// NCCL_IB_HCA (and a plugin's own settings) decide which devices there are.
// NCCL_TOPO_FILE places a GPU and the devices where its tree has their bus
// ids, instead of sysfs (a VM's flat PCI bus: topo_file.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/net/net.h"
#include "src/transport/transport.h"

namespace braid {

struct DevicePlace {  // a net device, as sysfs places it
  std::string pci_path;  // its sysfs device path ("": unknown)
  int numa_node = -1;    // -1: unknown
};

struct RankPlace {
  std::string gpu_pci_path;  // the rank's GPU's sysfs device path ("": none, or unknown)
  int gpu_numa_node = -1;
  int numa_node = -1;  // the one node all the rank's allowed CPUs are on (-1: several, or unknown)
};

enum class NearBy { Gpu, Numa, Any };

struct NearestDevices {
  std::vector<int> devices;  // ascending
  NearBy by = NearBy::Any;
  int hops = -1;  // NearBy::Gpu: PCI hops from the GPU
};

// The PCI hops between two sysfs device paths (-1 where either is empty).
int pci_hops(const std::string& a, const std::string& b);

// Steps 1-3 above over `devices` (indexed as the net numbers them).
NearestDevices nearest_devices(const std::vector<DevicePlace>& devices, const RankPlace& me);

// NCCL_NETDEVS_POLICY: AUTO (NCCL's default: a rank's share of its nearest
// devices), ALL (every device) or MAX:N (its share, then the rest of its
// nearest, then the other devices, the first N); case as NCCL ignores it.
struct NetDevsPolicy {
  enum class Kind { Auto, All, Max } kind = Kind::Auto;
  int max = 0;  // Kind::Max: N > 0
};
// The policy `spec` names; *recognized false (and AUTO) where it names none, as NCCL falls back.
NetDevsPolicy parse_netdevs_policy(const std::string& spec, bool* recognized);

// The devices, in the order its channels take them, of the k-th of the `m`
// ranks of a host that share `nearest` (ascending) of `count` devices,
// under `policy` (above).  Never empty where count > 0.
std::vector<int> rank_devices(const std::vector<int>& nearest, int count, int k, int m, const NetDevsPolicy& policy);

// Rails and planes (NCCL 2.30: a device's railId and planeId, NCCL_IB_HCA's
// name:port:rail:plane; NetProperties::rail/plane, -1 for none): where every
// one of a rank's `chosen` devices has a rail, or every one a plane, they
// are ordered by
// (rail, plane), stably, so that the i-th device of ranks with the same
// rails and planes is on the same rail and plane, and a connection, which
// takes the same index at both ends, stays on one (NCCL keeps a ring's
// connections on a rail, and never crosses planes).  Otherwise the order
// stays; true where it ordered.
bool order_by_rail(std::vector<int>* chosen, const std::vector<NetProperties>& devices);

// The first line of a sysfs file ("" where it cannot be read).
std::string read_sysfs_line(const std::string& path);
// Read from sysfs under `root` ("/sys" on a machine; a tree of files in tests).
int read_numa_node(const std::string& device_path);  // <device_path>/numa_node
// A device's place from a sysfs path to it (a link is resolved): unknown where there is none.
DevicePlace device_place(const std::string& sysfs_path);
// A PCI bus id ("0000:1B:00.0", as CUDA gives it) to its device's sysfs path ("" if none).
std::string pci_bus_id_path(const std::string& bus_id, const std::string& root = "/sys");
// The NUMA node that holds every CPU in `cpus`, by root/devices/system/node/node*/cpulist (-1: none holds all).
int numa_node_of_cpus(const std::vector<int>& cpus, const std::string& root = "/sys");
// "0-3,8,10-11" to its CPUs (empty where it does not parse).
std::vector<int> parse_cpu_list(const std::string& list);

// What sysfs under `root` lists, for `braid nics`: the InfiniBand devices
// (class infiniband), the network interfaces (class net: the TCP devices),
// the NVIDIA GPUs (PCI vendor 0x10de, display class), and the NUMA nodes
// (their CPU lists), each sorted by name.
struct NamedPlace {
  std::string name;  // a device's, a GPU's bus id, "node3"
  DevicePlace place;
  std::string cpus;  // a node's cpulist
};
std::vector<NamedPlace> sysfs_infiniband_devices(const std::string& root = "/sys");
std::vector<NamedPlace> sysfs_net_interfaces(const std::string& root = "/sys");
std::vector<NamedPlace> sysfs_nvidia_gpus(const std::string& root = "/sys");
std::vector<NamedPlace> sysfs_numa_nodes(const std::string& root = "/sys");

// This rank's devices among a net's `devices` (rank_devices), by their sysfs
// paths (pci_path), rails and planes: placed by sysfs, by its GPU's PCI bus
// id in ctx, and by its CPU affinity; shared
// out with the ranks of its host over the bootstrap (every rank calls it);
// ordered by rail (order_by_rail); the most devices any rank of the
// communicator took (a call between hosts runs in that many slices to fill
// them); and why, for the log.
struct NetDeviceChoice {
  std::vector<int> devices;
  int most_devices = 1;  // over every rank
  std::string why;
};
Status choose_net_devices(const TransportContext& ctx, Bootstrap* bootstrap, const std::vector<NetProperties>& devices,
                          NetDeviceChoice* out);

}  // namespace braid

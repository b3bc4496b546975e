// NCCL's topology XML of this host: what NCCL_TOPO_DUMP_FILE makes NCCL
// write, and what `braid topo`, `synth` and `sim` read (synth/nccl_topology.cc),
// made from what sysfs says of the host's GPUs and network devices.
//
// The tree is NCCL's (src/graph/xml.cc, NCCL 2.30):
//  - <system version="1">;
//  - a <cpu> per NUMA node a device hangs under: host_hash, numaid, affinity
//    (the node's cpumap), arch, and on x86 vendor, familyid and modelid from
//    CPUID;
//  - each device's PCI bridges as nested <pci busid class vendor device
//    subsystem_vendor subsystem_device link_speed link_width>, the speed and
//    width the slower of the device's and its upstream port's maximum, as
//    NCCL reads them from sysfs (a device on a root complex has no upstream
//    port: width 0, as NCCL writes it);
//  - at the leaves <gpu dev sm rank gdr> with its <nvlink target count
//    tclass>, and <nic><net name dev speed port latency guid maxconn gdr/>.
// A network device sysfs does not place on PCI (virtio, soft-RoCE) hangs
// under the first <cpu>, as in NCCL.  gdr is 0: braid's networks carry host
// memory.  Written as NCCL writes it: two spaces a level, attributes in
// NCCL's order, a node's <pci> children by bus id.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid {

struct TopoNvLink {
  std::string target;  // the far end's PCI bus id, lower case ("fffffff:ffff:ff": not visible)
  int count = 0;       // links to it
  std::string tclass;  // its PCI class ("0x068000": NVSwitch)
};

struct TopoGpu {
  std::string bus_id;  // "0000:1b:00.0"
  int dev = 0;         // NVML's index: the GPU's place in PCI order among the host's
  int sm = 0;          // 90 for compute capability 9.0
  int rank = 0;        // the lowest rank of the communicator on it
  std::vector<TopoNvLink> nvlinks;
};

struct TopoNet {
  std::string name;         // "mlx5_0", "eth0"
  std::string device_path;  // its sysfs device ("": none)
  int speed_mbps = 10000;
  int port = 0;
  uint64_t guid = 0;
  int max_comms = 65536;
};

// The host's network devices as NCCL's nets list them: every ACTIVE port of
// root/class/infiniband/* (guid: the node GUID as the verbs API gives it,
// maxconn 131072, NCCL's IB figures), else the interfaces of root/class/net
// that are up, loopback and local bridges (docker*, virbr*) left out and
// `ifname_filter` (NCCL_SOCKET_IFNAME's syntax) applied: the socket net's.
std::vector<TopoNet> sysfs_topology_nets(const std::string& ifname_filter, const std::string& root = "/sys");

// NVML's index of the GPU at `bus_id`: its place among root/bus/pci/devices'
// NVIDIA display devices in bus id order (-1: not there).
int gpu_pci_index(const std::string& bus_id, const std::string& root = "/sys");

// The file's text for `gpus` and `nets` as sysfs under `root` places them.
std::string topology_xml(const std::vector<TopoGpu>& gpus, const std::vector<TopoNet>& nets, uint64_t host_hash,
                         const std::string& root = "/sys");

}  // namespace braid

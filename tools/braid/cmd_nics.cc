#include "tools/braid/cmd_nics.h"

#include <fmt/format.h>

#include "src/base/host_identity.h"
#include "src/runtime/topo_dump.h"
#include "src/transport/net/nic_affinity.h"

namespace braid::cli {
namespace {

std::string numa(int node) { return node >= 0 ? std::to_string(node) : "-"; }

// "mlx5_0, mlx5_1" for the devices `nearest` numbers.
std::string names(const std::vector<NamedPlace>& devices, const std::vector<int>& nearest) {
  std::string out;
  for (int d : nearest) out += fmt::format("{}{}", out.empty() ? "" : ", ", devices[size_t(d)].name);
  return out;
}

int run(const std::string& root) {
  const std::vector<NamedPlace> devices = sysfs_infiniband_devices(root);
  std::vector<DevicePlace> places;
  for (const NamedPlace& d : devices) places.push_back(d.place);
  fmt::print("InfiniBand/RoCE devices ({}/class/infiniband; NCCL_IB_HCA picks among them):\n", root);
  if (devices.empty()) fmt::print("  none\n");
  for (const NamedPlace& d : devices)
    fmt::print("  {:<12} NUMA {:<3} {}\n", d.name, numa(d.place.numa_node),
               d.place.pci_path.empty() ? "(no PCI device)" : d.place.pci_path);
  fmt::print("Network interfaces ({}/class/net; NCCL_SOCKET_IFNAME picks among them for TCP):\n", root);
  const std::vector<NamedPlace> interfaces = sysfs_net_interfaces(root);
  if (interfaces.empty()) fmt::print("  none\n");
  for (const NamedPlace& i : interfaces)
    fmt::print("  {:<12} NUMA {:<3} {}\n", i.name, numa(i.place.numa_node),
               i.place.pci_path.empty() ? "(no PCI device)" : i.place.pci_path);
  fmt::print("NVIDIA GPUs ({}/bus/pci/devices) and the devices a rank on each takes as nearest:\n", root);
  const std::vector<NamedPlace> gpus = sysfs_nvidia_gpus(root);
  if (gpus.empty()) fmt::print("  none\n");
  for (const NamedPlace& g : gpus) {
    RankPlace rank;
    rank.gpu_pci_path = g.place.pci_path;
    rank.gpu_numa_node = g.place.numa_node;
    const NearestDevices n = nearest_devices(places, rank);
    fmt::print("  {:<12} NUMA {:<3} {}\n", g.name, numa(g.place.numa_node),
               devices.empty()       ? "-"
               : n.by == NearBy::Gpu ? fmt::format("{} ({} PCI hops)", names(devices, n.devices), n.hops)
                                     : fmt::format("{} (none placed)", names(devices, n.devices)));
  }
  fmt::print("NUMA nodes and the devices a rank without a GPU, bound to the node, takes as nearest:\n");
  const std::vector<NamedPlace> nodes = sysfs_numa_nodes(root);
  if (nodes.empty()) fmt::print("  none\n");
  for (const NamedPlace& node : nodes) {
    RankPlace rank;
    rank.numa_node = node.place.numa_node;
    const NearestDevices n = nearest_devices(places, rank);
    fmt::print("  {:<12} CPUs {:<9} {}\n", node.name, node.cpus,
               devices.empty()        ? "-"
               : n.by == NearBy::Numa ? names(devices, n.devices)
                                      : fmt::format("{} (none on the node)", names(devices, n.devices)));
  }
  fmt::print("(ranks that take the same devices share them out in rank order, one or more each: a rank alone on\n"
             " them uses all; NCCL_NETDEVS_POLICY=ALL or MAX:N widens a rank's share)\n");
  return 0;
}

}  // namespace

Command add_nics_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "nics", "the InfiniBand devices, network interfaces, GPUs and NUMA nodes sysfs shows, and the devices nearest "
              "each");
  auto root = std::make_shared<std::string>("/sys");
  auto xml = std::make_shared<bool>(false);
  cmd->add_option("--sysfs", *root, "the sysfs tree to read (default /sys)");
  cmd->add_flag("--xml", *xml,
                "print this machine's topology in NCCL's XML instead (what NCCL_TOPO_DUMP_FILE writes; braid synth, "
                "sim and topo read it)");
  return Command{cmd, [root, xml] {
                   if (*xml) return fmt::print("{}", machine_topology(host_hash(), *root)), 0;
                   return run(*root);
                 }};
}

}  // namespace braid::cli

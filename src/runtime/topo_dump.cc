#include "src/runtime/topo_dump.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/exec/nvml_links.h"
#include "src/transport/net/nic_affinity.h"
#include "src/transport/net/topo_xml.h"

namespace braid {
namespace {

// `g`'s NVLinks from NVML, where `root` is this machine's own /sys (NVML describes no other tree).
void add_nvlinks(TopoGpu* g, const std::string& root) {
  std::string why = "a sysfs tree other than /sys, which NVML does not describe";
  if (root != "/sys" || !nvml_nvlinks(g->bus_id, g->sm, &g->nvlinks, &why))
    BRAID_INFO(kInit | kEnv, "topology: the GPU at {} is written without NVLinks: {}", g->bus_id, why);
}

std::string with_nets(const std::vector<TopoGpu>& gpus, uint64_t host_hash, const std::string& root) {
  return topology_xml(gpus, sysfs_topology_nets(socket_ifname_spec(), root), host_hash, root);
}

}  // namespace

std::string host_topology_of(int rank, const std::vector<TopoDumpRank>& ranks, const std::string& root) {
  std::vector<TopoGpu> gpus;
  const uint64_t host = ranks[size_t(rank)].host_hash;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const TopoDumpRank& t = ranks[r];
    if (t.host_hash != host || t.gpu_bus_id.empty()) continue;
    bool seen = false;  // several ranks on one GPU: one <gpu>, the lowest rank's
    for (const TopoGpu& g : gpus) seen |= g.bus_id == t.gpu_bus_id;
    if (seen) continue;
    TopoGpu g;
    g.bus_id = t.gpu_bus_id;
    g.dev = std::max(0, gpu_pci_index(t.gpu_bus_id, root));
    g.sm = t.sm;
    g.rank = int(r);
    add_nvlinks(&g, root);
    gpus.push_back(std::move(g));
  }
  return with_nets(gpus, host, root);
}

std::string machine_topology(uint64_t host_hash, const std::string& root) {
  std::vector<TopoGpu> gpus;
  for (const NamedPlace& p : sysfs_nvidia_gpus(root)) {
    TopoGpu g;
    g.bus_id = p.name;
    g.dev = g.rank = int(gpus.size());
    g.sm = root == "/sys" ? nvml_gpu_sm(p.name) : 0;
    add_nvlinks(&g, root);
    gpus.push_back(std::move(g));
  }
  return with_nets(gpus, host_hash, root);
}

void dump_topology_if_asked(int rank, const std::vector<TopoDumpRank>& ranks) {
  const std::string file = env_raw("NCCL_TOPO_DUMP_FILE");
  if (file.empty() || rank != env_nccl_int("NCCL_TOPO_DUMP_FILE_RANK").value_or(0)) return;
  const std::string text = host_topology_of(rank, ranks);
  std::ofstream out(file, std::ios::trunc);
  if (out << text && out.flush()) {
    BRAID_INFO(kInit | kEnv, "NCCL_TOPO_DUMP_FILE set by environment to {}: rank {} wrote its host's topology", file,
               rank);
  } else {
    BRAID_INFO(kInit | kEnv, "NCCL_TOPO_DUMP_FILE={}: unable to write it ({}), not dumping the topology", file,
               std::strerror(errno));
  }
}

}  // namespace braid

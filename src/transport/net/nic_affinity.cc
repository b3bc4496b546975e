#include "src/transport/net/nic_affinity.h"

#include <sched.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "src/base/env.h"
#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/transport/net/topo_file.h"

namespace braid {
namespace fs = std::filesystem;
namespace {

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < path.size()) {
    const size_t end = std::min(path.find('/', at), path.size());
    if (end > at) out.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// The root complex a sysfs device path is under ("pci0000:00"), "" if none.
std::string root_complex(const std::string& path) {
  for (const std::string& c : components(path))
    if (c.rfind("pci", 0) == 0) return c;
  return "";
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// The entries of `dir` (sorted), with `make` deciding each (false: left out).
std::vector<NamedPlace> list(const std::string& dir, const std::function<bool(const fs::path&, NamedPlace*)>& make) {
  std::vector<NamedPlace> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    NamedPlace p;
    p.name = entry.path().filename().string();
    if (make(entry.path(), &p)) out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const NamedPlace& a, const NamedPlace& b) { return a.name < b.name; });
  return out;
}

std::string describe(const NearestDevices& n, const RankPlace& me) {
  switch (n.by) {
    case NearBy::Gpu: return fmt::format("{} PCI hops from its GPU", n.hops);
    case NearBy::Numa: return fmt::format("on its NUMA node {}", me.numa_node);
    case NearBy::Any: break;
  }
  return "none nearer than another";
}

}  // namespace

std::string read_sysfs_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

int pci_hops(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return -1;
  const std::vector<std::string> x = components(a), y = components(b);
  size_t common = 0;
  while (common < x.size() && common < y.size() && x[common] == y[common]) ++common;
  return int(x.size() - common + y.size() - common);
}

NearestDevices nearest_devices(const std::vector<DevicePlace>& devices, const RankPlace& me) {
  NearestDevices out;
  if (!me.gpu_pci_path.empty()) {
    // (root class, hops): the GPU's own root complex, then its NUMA node, then the rest.
    const std::string gpu_root = root_complex(me.gpu_pci_path);
    std::tuple<int, int> best{INT_MAX, INT_MAX};
    for (int d = 0; d < int(devices.size()); ++d) {
      const DevicePlace& p = devices[size_t(d)];
      const int hops = pci_hops(me.gpu_pci_path, p.pci_path);
      if (hops < 0) continue;
      const bool same_root = !gpu_root.empty() && root_complex(p.pci_path) == gpu_root;
      const bool same_node = me.gpu_numa_node >= 0 && p.numa_node == me.gpu_numa_node;
      const std::tuple<int, int> key{same_root ? 0 : same_node ? 1 : 2, hops};
      if (key < best) {
        best = key;
        out.devices.clear();
      }
      if (key == best) out.devices.push_back(d);
    }
    if (!out.devices.empty()) {
      out.by = NearBy::Gpu;
      out.hops = std::get<1>(best);
      return out;
    }
  }
  if (me.numa_node >= 0) {
    for (int d = 0; d < int(devices.size()); ++d)
      if (devices[size_t(d)].numa_node == me.numa_node) out.devices.push_back(d);
    if (!out.devices.empty()) {
      out.by = NearBy::Numa;
      return out;
    }
  }
  for (int d = 0; d < int(devices.size()); ++d) out.devices.push_back(d);
  return out;
}

NetDevsPolicy parse_netdevs_policy(const std::string& spec, bool* recognized) {
  NetDevsPolicy p;
  *recognized = true;
  if (strcasecmp(spec.c_str(), "AUTO") == 0) return p;
  if (strcasecmp(spec.c_str(), "ALL") == 0) {
    p.kind = NetDevsPolicy::Kind::All;
    return p;
  }
  if (strncasecmp(spec.c_str(), "MAX:", 4) == 0) {
    char* end = nullptr;
    const long n = std::strtol(spec.c_str() + 4, &end, 10);
    if (end != spec.c_str() + 4 && *end == '\0' && n > 0 && n <= INT_MAX) {
      p.kind = NetDevsPolicy::Kind::Max;
      p.max = int(n);
      return p;
    }
  }
  *recognized = false;
  return p;
}

std::vector<int> rank_devices(const std::vector<int>& nearest, int count, int k, int m, const NetDevsPolicy& policy) {
  std::vector<int> out;
  if (count <= 0) return out;
  std::vector<int> near = nearest;
  if (near.empty())
    for (int d = 0; d < count; ++d) near.push_back(d);
  const int n = int(near.size());
  m = std::max(m, 1);
  k = ((k % m) + m) % m;
  // The share: one device where ranks outnumber devices, else every m-th.
  if (m >= n) out.push_back(near[size_t(k % n)]);
  else
    for (int j = k; j < n; j += m) out.push_back(near[size_t(j)]);
  if (policy.kind == NetDevsPolicy::Kind::Auto) return out;
  // Then the rest, each group from this rank's own place on, so that the
  // ranks sharing them start on different devices (and alike on every host).
  auto add = [&](int d) {
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  };
  for (int j = 0; j < n; ++j) add(near[size_t((k + j) % n)]);
  for (int d = 0; d < count; ++d) add((k + d) % count);
  if (policy.kind == NetDevsPolicy::Kind::Max && int(out.size()) > policy.max) out.resize(size_t(policy.max));
  return out;
}

DevicePlace device_place(const std::string& sysfs_path) {
  DevicePlace out;
  char resolved[PATH_MAX];
  if (!sysfs_path.empty() && realpath(sysfs_path.c_str(), resolved)) out.pci_path = resolved;
  out.numa_node = read_numa_node(out.pci_path);
  return out;
}

int read_numa_node(const std::string& device_path) {
  if (device_path.empty()) return -1;
  const std::string line = read_sysfs_line(device_path + "/numa_node");
  if (line.empty()) return -1;
  char* end = nullptr;
  const long node = std::strtol(line.c_str(), &end, 10);
  return end != line.c_str() && node >= 0 && node < INT_MAX ? int(node) : -1;
}

std::string pci_bus_id_path(const std::string& bus_id, const std::string& root) {
  if (bus_id.empty()) return "";
  char resolved[PATH_MAX];
  return realpath((root + "/bus/pci/devices/" + lower_bus_id(bus_id)).c_str(), resolved) ? resolved : "";
}

std::vector<int> parse_cpu_list(const std::string& list) {
  std::vector<int> cpus;
  size_t at = 0;
  while (at < list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string part = list.substr(at, end - at);
    at = end + 1;
    if (part.empty() || part.find_first_not_of(" \n") == std::string::npos) continue;
    char* rest = nullptr;
    const long lo = std::strtol(part.c_str(), &rest, 10);
    long hi = lo;
    if (*rest == '-') hi = std::strtol(rest + 1, &rest, 10);
    if (rest == part.c_str() || (*rest && *rest != '\n' && *rest != ' ') || lo < 0 || hi < lo || hi > CPU_SETSIZE)
      return {};
    for (long c = lo; c <= hi; ++c) cpus.push_back(int(c));
  }
  return cpus;
}

std::vector<NamedPlace> sysfs_infiniband_devices(const std::string& root) {
  return list(root + "/class/infiniband", [](const fs::path& dir, NamedPlace* p) {
    p->place = device_place((dir / "device").string());
    return true;
  });
}

std::vector<NamedPlace> sysfs_net_interfaces(const std::string& root) {
  return list(root + "/class/net", [](const fs::path& dir, NamedPlace* p) {
    p->place = device_place((dir / "device").string());
    return true;
  });
}

std::vector<NamedPlace> sysfs_nvidia_gpus(const std::string& root) {
  return list(root + "/bus/pci/devices", [](const fs::path& dir, NamedPlace* p) {
    if (read_sysfs_line((dir / "vendor").string()) != "0x10de" ||
        read_sysfs_line((dir / "class").string()).rfind("0x03", 0) != 0)
      return false;
    p->place = device_place(dir.string());
    return true;
  });
}

std::vector<NamedPlace> sysfs_numa_nodes(const std::string& root) {
  std::vector<NamedPlace> nodes = list(root + "/devices/system/node", [](const fs::path& dir, NamedPlace* p) {
    if (p->name.rfind("node", 0) != 0 || p->name.size() == 4 ||
        p->name.find_first_not_of("0123456789", 4) != std::string::npos)
      return false;
    p->place.numa_node = std::atoi(p->name.c_str() + 4);
    p->cpus = read_sysfs_line((dir / "cpulist").string());
    return true;
  });
  std::sort(nodes.begin(), nodes.end(),
            [](const NamedPlace& a, const NamedPlace& b) { return a.place.numa_node < b.place.numa_node; });
  return nodes;
}

int numa_node_of_cpus(const std::vector<int>& cpus, const std::string& root) {
  if (cpus.empty()) return -1;
  for (const NamedPlace& node : sysfs_numa_nodes(root)) {
    std::vector<int> mine = parse_cpu_list(node.cpus);
    std::sort(mine.begin(), mine.end());
    if (std::all_of(cpus.begin(), cpus.end(), [&](int c) { return std::binary_search(mine.begin(), mine.end(), c); }))
      return node.place.numa_node;
  }
  return -1;
}

bool order_by_rail(std::vector<int>* chosen, const std::vector<NetProperties>& devices) {
  auto all_have = [&](int NetProperties::*id) {
    return std::all_of(chosen->begin(), chosen->end(), [&](int d) { return devices[size_t(d)].*id >= 0; });
  };
  if (chosen->empty() || !(all_have(&NetProperties::rail) || all_have(&NetProperties::plane))) return false;
  std::stable_sort(chosen->begin(), chosen->end(), [&](int a, int b) {
    const NetProperties &x = devices[size_t(a)], &y = devices[size_t(b)];
    return std::pair(x.rail, x.plane) < std::pair(y.rail, y.plane);
  });
  return true;
}

namespace {

// Where NCCL_TOPO_FILE has `bus_id`: its place there instead of sysfs's.
bool place_by_file(const TopologyPlaces& file, const std::string& bus_id, std::string* path, int* numa_node) {
  auto at = file.find(bus_id);
  if (at == file.end()) return false;
  *path = at->second.path;
  *numa_node = at->second.numa_node;
  return true;
}

}  // namespace

Status choose_net_devices(const TransportContext& ctx, Bootstrap* bootstrap,
                          const std::vector<NetProperties>& net_devices, NetDeviceChoice* out) {
  std::string file_name;
  const TopologyPlaces file = topology_file(&file_name);
  int by_file = 0;
  std::vector<DevicePlace> devices;
  for (const NetProperties& d : net_devices) {
    DevicePlace p = device_place(d.pci_path);
    by_file += place_by_file(file, bus_id_of_path(p.pci_path), &p.pci_path, &p.numa_node);
    devices.push_back(p);
  }
  RankPlace me;
  me.gpu_pci_path = pci_bus_id_path(ctx.gpu_pci_bus_id);
  me.gpu_numa_node = read_numa_node(me.gpu_pci_path);
  by_file += place_by_file(file, lower_bus_id(ctx.gpu_pci_bus_id), &me.gpu_pci_path, &me.gpu_numa_node);
  me.numa_node = numa_node_of_cpus(allowed_cpus());
  const NearestDevices nearest = nearest_devices(devices, me);
  // The ranks of this host with the same nearest devices share them out.
  uint64_t mine = fnv1a(std::string_view(reinterpret_cast<const char*>(nearest.devices.data()),
                                         nearest.devices.size() * sizeof(int)));
  std::vector<uint64_t> all(size_t(ctx.nranks));
  all[size_t(ctx.rank)] = mine;
  BRAID_TRY(std::move(bootstrap->allgather(all.data(), sizeof(uint64_t))).context("net device choice"));
  int k = 0, m = 0;
  for (int r = 0; r < ctx.nranks; ++r)
    if (ctx.peers[size_t(r)].host_hash == ctx.peers[size_t(ctx.rank)].host_hash && all[size_t(r)] == mine) {
      k += r < ctx.rank;
      ++m;
    }
  const std::string spec = env_raw("NCCL_NETDEVS_POLICY");
  bool recognized = true;
  const NetDevsPolicy policy = spec.empty() ? NetDevsPolicy{} : parse_netdevs_policy(spec, &recognized);
  if (!recognized && ctx.rank == 0)
    BRAID_INFO(kEnv, "NCCL_NETDEVS_POLICY={} is not AUTO, ALL or MAX:N (N > 0): AUTO, as NCCL", spec);
  out->devices = rank_devices(nearest.devices, int(devices.size()), k, m, policy);
  const bool by_rail = order_by_rail(&out->devices, net_devices);
  // Every rank's count: a call between hosts runs in the most slices any needs.
  std::vector<int32_t> counts(size_t(ctx.nranks));
  counts[size_t(ctx.rank)] = int32_t(out->devices.size());
  BRAID_TRY(std::move(bootstrap->allgather(counts.data(), sizeof(int32_t))).context("net device choice"));
  out->most_devices = std::max(1, *std::max_element(counts.begin(), counts.end()));
  out->why = fmt::format("{} of {} devices, {}", nearest.devices.size(), devices.size(), describe(nearest, me));
  if (m > 1) out->why += fmt::format(", shared by {} ranks", m);
  if (by_rail && out->devices.size() > 1) out->why += ", in rail order";
  if (by_file) out->why += fmt::format(", placed by {}", file_name);
  return Status::ok();
}

}  // namespace braid

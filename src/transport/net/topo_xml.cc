#include "src/transport/net/topo_xml.h"

#include <fmt/format.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "src/base/net_interface.h"
#include "src/transport/net/nic_affinity.h"
#include "src/transport/net/topo_file.h"

namespace braid {
namespace fs = std::filesystem;
namespace {

struct Node {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<std::unique_ptr<Node>> subs;

  Node* add(const std::string& tag) {
    subs.push_back(std::make_unique<Node>());
    subs.back()->name = tag;
    return subs.back().get();
  }
  void set(const std::string& key, const std::string& value) { attrs.emplace_back(key, value); }
  const std::string* get(const std::string& key) const {
    for (const auto& [k, v] : attrs)
      if (k == key) return &v;
    return nullptr;
  }
  Node* sub(const std::string& tag, const std::string& key = "", const std::string& value = "") {
    for (const auto& s : subs)
      if (s->name == tag && (key.empty() || (s->get(key) && *s->get(key) == value))) return s.get();
    return nullptr;
  }
  // A <pci> child in bus id order among its <pci> siblings (NCCL keeps them so).
  Node* add_pci(const std::string& busid) {
    auto at = subs.begin();
    while (at != subs.end() && !((*at)->name == "pci" && *(*at)->get("busid") > busid)) ++at;
    auto node = std::make_unique<Node>();
    node->name = "pci";
    node->set("busid", busid);
    return subs.insert(at, std::move(node))->get();
  }
};

void print(const Node& n, int indent, std::string* out) {
  out->append(size_t(indent), ' ');
  *out += "<" + n.name;
  for (const auto& [k, v] : n.attrs) *out += fmt::format(" {}=\"{}\"", k, v);
  if (n.subs.empty()) {
    *out += "/>\n";
    return;
  }
  *out += ">\n";
  for (const auto& s : n.subs) print(*s, indent + 2, out);
  out->append(size_t(indent), ' ');
  *out += "</" + n.name + ">\n";
}

// The cpumap of `cpus` as the kernel writes one: 32-bit hex words, the
// highest first, joined by commas.
std::string cpumap_of(const std::vector<int>& cpus) {
  const int top = cpus.empty() ? 0 : *std::max_element(cpus.begin(), cpus.end());
  std::vector<uint32_t> words(size_t(top / 32 + 1));
  for (int c : cpus) words[size_t(c / 32)] |= 1u << (c % 32);
  std::string out;
  for (size_t i = words.size(); i-- > 0;) out += fmt::format("{}{:08x}", out.empty() ? "" : ",", words[i]);
  return out;
}

std::string numa_affinity(const std::string& numaid, const std::string& root) {
  const std::string map = read_sysfs_line(root + "/devices/system/node/node" + numaid + "/cpumap");
  if (!map.empty()) return map;
  cpu_set_t set;  // no such node (-1, or no NUMA in sysfs): the CPUs this process may run on
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpumap_of(cpus);
}

void fill_cpu(Node* cpu, uint64_t host_hash, const std::string& numaid, const std::string& root) {
  cpu->set("host_hash", fmt::format("{:#x}", host_hash));
  cpu->set("numaid", numaid);
  cpu->set("affinity", numa_affinity(numaid, root));
#if defined(__x86_64__)
  cpu->set("arch", "x86_64");
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    cpu->set("vendor", vendor);
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {  // NCCL's family and model: base plus extended
    cpu->set("familyid", std::to_string(((a >> 8) & 0xf) + (((a >> 20) & 0xff) << 4)));
    cpu->set("modelid", std::to_string(((a >> 4) & 0xf) + (((a >> 16) & 0xf) << 4)));
  }
#elif defined(__aarch64__)
  cpu->set("arch", "arm64");
#elif defined(__PPC__)
  cpu->set("arch", "ppc64");
#endif
}

double gts(const std::string& speed) {  // "32.0 GT/s PCIe" -> 32 (none: above any)
  char* end = nullptr;
  const double v = std::strtod(speed.c_str(), &end);
  return end == speed.c_str() ? 1e30 : v;
}

void fill_pci(Node* pci, const std::string& path) {
  for (const char* key : {"class", "vendor", "device", "subsystem_vendor", "subsystem_device"})
    pci->set(key, read_sysfs_line(path + "/" + key));
  const std::string speed = read_sysfs_line(path + "/max_link_speed");
  const std::string port_speed = read_sysfs_line(path + "/../max_link_speed");
  pci->set("link_speed", gts(port_speed) < gts(speed) ? port_speed : speed);
  const int width = std::atoi(read_sysfs_line(path + "/max_link_width").c_str());
  const int port_width = std::atoi(read_sysfs_line(path + "/../max_link_width").c_str());
  pci->set("link_width", std::to_string(std::min(width, port_width)));
}

class Builder {
 public:
  Builder(uint64_t host_hash, std::string root) : host_hash_(host_hash), root_(std::move(root)) {
    system_.name = "system";
    system_.set("version", "1");
  }

  // The <pci> node of the device at sysfs `path` (resolved), with the
  // bridges above it; nullptr where sysfs does not place it on PCI.
  Node* pci_node(const std::string& path) {
    Node* parent = nullptr;
    std::string at;
    for (const auto& part : fs::path(path)) {
      const std::string name = part.string();
      at = at.empty() || at == "/" ? at + name : at + "/" + name;
      if (!is_pci_bus_id(name)) continue;
      if (!parent) {  // the outermost function: its NUMA node is its root complex's CPU
        std::string numa = read_sysfs_line(at + "/numa_node");
        parent = cpu(numa.empty() ? "-1" : numa);
      }
      Node* next = parent->sub("pci", "busid", name);
      if (!next) {
        next = parent->add_pci(name);
        fill_pci(next, at);
      }
      parent = next;
    }
    return parent;
  }

  Node* cpu(const std::string& numaid) {
    if (Node* c = system_.sub("cpu", "numaid", numaid)) return c;
    Node* c = system_.add("cpu");
    fill_cpu(c, host_hash_, numaid, root_);
    return c;
  }
  Node* first_cpu() { return system_.sub("cpu") ? system_.sub("cpu") : cpu("0"); }

  std::string text() const {
    std::string out;
    print(system_, 0, &out);
    return out;
  }

 private:
  Node system_;
  const uint64_t host_hash_;
  const std::string root_;
};

// Whether the device at (resolved) `path` is a PCI function, as NCCL asks: its subsystem link ends in "pci".
bool on_pci(const std::string& path) {
  char subsystem[PATH_MAX];
  if (path.empty() || !realpath((path + "/subsystem").c_str(), subsystem)) return false;
  return fs::path(subsystem).filename() == "pci";
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t node_guid(const std::string& text) {  // "a088:c203:00e1:f200", as the verbs API holds it (big endian)
  std::string hex;
  for (char c : text)
    if (c != ':') hex += c;
  const uint64_t v = std::strtoull(hex.c_str(), nullptr, 16);
  return __builtin_bswap64(v);
}

}  // namespace

std::vector<TopoNet> sysfs_topology_nets(const std::string& ifname_filter, const std::string& root) {
  std::vector<TopoNet> nets;
  for (const std::string& dev : listing(root + "/class/infiniband")) {
    const std::string dir = root + "/class/infiniband/" + dev;
    for (const std::string& port : listing(dir + "/ports")) {
      if (read_sysfs_line(dir + "/ports/" + port + "/state").find("ACTIVE") == std::string::npos) continue;
      TopoNet n;
      n.name = dev;
      n.device_path = device_place(dir + "/device").pci_path;
      n.port = std::atoi(port.c_str());
      const double gbps = std::strtod(read_sysfs_line(dir + "/ports/" + port + "/rate").c_str(), nullptr);
      if (gbps > 0) n.speed_mbps = int(gbps * 1000);
      n.guid = node_guid(read_sysfs_line(dir + "/node_guid"));
      n.max_comms = 131072;
      nets.push_back(n);
    }
  }
  if (!nets.empty()) return nets;
  const InterfaceFilter filter = parse_interface_filter(ifname_filter);
  for (const std::string& name : listing(root + "/class/net")) {
    const std::string dir = root + "/class/net/" + name;
    const unsigned long flags = std::strtoul(read_sysfs_line(dir + "/flags").c_str(), nullptr, 16);
    if (!(flags & 0x1) || (flags & 0x8) || name.rfind("docker", 0) == 0 || name.rfind("virbr", 0) == 0) continue;
    if (!ifname_filter.empty() && !filter.passes(name)) continue;  // IFF_UP 0x1, IFF_LOOPBACK 0x8
    TopoNet n;
    n.name = name;
    n.device_path = device_place(dir + "/device").pci_path;
    const int mbps = std::atoi(read_sysfs_line(dir + "/speed").c_str());
    if (mbps > 0) n.speed_mbps = mbps;
    n.guid = nets.size();
    nets.push_back(n);
  }
  return nets;
}

int gpu_pci_index(const std::string& bus_id, const std::string& root) {
  const std::vector<NamedPlace> gpus = sysfs_nvidia_gpus(root);  // by name: bus id order
  for (size_t i = 0; i < gpus.size(); ++i)
    if (gpus[i].name == lower_bus_id(bus_id)) return int(i);
  return -1;
}

std::string topology_xml(const std::vector<TopoGpu>& gpus, const std::vector<TopoNet>& nets, uint64_t host_hash,
                         const std::string& root) {
  Builder b(host_hash, root);
  for (const TopoGpu& g : gpus) {
    Node* pci = b.pci_node(pci_bus_id_path(g.bus_id, root));
    if (!pci) continue;  // not in sysfs: NCCL, too, places a GPU by its sysfs path
    Node* gpu = pci->add("gpu");
    gpu->set("dev", std::to_string(g.dev));
    gpu->set("sm", std::to_string(g.sm));
    gpu->set("rank", std::to_string(g.rank));
    gpu->set("gdr", "0");
    for (const TopoNvLink& l : g.nvlinks) {
      Node* link = gpu->add("nvlink");
      link->set("target", l.target);
      link->set("count", std::to_string(l.count));
      link->set("tclass", l.tclass);
    }
  }
  for (size_t d = 0; d < nets.size(); ++d) {
    const TopoNet& n = nets[d];
    Node* parent = on_pci(n.device_path) ? b.pci_node(n.device_path) : nullptr;
    if (!parent) parent = b.first_cpu();
    Node* nic = parent->sub("nic");
    if (!nic) nic = parent->add("nic");
    Node* net = nic->add("net");
    net->set("name", n.name);
    net->set("dev", std::to_string(d));
    net->set("speed", std::to_string(n.speed_mbps));
    net->set("port", std::to_string(n.port));
    net->set("latency", "0.000000");
    net->set("guid", fmt::format("{:#x}", n.guid));
    net->set("maxconn", std::to_string(n.max_comms));
    net->set("gdr", "0");
  }
  return b.text();
}

}  // namespace braid

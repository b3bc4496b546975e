// NCCL's topology XML (the file NCCL_TOPO_DUMP_FILE writes and
// NCCL_TOPO_FILE reads) as one node of braid's hardware model.
//
// The file is NCCL's view of one host: <cpu> roots, a tree of <pci> bridges,
// and at the leaves <gpu dev sm ...> with their <nvlink target count tclass>
// and <nic> with their <net speed ...> ports.  Read here the way NCCL's
// topo.cc reads it:
//  - a GPU's NVLink carries ncclTopoNVLinkBw(sm) GB/s per link and
//    direction (18 on sm60, 20 on sm70/80, 12 on sm86, 20.6 on sm90, 40.1
//    from sm100), times its count;
//  - tclass 0x03.... is a GPU, the target its PCI bus id; 0x068001 a CPU
//    (POWER9's NVLink, which carries no GPU-to-GPU bytes); anything else
//    the NVSwitch (NCCL's fallback too);
//  - a PCIe link carries width * rate / 80 GB/s (rate per lane in 100 Mb/s,
//    NCCL's table: 8 GT/s is 60, 16 GT/s 120, unknown 60);
//  - a <net> is a NIC port (net="0": a GIN/RMA-only device, not one) of
//    `speed` Mb/s (none or <= 0: 10000, as NCCL).
// braid's node model (topology.h) is either switched or direct, so a node is:
//  - NVSwitch: every GPU has NVLinks to it; each pair at the slower GPU's
//    switch bandwidth, through both GPUs' switch ports;
//  - direct NVLink: the pairs with NVLinks, at their bandwidth; the NVLink
//    graph must join every GPU (the PCIe paths beside it are not modelled,
//    as in TACCL's profiles and braid's dgx1);
//  - PCIe only (no <nvlink> at all): every pair through a switch whose port
//    per GPU is its PCIe link.  Vendors' static files (AWS's, Azure's) leave
//    the NVLinks out for NCCL to find, so such a file reads as PCIe only: a
//    note says so; NCCL_TOPO_DUMP_FILE's output has them.
// Alphas are braid's nominal ones (0.3 us in the node, 2.6 us between
// nodes): NCCL's file has no latencies worth the name.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <pugixml.hpp>
#include <set>

#include "braid/topology.h"

namespace braid {
namespace {

constexpr double kLocalAlphaUs = 0.3;
constexpr double kRemoteAlphaUs = 2.6;
constexpr const char* kNvSwitchClass = "0x068000";
constexpr const char* kCpuClass = "0x068001";

double nvlink_gbps(int sm) {
  return sm >= 100 ? 40.1 : sm >= 90 ? 20.6 : sm == 86 ? 12.0 : sm >= 70 ? 20.0 : sm >= 60 ? 18.0 : 20.0;
}

// us per MB (10^6 bytes) at `gbps` GB/s.
double beta_of(double gbps) { return 1000.0 / gbps; }

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

double pcie_gbps(const pugi::xml_node& pci) {
  int width = pci.attribute("link_width").as_int(16);
  if (width == 0) width = 16;
  const std::string rate = pci.attribute("link_speed").as_string();
  int per_lane = 60;  // 100 Mb/s units per lane
  for (const auto& [prefix, value] : std::initializer_list<std::pair<const char*, int>>{
           {"2.5 GT/s", 15}, {"5 GT/s", 30}, {"5.0 GT/s", 30}, {"8 GT/s", 60}, {"8.0 GT/s", 60}, {"16 GT/s", 120},
           {"16.0 GT/s", 120}, {"32 GT/s", 240}, {"32.0 GT/s", 240}, {"64.0 GT/s", 480}})
    if (rate.rfind(prefix, 0) == 0) per_lane = value;
  return width * per_lane / 80.0;
}

struct Gpu {
  int dev = 0;
  int sm = 0;
  std::string busid;  // lower case
  std::string host;   // its <cpu>'s host_hash ("" when the file has none)
  double pcie = 0;    // GB/s
  pugi::xml_node node;
};

bool read_int(const pugi::xml_node& n, const char* attr, int* out, std::string* error) {
  const pugi::xml_attribute a = n.attribute(attr);
  char* end = nullptr;
  const long v = a ? std::strtol(a.value(), &end, 0) : 0;
  if (!a || end == a.value() || *end != '\0')
    return *error = fmt::format("<{}> without a number in '{}' (at byte {})", n.name(), attr, n.offset_debug()), false;
  *out = int(v);
  return true;
}

bool read_gpus(const pugi::xml_node& system, std::vector<Gpu>* gpus, std::string* error) {
  for (const pugi::xpath_node& x : system.select_nodes(".//gpu")) {
    Gpu g;
    g.node = x.node();
    if (!read_int(g.node, "dev", &g.dev, error) || !read_int(g.node, "sm", &g.sm, error)) return false;
    pugi::xml_node pci = g.node.parent();
    while (pci && std::string(pci.name()) != "pci") pci = pci.parent();
    if (!pci || !pci.attribute("busid"))
      return *error = fmt::format("GPU dev {} is not inside a <pci> with a busid", g.dev), false;
    g.busid = lower(pci.attribute("busid").value());
    g.pcie = pcie_gbps(pci);
    if (!(g.pcie > 0))
      return *error = fmt::format("GPU dev {}'s <pci> has link_width {}: not a width (NCCL's 0 means 16)", g.dev,
                                  pci.attribute("link_width").value()),
             false;
    for (pugi::xml_node up = pci; up; up = up.parent())
      if (std::string(up.name()) == "cpu") g.host = up.attribute("host_hash").as_string();
    gpus->push_back(g);
  }
  if (gpus->empty()) return *error = "no <gpu> in the topology", false;
  std::sort(gpus->begin(), gpus->end(), [](const Gpu& a, const Gpu& b) { return a.dev < b.dev; });
  std::set<std::string> hosts;
  for (size_t i = 0; i < gpus->size(); ++i) {
    hosts.insert((*gpus)[i].host);
    if (i && (*gpus)[i].dev == (*gpus)[i - 1].dev)
      return *error = fmt::format("two GPUs are dev {}: the file describes more than one host, or is not NCCL's",
                                  (*gpus)[i].dev),
             false;
  }
  if (hosts.size() > 1)
    return *error = fmt::format("the file describes {} hosts; braid models one node and replicates it: give one "
                                "host's file",
                                hosts.size()),
           false;
  return true;
}

// Whether the pairs with a bandwidth join every GPU.
bool connected(const std::vector<std::vector<double>>& gbps) {
  const size_t n = gbps.size();
  std::vector<bool> seen(n, false);
  std::function<void(size_t)> visit = [&](size_t a) {
    seen[a] = true;
    for (size_t b = 0; b < n; ++b)
      if (!seen[b] && (gbps[a][b] > 0 || gbps[b][a] > 0)) visit(b);
  };
  visit(0);
  return std::all_of(seen.begin(), seen.end(), [](bool s) { return s; });
}

bool read_nvlinks(const std::vector<Gpu>& gpus, std::vector<std::vector<double>>* direct, std::vector<double>* to_switch,
                  std::string* error) {
  const size_t n = gpus.size();
  direct->assign(n, std::vector<double>(n, 0));
  to_switch->assign(n, 0);
  for (size_t a = 0; a < n; ++a)
    for (const pugi::xml_node& link : gpus[a].node.children("nvlink")) {
      int count = 0;
      if (!read_int(link, "count", &count, error)) return false;
      const double gbps = count * nvlink_gbps(gpus[a].sm);
      const std::string tclass = lower(link.attribute("tclass").as_string());
      if (tclass == kCpuClass) continue;
      if (tclass.rfind("0x03", 0) != 0) {
        (*to_switch)[a] += gbps;
        continue;
      }
      const std::string target = lower(link.attribute("target").as_string());
      auto b = std::find_if(gpus.begin(), gpus.end(), [&](const Gpu& g) { return g.busid == target; });
      if (b == gpus.end())
        return *error = fmt::format("an NVLink of GPU dev {} goes to GPU '{}', which is not in the file", gpus[a].dev,
                                    target),
               false;
      (*direct)[a][size_t(b - gpus.begin())] += gbps;
    }
  return true;
}

}  // namespace

bool nccl_topology_profile(const std::string& xml, const std::string& name, NodeProfile* out,
                           std::vector<std::string>* notes, std::string* error) {
  pugi::xml_document doc;
  const pugi::xml_parse_result parsed = doc.load_buffer(xml.data(), xml.size());
  if (!parsed) return *error = fmt::format("not XML: {} at byte {}", parsed.description(), parsed.offset), false;
  const pugi::xml_node system = doc.child("system");
  if (!system) return *error = "no <system> element: not an NCCL topology file", false;
  std::vector<Gpu> gpus;
  if (!read_gpus(system, &gpus, error)) return false;
  std::vector<std::vector<double>> direct;
  std::vector<double> to_switch;
  if (!read_nvlinks(gpus, &direct, &to_switch, error)) return false;

  const int g = int(gpus.size());
  NodeProfile p;
  p.name = name;
  p.gpus_per_node = g;
  p.alpha_us = kLocalAlphaUs;
  p.betas.assign(size_t(g), std::vector<double>(size_t(g), 0));
  const bool any_switch = std::any_of(to_switch.begin(), to_switch.end(), [](double v) { return v > 0; });
  bool any_direct = false;
  for (const auto& row : direct) any_direct |= std::any_of(row.begin(), row.end(), [](double v) { return v > 0; });
  std::vector<double> port = to_switch;  // per GPU, when switched
  if (any_switch) {
    for (int a = 0; a < g; ++a)
      if (to_switch[size_t(a)] <= 0)
        return *error = fmt::format("GPU dev {} has no NVLink to the NVSwitch the others use; braid models a node "
                                    "as all switched or all direct",
                                    gpus[size_t(a)].dev),
               false;
    if (any_direct) notes->push_back("GPU-to-GPU NVLinks beside the NVSwitch are left out of the model");
  } else if (any_direct) {
    if (!connected(direct))
      return *error = "the NVLinks do not join every GPU, and braid's node model has no PCIe path beside NVLink", false;
  } else {
    for (int a = 0; a < g; ++a) port[size_t(a)] = gpus[size_t(a)].pcie;
    p.switch_kind = LinkKind::Pcie;
    if (g > 1)
      notes->push_back("no <nvlink> in the file: the GPUs are joined by their PCIe links only (static files such as "
                       "AWS's and Azure's leave NVLink out for NCCL to find; NCCL_TOPO_DUMP_FILE's output has it)");
  }
  p.switched = !any_direct || any_switch;
  for (int a = 0; a < g; ++a)
    for (int b = 0; b < g; ++b) {
      if (a == b) continue;
      const double gbps = p.switched ? std::min(port[size_t(a)], port[size_t(b)]) : direct[size_t(a)][size_t(b)];
      if (gbps > 0) p.betas[size_t(a)][size_t(b)] = beta_of(gbps);
    }

  double slowest_mbps = 0;
  for (const pugi::xpath_node& x : system.select_nodes(".//nic/net")) {
    if (x.node().attribute("net") && x.node().attribute("net").as_int() == 0) continue;
    int mbps = x.node().attribute("speed").as_int(0);
    if (mbps <= 0) mbps = 10000;
    slowest_mbps = p.nics_per_node++ ? std::min<double>(slowest_mbps, mbps) : mbps;
  }
  if (p.nics_per_node > 0) {
    p.remote_alpha_us = kRemoteAlphaUs;
    p.remote_beta_us_per_mb = 8e6 / slowest_mbps;  // 10^6 bytes at mbps * 10^6 / 8 bytes per second
  }
  *out = std::move(p);
  return true;
}

}  // namespace braid

// Topology model: built-in machines, replication to N nodes, and the two
// JSON forms (braid's, TACCL's profiles); NCCL's XML is nccl_topology.cc.
// See include/braid/topology.h.
//
// Built-in link costs are nominal per-direction figures in us per MB:
// NDv2/DGX-1 from TACCL's published 1 MB profile (double NVLink pair 23,
// single 46, alpha 0.3; InfiniBand alpha 2.6, beta 105), DGX-2 from the same
// source (NVSwitch beta 8), DGX-A100 300 GB/s NVSwitch and 200 Gb/s NICs,
// DGX-H100 450 GB/s NVSwitch and 400 Gb/s NICs.  They are model inputs, not
// measurements of these machines.
#include "braid/topology.h"

#include <fmt/format.h>

#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/base/text_file.h"

namespace braid {
namespace {

// Every pair of ranks on different nodes is a link: 4096 ranks are 16.7M.
constexpr int kMostTopologyRanks = 4096;

using nlohmann::json;

// V100 hybrid cube-mesh: which GPU pairs have a doubled NVLink (2) or a
// single one (1).  Same for NDv2 and DGX-1.
const int kCubeMesh[8][8] = {
    {0, 2, 1, 1, 2, 0, 0, 0}, {2, 0, 1, 2, 0, 1, 0, 0}, {1, 1, 0, 2, 0, 0, 2, 0}, {1, 2, 2, 0, 0, 0, 0, 1},
    {2, 0, 0, 0, 0, 2, 1, 1}, {0, 1, 0, 0, 2, 0, 1, 2}, {0, 0, 2, 0, 1, 1, 0, 2}, {0, 0, 0, 1, 1, 2, 2, 0},
};

NodeProfile cube_mesh(const std::string& name, int nics, double double_beta, double single_beta) {
  NodeProfile p;
  p.name = name;
  p.gpus_per_node = 8;
  p.nics_per_node = nics;
  p.betas.assign(8, std::vector<double>(8, 0));
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      p.betas[a][b] = kCubeMesh[a][b] == 2 ? double_beta : kCubeMesh[a][b] == 1 ? single_beta : 0;
  p.alpha_us = 0.3;
  p.remote_alpha_us = 2.6;
  p.remote_beta_us_per_mb = 105;
  return p;
}

NodeProfile switched(const std::string& name, int gpus, int nics, double beta, double remote_beta) {
  NodeProfile p;
  p.name = name;
  p.gpus_per_node = gpus;
  p.nics_per_node = nics;
  p.switched = true;
  p.betas.assign(gpus, std::vector<double>(gpus, beta));
  for (int g = 0; g < gpus; ++g) p.betas[g][g] = 0;
  p.alpha_us = 0.3;
  p.remote_alpha_us = 2.6;
  p.remote_beta_us_per_mb = remote_beta;
  return p;
}

bool builtin_profile(const std::string& name, NodeProfile* out) {
  if (name == "ndv2") *out = cube_mesh("ndv2", 1, 23, 46);
  else if (name == "dgx1") *out = cube_mesh("dgx1", 4, 23, 46);
  else if (name == "dgx2") *out = switched("dgx2", 16, 8, 8, 105);
  else if (name == "dgx-a100") *out = switched("dgx-a100", 8, 8, 1e6 / 300e3, 40);
  else if (name == "dgx-h100") *out = switched("dgx-h100", 8, 8, 1e6 / 450e3, 20);
  else return false;
  return true;
}

template <typename T>
bool get(const json& j, const char* key, T* out, std::string* error, bool required = true) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) *error = fmt::format("missing field '{}'", key);
    return !required;
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    if (!it->is_number_integer())  // json would truncate 2.5 to 2
      return *error = fmt::format("field '{}' must be an integer", key), false;
  try {
    *out = it->get<T>();
  } catch (const std::exception&) {
    *error = fmt::format("field '{}' has the wrong type", key);
    return false;
  }
  return true;
}

bool braid_topology_from_json(const json& j, Topology* t, std::string* error) {
  if (!get(j, "name", &t->name, error) || !get(j, "nodes", &t->nodes, error) ||
      !get(j, "gpus_per_node", &t->gpus_per_node, error) || !get(j, "nics_per_node", &t->nics_per_node, error) ||
      !get(j, "local_beta_us_per_mb", &t->local_beta_us_per_mb, error, false))
    return false;
  if (t->nodes < 1 || t->gpus_per_node < 1) return *error = "nodes and gpus_per_node must be >= 1", false;
  std::vector<std::string> ports;
  if (!get(j, "ports", &ports, error, false)) return false;
  for (auto& p : ports) t->ports.push_back({p});
  if (!j.contains("links") || !j["links"].is_array()) return *error = "missing array 'links'", false;
  for (const json& lj : j["links"]) {
    Link l;
    std::string kind = "nvlink";
    if (!lj.is_object()) return *error = "a link is not an object", false;
    if (!get(lj, "src", &l.src, error) || !get(lj, "dst", &l.dst, error) || !get(lj, "alpha_us", &l.alpha_us, error) ||
        !get(lj, "beta_us_per_mb", &l.beta_us_per_mb, error) || !get(lj, "kind", &kind, error, false) ||
        !get(lj, "ports", &l.ports, error, false))
      return false;
    if (kind == "nvlink") l.kind = LinkKind::NVLink;
    else if (kind == "nvswitch") l.kind = LinkKind::NVSwitch;
    else if (kind == "network") l.kind = LinkKind::Network;
    else if (kind == "pcie") l.kind = LinkKind::Pcie;
    else return *error = fmt::format("unknown link kind '{}'", kind), false;
    if (l.src < 0 || l.dst < 0 || l.src >= t->nranks() || l.dst >= t->nranks() || l.src == l.dst)
      return *error = fmt::format("link {} -> {} is outside 0..{}", l.src, l.dst, t->nranks() - 1), false;
    if (l.alpha_us < 0 || l.beta_us_per_mb <= 0)
      return *error = fmt::format("link {} -> {} needs alpha >= 0 and beta > 0", l.src, l.dst), false;
    for (int p : l.ports)
      if (p < 0 || p >= int(t->ports.size()))
        return *error = fmt::format("link {} -> {} names port {} of {}", l.src, l.dst, p, t->ports.size()), false;
    t->links.push_back(std::move(l));
  }
  return true;
}

// TACCL's profile: one node, costs in us for the profiled chunk size (braid
// reads them as us per MB, i.e. profiles made for 1 MB chunks).
bool taccl_profile_from_json(const json& j, NodeProfile* p, std::string* error) {
  if (!get(j, "name", &p->name, error) || !get(j, "gpus_per_node", &p->gpus_per_node, error) ||
      !get(j, "alpha", &p->alpha_us, error))
    return false;
  const int g = p->gpus_per_node;
  if (g < 1 || g > kMostTopologyRanks)
    return *error = fmt::format("gpus_per_node must be in [1, {}]", kMostTopologyRanks), false;
  if (p->alpha_us < 0) return *error = "alpha must be >= 0", false;
  p->nics_per_node = 0;
  if (j.contains("nics_per_node")) {
    if (!get(j, "nics_per_node", &p->nics_per_node, error) || !get(j, "remote_alpha", &p->remote_alpha_us, error) ||
        !get(j, "remote_beta", &p->remote_beta_us_per_mb, error))
      return false;
    if (p->nics_per_node < 1 || p->remote_beta_us_per_mb <= 0 || p->remote_alpha_us < 0)
      return *error = "nics_per_node must be >= 1, remote_alpha >= 0 and remote_beta > 0", false;
  }
  p->betas.assign(g, std::vector<double>(g, 0));
  if (j.contains("links")) {  // custom: links[dst][src] counts, betas[dst][src]
    std::vector<std::vector<int>> links;
    std::vector<std::vector<double>> betas;
    if (!get(j, "links", &links, error) || !get(j, "betas", &betas, error)) return false;
    if (int(links.size()) != g || int(betas.size()) != g) return *error = "links/betas must be gpus_per_node rows", false;
    for (int d = 0; d < g; ++d) {
      if (int(links[d].size()) != g || int(betas[d].size()) != g)
        return *error = "links/betas rows must have gpus_per_node entries", false;
      for (int s = 0; s < g; ++s)
        if (links[d][s] > 0 && s != d) {
          if (betas[d][s] <= 0) return *error = fmt::format("link {} -> {} has beta <= 0", s, d), false;
          p->betas[s][d] = betas[d][s] / links[d][s];  // parallel links share the bytes
        }
    }
    return true;
  }
  std::vector<double> node_betas;
  if (!get(j, "node_betas_list", &node_betas, error)) return false;
  for (double b : node_betas)
    if (b <= 0) return *error = "node_betas_list entries must be > 0", false;
  if (node_betas.size() == 2 && g == 8) {  // TACCL's ndv2: hybrid cube-mesh
    NodeProfile mesh = cube_mesh(p->name, p->nics_per_node, node_betas[0], node_betas[1]);
    p->betas = mesh.betas;
    return true;
  }
  if (node_betas.size() == 1) {  // TACCL's dgx2 / hub-and-spoke: every pair through a switch
    p->switched = true;
    for (int s = 0; s < g; ++s)
      for (int d = 0; d < g; ++d) p->betas[s][d] = s == d ? 0 : node_betas[0];
    return true;
  }
  *error = "node_betas_list: one entry (switch) or two with 8 GPUs (ndv2); use links/betas for other layouts";
  return false;
}

}  // namespace

const char* link_kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::NVLink: return "nvlink";
    case LinkKind::NVSwitch: return "nvswitch";
    case LinkKind::Network: return "network";
    case LinkKind::Pcie: return "pcie";
  }
  return "?";
}

int Topology::link_index(int src, int dst) const {
  for (size_t i = 0; i < links.size(); ++i)
    if (links[i].src == src && links[i].dst == dst) return int(i);
  return -1;
}

std::vector<int> Topology::hop_distances() const {
  const int n = nranks();
  std::vector<std::vector<int>> out(n);
  for (const Link& l : links) out[l.src].push_back(l.dst);
  std::vector<int> dist(size_t(n) * n, -1);
  for (int s = 0; s < n; ++s) {
    std::deque<int> queue{s};
    dist[size_t(s) * n + s] = 0;
    while (!queue.empty()) {
      int u = queue.front();
      queue.pop_front();
      for (int v : out[u])
        if (dist[size_t(s) * n + v] < 0) dist[size_t(s) * n + v] = dist[size_t(s) * n + u] + 1, queue.push_back(v);
    }
  }
  return dist;
}

namespace {

// A profile of `nodes` nodes small enough to build: every pair of ranks on
// different nodes has a link, so the ranks are capped.
bool replicable(const NodeProfile& p, int nodes, std::string* error) {
  if (nodes < 1 || nodes > 1024) return *error = fmt::format("node count {} is not in [1, 1024]", nodes), false;
  if (int64_t(nodes) * p.gpus_per_node > kMostTopologyRanks)
    return *error = fmt::format("{} nodes of {} GPUs is more than the {} ranks braid models", nodes, p.gpus_per_node,
                                kMostTopologyRanks), false;
  return true;
}

}  // namespace

Topology replicate(const NodeProfile& p, int nodes) {
  Topology t;
  t.name = nodes == 1 ? p.name : fmt::format("{}x{}", p.name, nodes);
  t.nodes = nodes;
  t.gpus_per_node = p.gpus_per_node;
  t.nics_per_node = p.nics_per_node;
  const int g = p.gpus_per_node;
  auto add_port = [&](std::string name) {
    t.ports.push_back({std::move(name)});
    return int(t.ports.size() - 1);
  };
  std::vector<int> switch_tx(size_t(nodes) * g, -1), switch_rx(size_t(nodes) * g, -1);
  std::vector<int> nic_tx(size_t(nodes) * std::max(p.nics_per_node, 1), -1), nic_rx = nic_tx;
  for (int k = 0; k < nodes; ++k) {
    if (p.switched)
      for (int i = 0; i < g; ++i) {
        switch_tx[k * g + i] = add_port(fmt::format("n{}.gpu{}.switch-tx", k, i));
        switch_rx[k * g + i] = add_port(fmt::format("n{}.gpu{}.switch-rx", k, i));
      }
    for (int c = 0; c < p.nics_per_node; ++c) {
      nic_tx[k * p.nics_per_node + c] = add_port(fmt::format("n{}.nic{}.tx", k, c));
      nic_rx[k * p.nics_per_node + c] = add_port(fmt::format("n{}.nic{}.rx", k, c));
    }
  }
  for (int k = 0; k < nodes; ++k)
    for (int a = 0; a < g; ++a)
      for (int b = 0; b < g; ++b) {
        if (a == b || p.betas[a][b] <= 0) continue;
        Link l{k * g + a, k * g + b, p.alpha_us, p.betas[a][b], p.switched ? p.switch_kind : LinkKind::NVLink, {}};
        if (p.switched) l.ports = {switch_tx[k * g + a], switch_rx[k * g + b]};
        t.links.push_back(std::move(l));
      }
  if (p.nics_per_node > 0 && nodes > 1) {
    auto nic_of = [&](int local) { return local * p.nics_per_node / g; };
    for (int s = 0; s < nodes * g; ++s)
      for (int d = 0; d < nodes * g; ++d) {
        if (s / g == d / g) continue;
        Link l{s, d, p.remote_alpha_us, p.remote_beta_us_per_mb, LinkKind::Network, {}};
        l.ports = {nic_tx[(s / g) * p.nics_per_node + nic_of(s % g)], nic_rx[(d / g) * p.nics_per_node + nic_of(d % g)]};
        t.links.push_back(std::move(l));
      }
  }
  return t;
}

std::vector<std::pair<std::string, std::string>> builtin_topology_names() {
  return {{"ndv2", "Azure NDv2: 8 V100, hybrid cube-mesh NVLink, 1 NIC"},
          {"dgx1", "DGX-1: 8 V100, hybrid cube-mesh NVLink, 4 NICs"},
          {"dgx2", "DGX-2: 16 V100 on NVSwitch, 8 NICs"},
          {"dgx-a100", "DGX-A100: 8 A100 on NVSwitch, 8 NIC rails (200 Gb/s)"},
          {"dgx-h100", "DGX-H100: 8 H100 on NVSwitch, 8 NIC rails (400 Gb/s)"}};
}

bool builtin_topology(const std::string& spec, int nodes, Topology* out, std::string* error) {
  NodeProfile p;
  if (!builtin_profile(spec, &p)) {
    // "dgx2x4": a built-in name, then "x" and a node count.
    size_t x = spec.rfind('x');
    bool counted = x != std::string::npos && x + 1 < spec.size() && spec.size() - x <= 5 &&
                   spec.find_first_not_of("0123456789", x + 1) == std::string::npos;
    if (!counted || !builtin_profile(spec.substr(0, x), &p))
      return *error = fmt::format("unknown topology '{}' (braid topo lists the built-ins)", spec), false;
    nodes = std::stoi(spec.substr(x + 1));
  }
  if (!replicable(p, nodes, error)) return false;
  *out = replicate(p, nodes);
  return true;
}

bool topology_from_json(const std::string& text, int nodes, Topology* out, std::string* error) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return *error = "not a JSON object", false;
  Topology t;
  if (j.contains("format")) {
    if (j["format"] != "braid-topology") return *error = "unknown 'format' (expected braid-topology)", false;
    if (!braid_topology_from_json(j, &t, error)) return false;
  } else {
    NodeProfile p;
    if (!taccl_profile_from_json(j, &p, error)) return *error = "TACCL topology: " + *error, false;
    if (nodes < 1) nodes = 1;
    if (nodes > 1 && p.nics_per_node < 1) return *error = "TACCL topology has no NICs but more than one node", false;
    if (!replicable(p, nodes, error)) return false;
    t = replicate(p, nodes);
  }
  *out = std::move(t);
  return true;
}

std::string topology_to_json(const Topology& t) {
  json j;
  j["format"] = "braid-topology";
  j["name"] = t.name;
  j["nodes"] = t.nodes;
  j["gpus_per_node"] = t.gpus_per_node;
  j["nics_per_node"] = t.nics_per_node;
  j["local_beta_us_per_mb"] = t.local_beta_us_per_mb;
  j["ports"] = json::array();
  for (const Port& p : t.ports) j["ports"].push_back(p.name);
  j["links"] = json::array();
  for (const Link& l : t.links)
    j["links"].push_back({{"src", l.src}, {"dst", l.dst}, {"alpha_us", l.alpha_us}, {"beta_us_per_mb", l.beta_us_per_mb},
                          {"kind", link_kind_name(l.kind)}, {"ports", l.ports}});
  return j.dump(1);
}

namespace {

// NCCL's XML, replicated to `nodes` as a TACCL profile is.
bool topology_from_nccl_xml(const std::string& text, const std::string& path, int nodes, Topology* out,
                            std::vector<std::string>* notes, std::string* error) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  name = name.substr(0, name.rfind('.'));
  NodeProfile p;
  std::vector<std::string> said;
  if (!nccl_topology_profile(text, name, &p, &said, error)) return *error = "NCCL topology: " + *error, false;
  if (notes) notes->insert(notes->end(), said.begin(), said.end());
  if (nodes < 1) nodes = 1;
  if (nodes > 1 && p.nics_per_node < 1) return *error = "NCCL topology has no NICs but more than one node", false;
  if (!replicable(p, nodes, error)) return false;
  *out = replicate(p, nodes);
  return true;
}

}  // namespace

bool load_topology(const std::string& name_or_path, int nodes, Topology* out, std::string* error,
                   std::vector<std::string>* notes) {
  if (!path_exists(name_or_path)) return builtin_topology(name_or_path, nodes < 1 ? 1 : nodes, out, error);
  std::string s;
  if (!read_text_file(name_or_path, &s, error)) return false;
  const size_t first = s.find_first_not_of(" \t\r\n");
  const bool xml = first != std::string::npos && s[first] == '<';
  if (!(xml ? topology_from_nccl_xml(s, name_or_path, nodes, out, notes, error)
            : topology_from_json(s, nodes, out, error)))
    return *error = name_or_path + ": " + *error, false;
  return true;
}

}  // namespace braid

// The hardware model the synthesizer and the simulator work on.
//
// A Topology is `nodes` machines of `gpus_per_node` GPUs each; GPU g of node
// k is rank k*gpus_per_node + g.  Data moves over directed links between
// ranks.  A link costs alpha (us, paid once per message) plus beta (us per MB
// of 10^6 bytes, paid while the bytes are on the wire).  Bytes on the wire
// occupy the link and every port the link goes through: an NVSwitch port
// (each GPU has one egress and one ingress port into the switch, shared by all
// its switch links) or a NIC (tx on the sending node, rx on the receiving
// node, shared by the GPUs that use it).  Parallel links (DGX-1's doubled
// NVLinks) are one link with a smaller beta.
//
// Built-ins (`builtin_topology`): ndv2, dgx1 (8 V100, hybrid cube-mesh; NDv2
// has 1 NIC, DGX-1 4), dgx2 (16 V100 on NVSwitch, 8 NICs), dgx-a100 and
// dgx-h100 (8 GPUs on NVSwitch, one NIC rail per GPU).  Any of them
// replicates to N nodes.  Files: braid's topology JSON, TACCL's topology
// profile JSON as is, or NCCL's topology XML (see synth/README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid {

// Pcie: GPUs meeting through their PCIe links (switched, a port per GPU).
enum class LinkKind : uint8_t { NVLink, NVSwitch, Network, Pcie };
// "nvlink", "nvswitch", "network", "pcie": as braid's topology JSON spells them.
const char* link_kind_name(LinkKind kind);

struct Link {
  int src = 0;
  int dst = 0;
  double alpha_us = 0;
  double beta_us_per_mb = 0;
  LinkKind kind = LinkKind::NVLink;
  std::vector<int> ports;  // indices into Topology::ports the bytes also occupy
};

struct Port {
  std::string name;  // "n0.gpu3.switch-tx", "n1.nic0.rx"
};

struct Topology {
  std::string name;
  int nodes = 1;
  int gpus_per_node = 0;
  int nics_per_node = 0;
  double local_beta_us_per_mb = 0.5;  // a local copy or reduce (HBM-class memory)
  std::vector<Link> links;
  std::vector<Port> ports;

  int nranks() const { return nodes * gpus_per_node; }
  int node_of(int rank) const { return rank / gpus_per_node; }
  int local_of(int rank) const { return rank % gpus_per_node; }
  // The direct link src -> dst, or -1.
  int link_index(int src, int dst) const;
  // Hop counts between all rank pairs over links (-1 unreachable), row-major.
  std::vector<int> hop_distances() const;
};

// One node's intra-node fabric, replicated; inter-node links join every GPU
// to every GPU of other nodes through its NIC (GPU g uses NIC g*nics/gpus).
struct NodeProfile {
  std::string name;
  int gpus_per_node = 0;
  int nics_per_node = 0;
  // Per ordered GPU pair (row = src, column = dst): beta (us/MB) or 0 for no link.
  std::vector<std::vector<double>> betas;
  bool switched = false;  // links go through a switch (ports shared per GPU)
  LinkKind switch_kind = LinkKind::NVSwitch;  // which switch, when switched
  double alpha_us = 0;
  double remote_alpha_us = 0;
  double remote_beta_us_per_mb = 0;
};

Topology replicate(const NodeProfile& node, int nodes);

// Names accepted by builtin_topology, with a one-line description each.
std::vector<std::pair<std::string, std::string>> builtin_topology_names();
// `name` is a built-in, optionally with "xN" for N nodes ("ndv2x2").
bool builtin_topology(const std::string& name, int nodes, Topology* out, std::string* error);

// braid's topology JSON (what topology_to_json writes), or a TACCL profile
// (gpus_per_node, alpha, node_betas_list, remote_* ...; custom `links` and
// `betas` matrices indexed [dst][src]).  TACCL files describe one node;
// `nodes` replicates it (braid files carry their own node count and ignore it).
bool topology_from_json(const std::string& text, int nodes, Topology* out, std::string* error);
std::string topology_to_json(const Topology& topology);
// NCCL's topology XML (NCCL_TOPO_DUMP_FILE's output, NCCL_TOPO_FILE's
// input): one host as a node profile named `name` (synth/nccl_topology.cc
// says how NVLink, NVSwitch, PCIe and NICs map).  `notes` gets what the
// reader should know about the model (NVLinks missing from the file...).
bool nccl_topology_profile(const std::string& xml, const std::string& name, NodeProfile* out,
                           std::vector<std::string>* notes, std::string* error);
// A file path or a built-in name; `nodes` as above (0: the file's / 1).
// Files: braid's or TACCL's JSON, or NCCL's XML (replicated as TACCL's);
// `notes` (optional) gets the XML reader's.
bool load_topology(const std::string& name_or_path, int nodes, Topology* out, std::string* error,
                   std::vector<std::string>* notes = nullptr);

}  // namespace braid

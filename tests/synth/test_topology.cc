// Topology model: built-ins, replication, braid JSON round trip, TACCL
// profiles read as is, and refusal of bad files.
#include <catch2/catch.hpp>

#include "braid/topology.h"

using namespace braid;

namespace {

Topology builtin(const std::string& name, int nodes = 1) {
  Topology t;
  std::string error;
  REQUIRE(builtin_topology(name, nodes, &t, &error));
  return t;
}

const Link& link(const Topology& t, int a, int b) {
  int i = t.link_index(a, b);
  REQUIRE(i >= 0);
  return t.links[i];
}

}  // namespace

TEST_CASE("topology: NDv2 is the hybrid cube-mesh with doubled and single NVLinks", "[synth][topology]") {
  Topology t = builtin("ndv2");
  CHECK(t.nranks() == 8);
  CHECK(t.links.size() == 32);  // 4 NVLink neighbours per GPU, both directions
  CHECK(link(t, 0, 1).beta_us_per_mb == 23);
  CHECK(link(t, 0, 2).beta_us_per_mb == 46);
  CHECK(link(t, 6, 7).beta_us_per_mb == 23);
  CHECK(link(t, 0, 1).alpha_us == 0.3);
  CHECK(t.link_index(0, 5) < 0);
  CHECK(t.link_index(3, 4) < 0);
  auto hops = t.hop_distances();
  CHECK(hops[0 * 8 + 7] == 2);
  CHECK(hops[3 * 8 + 7] == 1);
}

TEST_CASE("topology: replication adds NIC-shared network links", "[synth][topology]") {
  Topology t = builtin("ndv2x2");
  CHECK(t.nodes == 2);
  CHECK(t.nranks() == 16);
  CHECK(t.links.size() == 2 * 32 + 2 * 8 * 8);
  CHECK(t.ports.size() == 4);  // one NIC per node, tx and rx
  const Link& net = link(t, 3, 12);
  CHECK(net.kind == LinkKind::Network);
  CHECK(net.alpha_us == 2.6);
  CHECK(net.beta_us_per_mb == 105);
  REQUIRE(net.ports.size() == 2);
  CHECK(t.ports[net.ports[0]].name == "n0.nic0.tx");
  CHECK(t.ports[net.ports[1]].name == "n1.nic0.rx");
  CHECK(link(t, 9, 8).kind == LinkKind::NVLink);
}

TEST_CASE("topology: DGX-2 switch ports and NIC per GPU pair, and built-in names", "[synth][topology]") {
  Topology t = builtin("dgx2", 2);
  CHECK(t.nranks() == 32);
  CHECK(t.links.size() == 2 * 16 * 15 + 2 * 16 * 16);
  CHECK(t.ports.size() == 2 * (2 * 16 + 2 * 8));
  const Link& sw = link(t, 0, 5);
  CHECK(sw.kind == LinkKind::NVSwitch);
  CHECK(sw.beta_us_per_mb == 8);
  REQUIRE(sw.ports.size() == 2);
  CHECK(t.ports[sw.ports[0]].name == "n0.gpu0.switch-tx");
  CHECK(t.ports[sw.ports[1]].name == "n0.gpu5.switch-rx");
  CHECK(t.ports[link(t, 3, 17).ports[0]].name == "n0.nic1.tx");  // GPUs 2,3 share NIC 1
  CHECK(builtin("dgx2x4").nodes == 4);
  CHECK(builtin("dgx-h100").nranks() == 8);
  CHECK(builtin("dgx-a100x2").nranks() == 16);
  CHECK(builtin("dgx1").nics_per_node == 4);
  Topology bad;
  std::string error;
  CHECK_FALSE(builtin_topology("dgx3", 1, &bad, &error));
  CHECK(error.find("unknown topology") != std::string::npos);
  CHECK_FALSE(builtin_topology("ndv2", 0, &bad, &error));
  CHECK(builtin_topology_names().size() == 5);
}

TEST_CASE("topology: braid JSON round trip", "[synth][topology]") {
  Topology t = builtin("dgx2", 2), back;
  std::string error;
  REQUIRE(topology_from_json(topology_to_json(t), 0, &back, &error));
  CHECK(back.name == t.name);
  CHECK(back.nodes == 2);
  REQUIRE(back.links.size() == t.links.size());
  for (size_t i = 0; i < t.links.size(); ++i) {
    CHECK(back.links[i].src == t.links[i].src);
    CHECK(back.links[i].dst == t.links[i].dst);
    CHECK(back.links[i].beta_us_per_mb == t.links[i].beta_us_per_mb);
    CHECK(back.links[i].ports == t.links[i].ports);
    CHECK(back.links[i].kind == t.links[i].kind);
  }
  CHECK(back.ports.size() == t.ports.size());
}

TEST_CASE("topology: TACCL profiles are read as is", "[synth][topology]") {
  std::string error;
  Topology ndv2;
  // TACCL's examples/topo/topo-ndv2-1MB.json (field for field).
  REQUIRE(topology_from_json(R"({"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3,
      "node_betas_list": [23, 46], "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6,
      "remote_beta": 105})", 2, &ndv2, &error));
  Topology ref = builtin("ndv2x2");
  REQUIRE(ndv2.links.size() == ref.links.size());
  for (size_t i = 0; i < ref.links.size(); ++i) CHECK(ndv2.links[i].beta_us_per_mb == ref.links[i].beta_us_per_mb);
  Topology dgx2;
  REQUIRE(topology_from_json(R"({"name": "DGX2_1MB", "gpus_per_node": 16, "nics_per_node": 8, "alpha": 0.3,
      "node_betas_list": [8], "node_invbws_list": [8], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105})",
                             1, &dgx2, &error));
  CHECK(dgx2.links.size() == 240);
  CHECK(dgx2.links[0].kind == LinkKind::NVSwitch);
  // Custom layout: links[dst][src] with 2 parallel links halving the cost.
  Topology custom;
  REQUIRE(topology_from_json(R"({"name": "c", "gpus_per_node": 3, "alpha": 1,
      "links": [[0, 2, 0], [1, 0, 1], [0, 1, 0]], "betas": [[0, 20, 0], [10, 0, 10], [0, 10, 0]],
      "invbws": [[0, 20, 0], [10, 0, 10], [0, 10, 0]]})", 1, &custom, &error));
  CHECK(custom.links.size() == 4);
  CHECK(link(custom, 1, 0).beta_us_per_mb == 10);  // links[0][1] = 2 links of beta 20
  CHECK(link(custom, 0, 1).beta_us_per_mb == 10);
  CHECK(custom.link_index(0, 2) < 0);
}

TEST_CASE("topology: bad files are refused with the field named", "[synth][topology]") {
  Topology t;
  std::string error;
  CHECK_FALSE(topology_from_json("[1, 2", 1, &t, &error));
  CHECK_FALSE(topology_from_json(R"({"name": "x", "gpus_per_node": 8, "node_betas_list": [1]})", 1, &t, &error));
  CHECK(error.find("alpha") != std::string::npos);
  CHECK_FALSE(topology_from_json(R"({"name": "x", "gpus_per_node": 4, "alpha": 1, "node_betas_list": [1, 2, 3]})", 1, &t,
                                 &error));
  CHECK(error.find("node_betas_list") != std::string::npos);
  CHECK_FALSE(topology_from_json(R"({"name": "x", "gpus_per_node": 2, "alpha": 1, "node_betas_list": [-1]})", 1, &t, &error));
  CHECK_FALSE(topology_from_json(R"({"name": "x", "gpus_per_node": 2, "alpha": 1, "node_betas_list": [1]})", 2, &t, &error));
  CHECK(error.find("no NICs") != std::string::npos);
  CHECK_FALSE(topology_from_json(R"({"format": "braid-topology", "name": "x", "nodes": 1, "gpus_per_node": 2,
      "nics_per_node": 0, "links": [{"src": 0, "dst": 2, "alpha_us": 1, "beta_us_per_mb": 1}]})", 0, &t, &error));
  CHECK(error.find("outside") != std::string::npos);
  CHECK_FALSE(topology_from_json(R"({"format": "braid-topology", "name": "x", "nodes": 1, "gpus_per_node": 2,
      "nics_per_node": 0, "links": [{"src": 0, "dst": 1, "alpha_us": 1, "beta_us_per_mb": 1, "kind": "warp"}]})", 0, &t,
                                 &error));
  CHECK(error.find("warp") != std::string::npos);
  CHECK_FALSE(load_topology("/nonexistent/topo.json", 1, &t, &error));
}

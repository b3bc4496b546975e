// NCCL's topology XML read as braid's node model: NVSwitch, direct NVLink
// (the DGX-1 cube-mesh, link for link against braid's built-in), PCIe only
// with its note, NIC ports and speeds, replication, and refusals that name
// what is wrong.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "braid/topology.h"

using namespace braid;

namespace {

const std::string kData = BRAID_TEST_DATA "/synth/";

Topology load(const std::string& file, int nodes, std::vector<std::string>* notes = nullptr) {
  Topology t;
  std::string error;
  INFO(error);
  REQUIRE(load_topology(kData + file, nodes, &t, &error, notes));
  return t;
}

const Link& link(const Topology& t, int a, int b) {
  const int i = t.link_index(a, b);
  REQUIRE(i >= 0);
  return t.links[size_t(i)];
}

// `gpus` inside a <system> under one <cpu>, each GPU in its own <pci>.
std::string system_of(const std::string& gpus) {
  return "<system version=\"1\"><cpu numaid=\"0\">" + gpus + "</cpu></system>";
}
std::string gpu(int dev, const std::string& links = "", const std::string& busid = "") {
  const std::string bus = busid.empty() ? "0000:0" + std::to_string(dev) + ":00.0" : busid;
  return "<pci busid=\"" + bus + "\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"" +
         std::to_string(dev) + "\" sm=\"80\" rank=\"" + std::to_string(dev) + "\" gdr=\"1\">" + links + "</gpu></pci>";
}
std::string nvlink_to(int dev, int count = 1) {
  return "<nvlink target=\"0000:0" + std::to_string(dev) + ":00.0\" count=\"" + std::to_string(count) +
         "\" tclass=\"0x030200\"/>";
}
const std::string kToSwitch = R"(<nvlink target="fffffff:ffff:ff" count="12" tclass="0x068000"/>)";

std::string refusal(const std::string& xml) {
  NodeProfile p;
  std::vector<std::string> notes;
  std::string error;
  CHECK_FALSE(nccl_topology_profile(xml, "t", &p, &notes, &error));
  return error;
}

}  // namespace

TEST_CASE("NCCL topology XML: an NVSwitch node, its GIN-only device left out", "[synth][topology]") {
  std::vector<std::string> notes;
  const Topology t = load("nccl-topo-nvswitch.xml", 1, &notes);
  CHECK(notes.empty());
  CHECK(t.name == "nccl-topo-nvswitch");
  CHECK(t.gpus_per_node == 8);
  CHECK(t.nics_per_node == 4);  // mlx5_gin has net="0"
  CHECK(t.links.size() == 56);
  const Link& l = link(t, 2, 7);
  CHECK(l.kind == LinkKind::NVSwitch);
  CHECK(l.beta_us_per_mb == Approx(1000.0 / (18 * 20.6)));  // 18 links of sm90's 20.6 GB/s
  CHECK(l.alpha_us == 0.3);
  REQUIRE(l.ports.size() == 2);
  CHECK(t.ports[size_t(l.ports[0])].name == "n0.gpu2.switch-tx");
  CHECK(t.ports[size_t(l.ports[1])].name == "n0.gpu7.switch-rx");
  const Topology two = load("nccl-topo-nvswitch.xml", 2);
  CHECK(two.name == "nccl-topo-nvswitchx2");
  const Link& net = link(two, 0, 9);
  CHECK(net.kind == LinkKind::Network);
  CHECK(net.beta_us_per_mb == Approx(20.0));  // 400 Gb/s
  CHECK(net.alpha_us == 2.6);
}

TEST_CASE("NCCL topology XML: a DGX-1 dump is braid's dgx1 cube-mesh, NVLink for NVLink", "[synth][topology]") {
  const Topology t = load("nccl-topo-cube-mesh.xml", 1);
  Topology dgx1;
  std::string error;
  REQUIRE(builtin_topology("ndv2", 1, &dgx1, &error));
  REQUIRE(t.links.size() == dgx1.links.size());
  for (const Link& ref : dgx1.links) {
    const Link& l = link(t, ref.src, ref.dst);
    CHECK(l.kind == LinkKind::NVLink);
    // NCCL's 20 GB/s per sm70 link: 25 us/MB doubled, 50 single (TACCL measured 23 and 46).
    CHECK(l.beta_us_per_mb == Approx(ref.beta_us_per_mb == 23 ? 25.0 : 50.0));
  }
  CHECK(t.link_index(0, 5) < 0);
  CHECK(t.nics_per_node == 1);
  CHECK(link(load("nccl-topo-cube-mesh.xml", 2), 0, 8).beta_us_per_mb == Approx(80.0));  // 100 Gb/s
}

TEST_CASE("NCCL topology XML: without NVLinks the GPUs meet over PCIe, and a note says why", "[synth][topology]") {
  std::vector<std::string> notes;
  const Topology t = load("nccl-topo-pcie.xml", 2, &notes);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("no <nvlink>") != std::string::npos);
  CHECK(notes[0].find("NCCL_TOPO_DUMP_FILE") != std::string::npos);
  CHECK(t.gpus_per_node == 4);
  CHECK(t.nics_per_node == 2);
  CHECK(link(t, 0, 3).kind == LinkKind::Pcie);  // one switch, a port per GPU
  CHECK(link(t, 0, 3).beta_us_per_mb == Approx(1000.0 / 24));  // Gen4 x16: 16 * 120 / 80 GB/s
  CHECK(link(t, 0, 4).beta_us_per_mb == Approx(800.0));  // speed -1: NCCL's 10 Gb/s
}

TEST_CASE("NCCL topology XML: direct NVLinks may differ per pair, and parse as NCCL's attributes say",
          "[synth][topology]") {
  NodeProfile p;
  std::vector<std::string> notes;
  std::string error;
  // A triangle with one doubled side, and a fourth GPU linked one way only
  // (NVLinks are per direction, as NCCL reads them).  GPU 2's bus id in
  // upper case meets the lower-case targets, as in NCCL's files.
  const std::string to2 = R"(<nvlink target="0000:0a:00.0" count="1" tclass="0x030200"/>)";
  REQUIRE(nccl_topology_profile(system_of(gpu(0, nvlink_to(1, 2) + to2) + gpu(1, nvlink_to(0, 2) + to2) +
                                          gpu(2, nvlink_to(0) + nvlink_to(1), "0000:0A:00.0") + gpu(3, to2)),
                                "t", &p, &notes, &error));
  CHECK_FALSE(p.switched);
  CHECK(p.betas[0][1] == Approx(25.0));
  CHECK(p.betas[1][2] == Approx(50.0));
  CHECK(p.betas[3][2] == Approx(50.0));
  CHECK(p.betas[2][3] == 0);
  CHECK(p.nics_per_node == 0);
  CHECK(notes.empty());
  // Devices in the file's order of dev, whatever the document's order.
  REQUIRE(nccl_topology_profile(system_of(gpu(1, kToSwitch) + gpu(0, kToSwitch)), "t", &p, &notes, &error));
  CHECK(p.gpus_per_node == 2);
  CHECK(p.switched);
  // An NVLink to a POWER9 CPU carries no GPU-to-GPU bytes.
  REQUIRE(nccl_topology_profile(
      system_of(gpu(0, nvlink_to(1) + R"(<nvlink target="0000:00:00.0" count="2" tclass="0x068001"/>)") +
                gpu(1, nvlink_to(0))),
      "t", &p, &notes, &error));
  CHECK_FALSE(p.switched);
  CHECK(p.betas[0][1] == Approx(50.0));
}

TEST_CASE("NCCL topology XML: bad files are refused saying what is wrong", "[synth][topology]") {
  CHECK(refusal("<system version=\"1\"><cpu>").find("not XML") != std::string::npos);
  CHECK(refusal("<topology/>").find("no <system>") != std::string::npos);
  CHECK(refusal(system_of("")).find("no <gpu>") != std::string::npos);
  CHECK(refusal(system_of("<pci busid=\"0000:01:00.0\"><gpu dev=\"0\"/></pci>")).find("'sm'") != std::string::npos);
  CHECK(refusal(system_of("<gpu dev=\"0\" sm=\"80\"/>")).find("not inside a <pci>") != std::string::npos);
  CHECK(refusal(system_of(gpu(0, nvlink_to(7)))).find("0000:07:00.0") != std::string::npos);
  CHECK(refusal(system_of(gpu(0, "<nvlink target=\"0000:01:00.0\" count=\"x\" tclass=\"0x030200\"/>") + gpu(1)))
            .find("'count'") != std::string::npos);
  CHECK(refusal(system_of(gpu(0) + gpu(0, "", "0000:09:00.0"))).find("two GPUs are dev 0") != std::string::npos);
  CHECK(refusal("<system><cpu host_hash=\"0x1\">" + gpu(0) + "</cpu><cpu host_hash=\"0x2\">" + gpu(1) +
                "</cpu></system>")
            .find("2 hosts") != std::string::npos);
  // Two NVLink pairs, nothing between them.
  CHECK(refusal(system_of(gpu(0, nvlink_to(1)) + gpu(1, nvlink_to(0)) + gpu(2, nvlink_to(3)) + gpu(3, nvlink_to(2))))
            .find("do not join every GPU") != std::string::npos);
  CHECK(refusal(system_of(gpu(0, kToSwitch) + gpu(1))).find("GPU dev 1 has no NVLink to the NVSwitch") !=
        std::string::npos);
}

TEST_CASE("NCCL topology XML: a node without NICs stays one node", "[synth][topology]") {
  char path[] = "/tmp/braid_nccl_topo_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string xml = system_of(gpu(0, kToSwitch) + gpu(1, kToSwitch));
  REQUIRE(write(fd, xml.data(), xml.size()) == ssize_t(xml.size()));
  close(fd);
  Topology t;
  std::string error;
  CHECK(load_topology(path, 1, &t, &error));
  CHECK(t.nranks() == 2);
  CHECK_FALSE(load_topology(path, 2, &t, &error));
  CHECK(error.find("no NICs but more than one node") != std::string::npos);
  CHECK(error.find(path) == 0);
  unlink(path);
}
